"""The byte Transformer trained for real on one TPU chip: the loss curve and held-out bits per
byte, a checkpoint resumed in a fresh process, the first losses on the CPU and the chip side by
side, and KV-cache decode against recomputing at long contexts.

    python tpu_scripts/byte_transformer_run_tpu.py --out DIR [--steps 4000] [--eval-every 500]
        [--ckpt-every 1000] [--resume-step C] [--compare-steps 50] [--contexts 512,2048]
        [--new-tokens 128] [--repeats 5] [--budget-s 510] [--record NAME]
        [--keep-checkpoints] [--allow-cpu-rehearsal] [key=value ...]
                                     (key=value: capstone Config overrides)

The parent is a plain driver: it never starts JAX (one process per chip: libtpu locks the chip
for the life of the process that opened it). Each part runs in a child process of its own,
the TPU ones one after another, each with a timeout cut from --budget-s; a part that fails or
times out is recorded with its error and the rest goes on:

1. train (TPU): training.train on the capstone's default model (float32) for --steps steps,
   metrics every step (DIR/run/metrics.jsonl), held-out bits per byte every --eval-every,
   checkpoints every --ckpt-every (all kept). max_len is raised to the longest decode context
   + --new-tokens (the position table; training rows still use positions < seq_len).
2. resume (TPU): a FRESH process restores checkpoint C (--resume-step, default the last one
   before the end) from a copy of the run holding only that checkpoint, and trains step C+1.
   Same program, same device, same state: its loss must equal the uninterrupted run's step
   C+1 loss bit for bit (float32), and so must its gradient norm.
3. highest (TPU): the first --compare-steps steps again at jax_default_matmul_precision
   "highest" (6 bfloat16 passes per float32 matmul, near float32).
4. cpu (CPU, alongside the TPU parts, JAX_PLATFORMS=cpu via core.runtime.child_env): the same
   config and seeds for --compare-steps steps, and the same steps with the MXU emulated at
   DEFAULT and at HIGHEST (core.perf.tpu_emulation): the predictions the tolerances are
   derived from (capstones/byte_transformer/loss_agreement.py says how). The parent then
   states each agreement: the chip at DEFAULT (the run as trained) and at HIGHEST against
   the CPU, max relative difference against the tolerance.
5. decode (TPU): the trained model, greedy, --new-tokens new bytes after a held-out prompt of
   each --contexts length, with the fp32 KV cache and by recomputing the full forward pass
   each token, each one compiled program (capstones/byte_transformer/decode_compare.py):
   tokens/s (median of --repeats blocked calls after a warmup), speedup, and whether the
   greedy outputs are identical (if not: where, and the logit margins there; the pair is
   then rerun at HIGHEST, untimed, to tell rounding from a bug).
6. record (TPU, with --record NAME): the figures as a benchmark record (core.perf.records,
   the load measured by this parent over the whole run) under DIR/records/NAME/: copy it into
   benchmarks/records/.

What it writes into DIR: tpu_result.json ("kind": "tpu result") when every TPU part ran on a
TPU, else cpu_rehearsal_result.json ("kind": "cpu rehearsal — not a TPU result"), rewritten
after every part; parts/<part>.json, logs/<part>.log, run/ (config, corpus, metrics.jsonl;
its checkpoints are deleted at the end unless --keep-checkpoints), work/ (the resume copy and
the short runs; their checkpoints deleted likewise).

Without a TPU and without --allow-cpu-rehearsal it REFUSES: exit status 3, nothing written.
Other exit statuses: 2 bad arguments (or DIR already holds a result), 1 the training part
failed (the others that could run did), 0 otherwise (a later part's failure is in the JSON).

Rehearse it on a CPU (tiny sizes; every number is a CPU number):

    python tpu_scripts/byte_transformer_run_tpu.py --out /tmp/bt_run --allow-cpu-rehearsal \\
        --steps 20 --eval-every 10 --ckpt-every 10 --compare-steps 6 --contexts 24,40 \\
        --new-tokens 8 --repeats 2 --budget-s 600 d_model=32 num_layers=2 num_heads=2 \\
        seq_len=32 batch_size=4 max_files=6 max_bytes=4096
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

from tpu_scripts import flash_vs_jax  # standard library only: the driver starts no backend

CHILD_ENV = "BYTE_TRANSFORMER_RUN_CHILD"
EXIT_REFUSED = 3
RESULT_FILES = {True: "tpu_result.json", False: "cpu_rehearsal_result.json"}
PARTIAL_FILE = "result.partial.json"
SPEC_FILE = "spec.json"
TPU_PARTS = ("train", "resume", "highest", "decode", "record")
# Seconds each part may take at most, and the least it needs to be worth starting: a part's
# timeout is its cap cut to what the budget leaves after the later parts' minimums.
# Each TPU child pays libtpu's start and its first compiles before it measures anything: the
# first chip run lost resume, highest, decode and record to caps that left no room for them;
# the second (benchmarks/records/byte_transformer_chip_run/2026-12-06_*) lost only highest:
# at HIGHEST the first train step compiled for 49 s, and 49 of 50 steps were done at 80 s.
PART_CAP_S = {"train": 150, "resume": 80, "highest": 120, "decode": 120, "record": 40}
PART_MIN_S = {"train": 60, "resume": 50, "highest": 70, "decode": 70, "record": 25}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/byte_transformer_run_tpu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="result directory (new or empty)")
    parser.add_argument("--steps", type=int, default=4000, help="training steps")
    parser.add_argument("--eval-every", type=int, default=500, help="held-out eval period")
    parser.add_argument("--ckpt-every", type=int, default=1000, help="checkpoint period")
    parser.add_argument("--resume-step", type=int, default=0, help="C (0: last before the end)")
    parser.add_argument("--compare-steps", type=int, default=50, help="CPU-vs-TPU steps")
    parser.add_argument(
        "--contexts", type=flash_vs_jax.positive_ints, default=[512, 2048], help="decode prompts"
    )
    parser.add_argument("--new-tokens", type=int, default=128, help="greedy bytes per prompt")
    parser.add_argument("--repeats", type=int, default=5, help="timed decode calls (median)")
    parser.add_argument("--budget-s", type=float, default=510.0, help="wall-clock budget")
    parser.add_argument("--record", default="", help="write the figures as record NAME")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep them in DIR")
    parser.add_argument(
        "--record-from",
        default="",
        metavar="RUN_DIR",
        help="write the record of a finished run whose record part did not finish (with "
        "--host-record; the record goes under --out/records/): nothing is run",
    )
    parser.add_argument(
        "--host-record", default="", help="a record the same TPU host wrote (its machine)"
    )
    parser.add_argument(
        "--allow-cpu-rehearsal",
        action="store_true",
        help="without a TPU, run on CPU and mark every result 'cpu rehearsal — not a TPU result'",
    )
    parser.add_argument("overrides", nargs="*", help="capstone Config overrides, key=value")
    return parser


def resume_step(steps: int, ckpt_every: int, asked: int = 0) -> int:
    """C: ``asked``, or the last checkpoint step before ``steps``; ValueError unless C is a
    checkpoint step (a multiple of ckpt_every) with a step C+1 after it."""
    step = asked or (steps - 1) // ckpt_every * ckpt_every
    if step < 1 or step % ckpt_every or step >= steps:
        raise ValueError(
            f"the resume step must be a checkpoint step (a multiple of --ckpt-every "
            f"{ckpt_every}) below --steps {steps}, got {step}"
        )
    return step


def make_spec(args) -> dict:
    """The validated plan every child reads (ValueError naming the problem): the run's
    config (max_len raised for the decode contexts), C, and the parts' settings."""
    from capstones.byte_transformer import config as config_lib

    for name in ("steps", "eval_every", "ckpt_every", "compare_steps", "new_tokens", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not args.budget_s > 0:
        raise ValueError("--budget-s must be > 0")
    if args.compare_steps > args.steps:
        raise ValueError(f"--compare-steps {args.compare_steps} exceeds --steps {args.steps}")
    kept = args.steps // args.ckpt_every + 1  # every checkpoint: C must still be there
    base = config_lib.Config(
        steps=args.steps,
        eval_every=args.eval_every,
        ckpt_every=args.ckpt_every,
        max_to_keep=kept,
        log_every=max(1, args.steps // 20),
    )
    config = config_lib.Config.from_overrides(args.overrides, base=base)
    needed = max(args.contexts) + args.new_tokens
    if config.max_len < needed:  # positions of the longest prompt and its new bytes
        config = dataclasses.replace(config, max_len=needed)
    return {
        "config": config.to_dict(),
        "resume_step": resume_step(args.steps, args.ckpt_every, args.resume_step),
        "compare_steps": args.compare_steps,
        "contexts": args.contexts,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "allow_cpu_rehearsal": args.allow_cpu_rehearsal,
        "record": args.record,
        "command": ["python", "tpu_scripts/byte_transformer_run_tpu.py", *args.argv],
    }


# --- the parent: a plain driver ------------------------------------------------------------


class Driver:
    """Runs the children, keeps their logs and parts, writes the result after each part."""

    def __init__(self, out: pathlib.Path, spec: dict, budget_s: float):
        self.out, self.spec = out, spec
        self.deadline = time.monotonic() + budget_s
        self.lock = threading.Lock()
        self.document = {
            "kind": None,
            "is_tpu_result": None,
            "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": spec["command"],
            "config": spec["config"],
            "budget_s": budget_s,
            "parts": {},
        }

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def timeout_for(self, part: str, later: tuple[str, ...]) -> float:
        reserve = sum(PART_MIN_S[name] for name in later)
        return min(PART_CAP_S[part], self.remaining() - reserve)

    def start(self, part: str) -> subprocess.Popen:
        from core import runtime

        extra = {CHILD_ENV: part, "PYTHONUNBUFFERED": "1"}
        if part == "cpu":
            extra["JAX_PLATFORMS"] = "cpu"
        child = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).resolve()), str(self.out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=runtime.child_env(**extra),
            start_new_session=True,  # its own process group: a timeout ends it and its threads
        )
        log = open(self.out / "logs" / f"{part}.log", "w", encoding="utf-8")  # noqa: SIM115
        pump = threading.Thread(target=self._pump, args=(part, child.stdout, log), daemon=True)
        pump.start()
        child.pump = pump
        return child

    def _pump(self, part, stream, log) -> None:
        for line in iter(stream.readline, ""):
            log.write(line)
            log.flush()
            with self.lock:
                print(f"[{part}] {line}", end="", flush=True)
        stream.close()
        log.close()

    def finish(self, part: str, child: subprocess.Popen, timeout: float) -> dict:
        """Wait for ``child`` up to ``timeout`` s (killed past it); its part file, with the
        exit status or the timeout as its error when it did not finish."""
        try:
            code = child.wait(timeout=max(timeout, 0.0))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            code, timed_out = child.wait(), True
        child.pump.join(timeout=10)
        found = read_part(self.out, part)
        if timed_out:
            found["error"] = f"timed out after {timeout:.0f} s (killed; what it wrote is kept)"
        elif code != 0 and "error" not in found:
            found["error"] = f"exit status {code} (logs/{part}.log)"
        found["exit_status"] = None if timed_out else code
        self.document["parts"][part] = found
        self.save()
        return found

    def run(self, part: str, later: tuple[str, ...]) -> dict:
        timeout = self.timeout_for(part, later)
        if timeout < PART_MIN_S[part] / 2:
            found = {"error": f"skipped: {self.remaining():.0f} s of the budget left"}
            self.document["parts"][part] = found
            self.save()
            return found
        print(f"[parent] {part}: up to {timeout:.0f} s", flush=True)
        return self.finish(part, self.start(part), timeout)

    def save(self, final: bool = False) -> pathlib.Path:
        backends = [p.get("backend") for n, p in self.document["parts"].items() if n in TPU_PARTS]
        on_tpu = bool(backends) and all(b == "tpu" for b in backends if b is not None)
        on_tpu = on_tpu and any(b == "tpu" for b in backends)
        from capstones.byte_transformer import run_manifest

        self.document["is_tpu_result"] = on_tpu
        self.document["kind"] = (
            run_manifest.TPU_RESULT_KIND if on_tpu else (run_manifest.REHEARSAL_KIND)
        )
        path = self.out / (RESULT_FILES[on_tpu] if final else PARTIAL_FILE)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.document, indent=1) + "\n")
        os.replace(temporary, path)
        if final and (self.out / PARTIAL_FILE).exists():
            (self.out / PARTIAL_FILE).unlink()
        return path


def read_part(out: pathlib.Path, part: str) -> dict:
    path = out / "parts" / f"{part}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_part(out: pathlib.Path, part: str, found: dict) -> None:
    path = out / "parts" / f"{part}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(found, indent=1) + "\n")
    os.replace(temporary, path)


def run_parent(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    out = pathlib.Path(args.out)
    if args.record_from:
        return record_from(args, out)
    if any((out / name).exists() for name in (*RESULT_FILES.values(), PARTIAL_FILE)):
        print(f"error: {out} already holds a result: use a new --out", file=sys.stderr)
        return 2
    try:
        spec = make_spec(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from core import runtime
    from core.perf import records

    if not runtime.host_has_tpu() and not args.allow_cpu_rehearsal:
        print(
            "refused: this host has no TPU (no /dev/accel*, no vfio). This script writes TPU "
            "results only on a TPU VM; a CPU number never stands in for a TPU number. To "
            "rehearse here, pass --allow-cpu-rehearsal (results are marked 'cpu rehearsal — "
            "not a TPU result'). Nothing was written.",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    load_start = records.read_load()
    for folder in ("parts", "logs", "work"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    (out / SPEC_FILE).write_text(json.dumps(spec, indent=1) + "\n")
    driver = Driver(out, spec, args.budget_s)
    cpu = driver.start("cpu")  # on the CPU: it never opens the chip, so it runs alongside
    train = driver.run("train", ("resume", "highest", "decode", "record"))
    if "error" in train and not train.get("losses"):
        for part in ("resume", "highest", "decode"):
            driver.document["parts"][part] = {"error": "skipped: the training part failed"}
    else:
        driver.run("resume", ("highest", "decode", "record"))
        driver.run("highest", ("decode", "record"))
        driver.run("decode", ("record",))
    driver.finish("cpu", cpu, driver.remaining() - PART_MIN_S["record"])
    summarize(driver.document, spec)
    driver.save()
    if args.record:
        from core.perf import records as records_lib

        spec["load"] = records_lib.measure_load(load_start)
        (out / SPEC_FILE).write_text(json.dumps(spec, indent=1) + "\n")
        driver.run("record", ())
    if not args.keep_checkpoints:
        for folder in [out / "run" / "checkpoints", *(out / "work").glob("*/checkpoints")]:
            shutil.rmtree(folder, ignore_errors=True)
    from jax._src import xla_bridge

    driver.document["parent_started_jax"] = xla_bridge.backends_are_initialized()
    path = driver.save(final=True)
    print(f"[parent] {driver.document['kind']}: {path}", flush=True)
    return 1 if "error" in train and not train.get("losses") else 0


def record_from(args, out: pathlib.Path) -> int:
    """--record-from: the record of a finished run (chip_run.record_from_result)."""
    from capstones.byte_transformer import chip_run

    if not args.host_record:
        print("error: --record-from needs --host-record (the TPU host's machine)", file=sys.stderr)
        return 2
    try:
        path = chip_run.record_from_result(
            pathlib.Path(args.record_from), pathlib.Path(args.host_record), out / "records"
        )
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"record: {path}")
    return 0


def summarize(document: dict, spec: dict) -> None:
    """The parent's comparisons from the parts (pure bookkeeping, no JAX): the resume check
    and the CPU-vs-TPU agreements (capstones/byte_transformer/chip_run.py)."""
    from capstones.byte_transformer import chip_run

    document["summary"] = chip_run.summary(document["parts"], spec)
    for line in chip_run.summary_lines(document["summary"]):
        print(f"[parent] {line}", flush=True)


# --- the children ----------------------------------------------------------------------------


def _say(line: str) -> None:
    print(line, flush=True)


def run_child(part: str, out: pathlib.Path) -> int:
    spec = json.loads((out / SPEC_FILE).read_text())
    from core import runtime

    runtime.use_cpu_devices()  # no TPU here: pin the CPU; a TPU VM keeps its TPU
    import jax

    from capstones.byte_transformer import chip_run
    from capstones.byte_transformer import config as config_lib

    backend = jax.default_backend()
    kind = jax.devices()[0].device_kind
    _say(f"backend {backend} ({len(jax.devices())} x {kind})")
    found = {"backend": backend, "device_kind": kind, "versions": chip_run.versions()}
    if part != "cpu" and backend != "tpu" and not spec["allow_cpu_rehearsal"]:
        write_part(out, part, {**found, "error": f"refused: backend {backend!r}, not 'tpu'"})
        return EXIT_REFUSED
    config = config_lib.Config.from_dict(spec["config"])

    def save(values: dict) -> None:
        found.update(values)
        write_part(out, part, found)

    try:
        if part == "train":
            chip_run.train_part(config, out / "run", spec, save, _say)
        elif part == "resume":
            chip_run.resume_part(config, out / "run", out / "work" / "resume", spec, save, _say)
        elif part == "highest":
            jax.config.update("jax_default_matmul_precision", "highest")
            chip_run.first_steps_part(config, out / "work" / "highest", spec, save, _say)
        elif part == "cpu":
            chip_run.cpu_part(config, out / "work" / "cpu", spec, save, _say)
        elif part == "decode":
            chip_run.decode_part(config, out / "run", spec, save, _say)
        elif part == "record":
            result = json.loads((out / PARTIAL_FILE).read_text())
            save({"path": chip_run.write_record(spec, result, out / "records")})
        else:
            raise ValueError(f"unknown part {part!r}")
    except Exception as exc:  # noqa: BLE001 - recorded in the part; the parent goes on
        save({"error": f"{type(exc).__name__}: {str(exc).strip()[:400]}"})
        _say(f"failed: {found['error']}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    part = os.environ.get(CHILD_ENV)
    if part:
        return run_child(part, pathlib.Path(argv[0]))
    return run_parent(argv)


if __name__ == "__main__":
    sys.exit(main())
