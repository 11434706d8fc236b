"""The runtime receipt: what JAX sees on this host, and a collective that proves it works.

``python -m tpu_scripts receipt [--json PATH]`` prints backend, device kind and count, device
coordinates (``device.coords`` on TPU), process index and count, host, versions (jax, jaxlib,
libtpu) and a synchronized collective check: a psum over every device (``jax.shard_map``) of
device i's value (i + 1), which must equal the closed form n (n + 1) / 2, timed as one warmup
(compile) call then the median of repeated calls. The same command runs on this CPU host
(8 virtual devices) and, unchanged, on a TPU VM.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import socket

import pydantic

from core import documents

SCHEMA_VERSION = 1


class _Host(documents.Document):
    hostname: str
    platform: str
    python: str
    tpu_vm: bool


class _Versions(documents.Document):
    jax: str
    jaxlib: str
    libtpu: str | None


class _Collective(documents.Document):
    op: str
    devices: int
    result: float
    expected: float
    passed: bool
    compile_s: float
    median_s: float
    repeats: int


class _Device(documents.Document):
    id: int
    kind: str
    process_index: int
    coords: list | None
    core_on_chip: int | None


class Receipt(documents.Document):
    """runtime_receipt.json (schema_version 1): the devices one launch saw and a psum check."""

    schema_version: int
    created_utc: str
    backend: str
    device_kind: str
    device_count: int
    local_device_count: int
    process_index: int
    process_count: int
    devices: list[_Device]
    host: _Host
    versions: _Versions
    collective: _Collective

    _iso_created = pydantic.field_validator("created_utc")(documents.iso_time)

    @pydantic.model_validator(mode="after")
    def _every_device_listed(self):
        if len(self.devices) != self.device_count:
            raise ValueError(
                f"lists {len(self.devices)} devices but device_count is {self.device_count}"
            )
        return self


def validate(receipt) -> dict:
    """``receipt`` if every required field is there with the right type, else ValueError."""
    if not isinstance(receipt, dict):
        raise ValueError(f"a runtime receipt is a JSON object, got {type(receipt).__name__}")
    if receipt.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"runtime receipt schema_version {receipt.get('schema_version')!r}; expected "
            f"{SCHEMA_VERSION}"
        )
    return documents.validate(Receipt, receipt, "runtime receipt")


# The float32 sum of the integers 1..n is exact while n (n + 1) / 2 < 2^24 (n <= 5792
# devices); past that, this bound relative to the total allows a few roundings.
PSUM_TOLERANCE = 1e-6


def psum_expected(device_count: int) -> float:
    """Closed form of sum_{i=0}^{n-1} (i + 1) = n (n + 1) / 2: what the psum must return."""
    return device_count * (device_count + 1) / 2


def collective_check(repeats: int = 5) -> dict:
    """psum over all devices of (device index + 1): result, closed form, compile and median s."""
    import jax
    import numpy as np

    from core import numerics
    from core.perf import timing

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    devices = jax.devices()
    n = len(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    spec = jax.sharding.PartitionSpec("d")
    sharding = jax.sharding.NamedSharding(mesh, spec)
    # Each process supplies its own devices' shards: works on one host and on a Pod slice.
    values_N = jax.make_array_from_callback(
        (n,), sharding, lambda index: np.arange(n, dtype=np.float32)[index] + 1
    )

    @jax.jit
    def total(x_N):
        summed = jax.shard_map(
            lambda x: jax.lax.psum(x, "d"), mesh=mesh, in_specs=spec, out_specs=spec
        )(x_N)
        return summed

    out, compile_s = timing.timed_call(total, values_N)  # trace + compile + one run
    steady = timing.time_calls(total, values_N, repeats=repeats, warmup=0)
    # Every device holds the total; read one addressable shard (works multi-process too).
    result = float(np.asarray(out.addressable_shards[0].data).reshape(-1)[0])
    all_equal = all(np.all(np.asarray(shard.data) == result) for shard in out.addressable_shards)
    expected = psum_expected(n)
    return {
        "op": "psum(device_index + 1) over all devices via jax.shard_map",
        "devices": n,
        "result": result,
        "expected": expected,
        "passed": bool(all_equal and numerics.scaled_max_error(result, expected) <= PSUM_TOLERANCE),
        "compile_s": compile_s,
        "median_s": steady.summary.median,
        "repeats": repeats,
    }


def runtime_receipt(repeats: int = 5) -> dict:
    """The receipt of this process's JAX runtime (validated)."""
    import jax

    from core import runtime

    devices = jax.devices()
    device_rows = []
    for device in devices:
        coords = getattr(device, "coords", None)
        core = getattr(device, "core_on_chip", None)
        device_rows.append(
            {
                "id": int(device.id),
                "kind": str(device.device_kind),
                "process_index": int(device.process_index),
                "coords": [int(c) for c in coords] if coords is not None else None,
                "core_on_chip": int(core) if core is not None else None,
            }
        )
    receipt = {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "backend": jax.default_backend(),
        "device_kind": str(devices[0].device_kind),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "devices": device_rows,
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "tpu_vm": runtime.host_has_tpu(),
        },
        "versions": {
            "jax": jax.__version__,
            "jaxlib": runtime.package_version("jaxlib") or "unknown",
            "libtpu": runtime.package_version("libtpu")
            or runtime.package_version("libtpu-nightly"),
        },
        "collective": collective_check(repeats),
    }
    return validate(receipt)


def write_json_atomic(path: str | os.PathLike, receipt: dict) -> pathlib.Path:
    """Write the validated receipt beside ``path`` and rename: never a half-written file."""
    text = json.dumps(validate(receipt), indent=2, sort_keys=True) + "\n"
    return documents.write_text_atomic(path, text)


def read_json(path: str | os.PathLike) -> dict:
    """A saved receipt, validated (ValueError names the problem)."""
    return validate(documents.read_json(path))


def summary_lines(receipt: dict) -> list[str]:
    """The receipt as short human-readable lines (what the CLI prints)."""
    collective = receipt["collective"]
    coords = [d["coords"] for d in receipt["devices"] if d["coords"] is not None]
    return [
        f"backend: {receipt['backend']}   device kind: {receipt['device_kind']}",
        f"devices: {receipt['device_count']} ({receipt['local_device_count']} local)   "
        f"process {receipt['process_index']} of {receipt['process_count']}",
        f"coords: {coords if coords else 'none (not a TPU)'}",
        f"host: {receipt['host']['hostname']}   TPU VM: {receipt['host']['tpu_vm']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in receipt["versions"].items() if v),
        f"collective: psum = {collective['result']:g} (closed form {collective['expected']:g}) "
        f"{'PASS' if collective['passed'] else 'FAIL'}; "
        f"compile {collective['compile_s'] * 1e3:.1f} ms, "
        f"median step {collective['median_s'] * 1e3:.3f} ms over {collective['repeats']}",
    ]


@dataclasses.dataclass(frozen=True)
class LiveReceipt:
    """A receipt taken on this host by ``live_receipt``: the receipt (None when the child
    failed), where it ran, the command's output and exit code."""

    receipt: dict | None
    where: str  # "a child process" or "this process"
    stdout: str
    stderr: str
    returncode: int


def live_receipt(repeats: int, cwd: str | os.PathLike, timeout_s: float = 120) -> LiveReceipt:
    """This host's receipt, the lesson's way: ``python -m tpu_scripts receipt`` in a child
    process, as a learner runs it on a TPU VM. One process per chip: while this process holds
    the TPU a child could not open it (libtpu's lock), so the receipt is taken here instead,
    on the chip this process holds, and ``where`` says so."""
    import subprocess
    import sys
    import tempfile

    import jax

    from core import runtime

    if runtime.holds_tpu():
        taken = runtime_receipt(repeats)
        return LiveReceipt(taken, "this process", "\n".join(summary_lines(taken)), "", 0)
    with tempfile.TemporaryDirectory(prefix="receipt_") as folder:
        out = pathlib.Path(folder) / "receipt.json"
        argv = [sys.executable, "-m", "tpu_scripts", "receipt", "--json", str(out)]
        done = subprocess.run(
            [*argv, "--repeats", str(repeats)],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout_s,
            env=runtime.child_env(JAX_NUM_CPU_DEVICES=str(jax.device_count())),
        )
        taken = read_json(out) if done.returncode == 0 and out.exists() else None
    return LiveReceipt(taken, "a child process", done.stdout, done.stderr, done.returncode)


def main(json_path: str | None = None, repeats: int = 5, distributed: bool = False) -> int:
    """Print the receipt (and save it). ``distributed``: every host of a multi-host slice runs
    this (``--worker=all``) and joins one JAX job first, so the psum spans the whole slice.
    """
    from core import runtime

    if distributed:
        from tpu_scripts import rehearse

        if rehearse.ENV_COORDINATOR in os.environ:  # a local rehearsal
            rehearse.initialize_from_env()
        else:  # a Cloud TPU slice: JAX finds the other workers itself
            import jax

            jax.distributed.initialize()
    else:
        runtime.use_cpu_devices()
    receipt = runtime_receipt(repeats)
    for line in summary_lines(receipt):
        print(line)
    if json_path:
        print(write_json_atomic(json_path, receipt))
    return 0 if receipt["collective"]["passed"] else 1
