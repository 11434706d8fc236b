"""Rehearse a multi-host (Pod slice) run on one CPU host: N local JAX processes.

``python -m tpu_scripts rehearse --processes 2 --devices-per-process 4 SCRIPT [-- args]``
starts N copies of SCRIPT, each told (through environment variables) its process id, the
process count, the coordinator address on a free local port and its CPU device count. The
script calls ``initialize_from_env()`` first: it asks JAX for that many CPU devices before
the backend starts and calls ``jax.distributed.initialize(coordinator_address=...,
num_processes=N, process_id=i)`` (CPU collectives: gloo, JAX's default). On a TPU VM the
same call without those variables does nothing special (``jax.distributed.initialize()``
there finds the slice's workers itself).

The rehearsal collects every process's output and exit code, kills stragglers on a timeout
or when one process fails, and reads the JSON result line each process prints
(``RESULT_PREFIX {...}``) so a 2x4 run can be compared with a 1x8 run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from core import runtime

RESULT_PREFIX = "REHEARSE_RESULT "
ENV_COORDINATOR = "REHEARSE_COORDINATOR"
ENV_PROCESSES = "REHEARSE_NUM_PROCESSES"
ENV_PROCESS_ID = "REHEARSE_PROCESS_ID"
ENV_DEVICES = "REHEARSE_DEVICES_PER_PROCESS"
MAX_PROCESSES = 8
MAX_DEVICES = 64
EXAMPLE = pathlib.Path(__file__).resolve().parent / "examples" / "sharded_step.py"


class RehearsalFailed(RuntimeError):
    """A process failed or timed out (the message names which, with its output's tail)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def initialize_from_env() -> tuple[int, int]:
    """In a rehearsed process: CPU devices + jax.distributed.initialize. Returns (id, count).

    Must run before any JAX computation. Without the rehearsal variables it only asks for
    the lab's CPU devices (runtime.use_cpu_devices) and returns (0, 1): a plain one-process run.
    """
    import jax

    if ENV_COORDINATOR not in os.environ:
        runtime.use_cpu_devices()
        return 0, 1
    process_id = int(os.environ[ENV_PROCESS_ID])
    count = int(os.environ[ENV_PROCESSES])
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", int(os.environ[ENV_DEVICES]))
    # A rehearsal compiles afresh, like a first run on a slice: executables of a multi-process
    # CPU job read back from a persistent compilation cache have been a source of failures
    # (openxla/xla#18286), and a test suite may share one cache across its processes.
    jax.config.update("jax_enable_compilation_cache", False)
    jax.distributed.initialize(
        coordinator_address=os.environ[ENV_COORDINATOR],
        num_processes=count,
        process_id=process_id,
    )
    return process_id, count


def print_result(result: dict) -> None:
    """Print the script's result as the one line the rehearsal reads back."""
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)


@dataclasses.dataclass(frozen=True)
class ProcessOutput:
    """One rehearsed process: id, exit code (None: killed), output, parsed result."""

    process_id: int
    returncode: int | None
    stdout: str
    stderr: str
    result: dict | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None


@dataclasses.dataclass(frozen=True)
class Rehearsal:
    processes: int
    devices_per_process: int
    seconds: float
    outputs: tuple[ProcessOutput, ...]

    @property
    def result(self) -> dict:
        """Process 0's result (every process prints one; ``results_agree`` compares them)."""
        return self.outputs[0].result


def parse_result(stdout: str) -> dict | None:
    """The last RESULT_PREFIX line of ``stdout`` as a dict, or None."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            found = json.loads(line[len(RESULT_PREFIX) :])
    return found


def validate_args(processes: int, devices_per_process: int, script) -> pathlib.Path:
    if not 1 <= processes <= MAX_PROCESSES:
        raise ValueError(f"--processes must be between 1 and {MAX_PROCESSES}, got {processes}")
    if not 1 <= devices_per_process <= MAX_DEVICES:
        raise ValueError(
            f"--devices-per-process must be between 1 and {MAX_DEVICES}, got {devices_per_process}"
        )
    script = pathlib.Path(script)
    if not script.is_file():
        raise ValueError(f"no such script: {script}")
    return script


def rehearse(
    script: str | os.PathLike,
    processes: int = 2,
    devices_per_process: int = 4,
    script_args: Sequence[str] = (),
    timeout_s: float = 120,
    grace_s: float = 5,
) -> Rehearsal:
    """Run ``script`` as ``processes`` JAX processes of ``devices_per_process`` CPU devices.

    Raises RehearsalFailed when a process exits non-zero, prints no result, or the run
    exceeds ``timeout_s``; the others are killed (they would wait forever in a collective).
    """
    script = validate_args(processes, devices_per_process, script)
    coordinator = f"127.0.0.1:{free_port()}"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rehearse_") as tmp:
        procs, files = [], []
        for process_id in range(processes):
            out = open(pathlib.Path(tmp) / f"{process_id}.out", "w+", encoding="utf-8")
            err = open(pathlib.Path(tmp) / f"{process_id}.err", "w+", encoding="utf-8")
            files.append((out, err))
            env = runtime.child_env(
                JAX_PLATFORMS="cpu",
                JAX_NUM_CPU_DEVICES=str(devices_per_process),
                **{
                    ENV_COORDINATOR: coordinator,
                    ENV_PROCESSES: str(processes),
                    ENV_PROCESS_ID: str(process_id),
                    ENV_DEVICES: str(devices_per_process),
                },
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), *script_args], stdout=out, stderr=err, env=env
                )
            )
        problem, failed_at = None, None
        try:
            while any(p.poll() is None for p in procs):
                now = time.perf_counter()
                if now - started > timeout_s:
                    problem = f"timed out after {timeout_s:.0f} s"
                    break
                bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
                if bad and failed_at is None:
                    failed_at = now
                if failed_at is not None and now - failed_at > grace_s:
                    break  # the others wait in a collective for the dead one
                time.sleep(0.05)
        finally:
            for proc in procs:  # stragglers
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        outputs = []
        for process_id, (proc, (out, err)) in enumerate(zip(procs, files, strict=True)):
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
            out.close()
            err.close()
            code = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else None
            outputs.append(ProcessOutput(process_id, code, stdout, stderr, parse_result(stdout)))
    rehearsal = Rehearsal(
        processes, devices_per_process, time.perf_counter() - started, tuple(outputs)
    )
    failed = [o for o in outputs if not o.ok]
    if problem or failed:
        lines = [f"rehearsal of {script.name} with {processes} processes failed: {problem or ''}"]
        for o in failed:
            why = "killed" if o.returncode is None else f"exit code {o.returncode}"
            why += "" if o.result is not None or o.returncode is None else ", no result line"
            lines.append(f"--- process {o.process_id}: {why}; stderr tail:\n{o.stderr[-1500:]}")
        error = RehearsalFailed("\n".join(lines))
        error.rehearsal = rehearsal
        raise error
    return rehearsal


# Processes, and a multi-process run vs one process, reduce in different orders: float32
# results agree to ~1e-6, not bitwise (measured on this stack), so that is the bound.
AGREEMENT_TOLERANCE = 1e-6


def max_difference(a: dict, b: dict) -> float:
    """Largest absolute difference between the numbers of two results (same keys)."""
    import numpy as np

    from core import numerics

    if set(a) != set(b):
        raise ValueError(f"results have different keys: {sorted(a)} vs {sorted(b)}")
    worst = 0.0
    for key in a:
        if key.endswith("_s"):  # timings are not results
            continue
        x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"result {key!r} has shape {x.shape} vs {y.shape}")
        worst = max(worst, numerics.max_abs_error(x, y))
    return worst


def results_agree(rehearsal: Rehearsal, tolerance: float = AGREEMENT_TOLERANCE) -> bool:
    """Every process printed the same result (to ``tolerance``)."""
    first = rehearsal.result
    return all(max_difference(first, o.result) <= tolerance for o in rehearsal.outputs)


def compare_with_single_process(
    script, processes: int = 2, devices_per_process: int = 4, script_args=(), timeout_s: float = 180
) -> tuple[Rehearsal, Rehearsal, float]:
    """Run (processes x devices) and (1 x processes*devices); return both and the max difference."""
    multi = rehearse(script, processes, devices_per_process, script_args, timeout_s)
    single = rehearse(script, 1, processes * devices_per_process, script_args, timeout_s)
    return multi, single, max_difference(multi.result, single.result)


def main(script, processes, devices_per_process, script_args, timeout_s, compare: bool) -> int:
    try:
        if compare:
            multi, single, difference = compare_with_single_process(
                script, processes, devices_per_process, script_args, timeout_s
            )
        else:
            multi, single, difference = (
                rehearse(script, processes, devices_per_process, script_args, timeout_s),
                None,
                None,
            )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RehearsalFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for output in multi.outputs:
        print(f"--- process {output.process_id} of {multi.processes} (exit {output.returncode})")
        print(output.stdout.rstrip())
    print(f"{multi.processes}x{multi.devices_per_process} wall time: {multi.seconds:.1f} s")
    if not results_agree(multi):
        print("FAIL: processes printed different results")
        return 1
    if single is not None:
        passed = difference <= AGREEMENT_TOLERANCE
        print(
            f"{'PASS' if passed else 'FAIL'}: {multi.processes}x{multi.devices_per_process} result "
            f"vs 1x{single.devices_per_process}: max difference {difference:.3g} "
            f"(tolerance {AGREEMENT_TOLERANCE:g})"
        )
        return 0 if passed else 1
    return 0
