"""This project's flash kernel against JAX's best (Pallas flash attention, splash attention)
and XLA's attention, in one process on one chip: causal, q, k, v (B, H, T, D), each kernel
over block_q x block_k, forward and forward + backward, best configuration per kernel per T.

    python tpu_scripts/flash_vs_jax.py --out OUT.json [--budget-s 420] [--seq-lens 8192,...]
        [--blocks 128,256,512,1024] [--kernels this,jax_flash,splash,xla] [--calls 10]
        [--chain 8] [--backward-top 4] [--no-ablation] [--record NAME]
    python tpu_scripts/flash_vs_jax.py --tiny --out /tmp/flash.json     (CPU: bookkeeping only)

What it does (core.kernels.attention_sweep holds the kernels' one calling convention, the
FLOP formula and the bookkeeping): first each kernel's agreement with NumPy float64 at
--agreement-t, in bfloat16 and float32 (O, dQ, dK, dV; scaled max error against the dtype's
tolerance); then, T by T in the order given (the default puts T=8192, the issue's target,
first), every kernel's forward at every block pair (block <= T), and forward + backward at
that kernel's --backward-top fastest forward blocks (0: every pair). Each configuration is
compiled ahead of time, dispatched --warmup times, then --calls times with block_until_ready;
a dispatch runs --chain calls of the kernel, each call's outputs the next one's inputs
(attention_sweep.programs), and a row's time is the median dispatch divided by --chain: the
kernel's own time, where one call a dispatch also pays the host's dispatch and sync (--chain
1 times it that way, as the record of 2026-12-06 did). Then TFLOP/s (causal FLOPs halved:
attention_sweep.FLOP_FORMULA) and the fraction of the chip's bf16 peak (core.tpu.specs).
Then, per T, unless --no-ablation, this kernel's forward ablation "matmuls_only" at its
fastest forward blocks (flash_attention.VARIANTS: the same grid, blocks and causal skip, the
two matmuls alone, no mask or softmax): its time over the kernel's is the share the MXU's
work and the pipeline's copies take, the rest is the vector unit's (mask, softmax).
A configuration that fails (out of memory, a block the kernel refuses) is recorded with its
error and the sweep goes on; once --budget-s has passed, every remaining configuration is
recorded as skipped with the reason. OUT.json is rewritten after every configuration, so a
run cut short keeps what it measured.

OUT.json: {"kind", "is_tpu_result", "device_kind", "versions", "shape", "dtype",
"flop_formula", "chain", "timing", "peak_flops", "agreement": [...], "rows": [...],
"best": [...], "speedups": [...], "budget_s", "elapsed_s"}; --record NAME also writes the
figures as a benchmark record (core.perf.records) under OUT's folder:
records/NAME/<date>_<machine>.json, measured and load-checked on the machine that ran (copy
it into benchmarks/records/).

Exit status: 0 done (errors and skips are in the rows), 2 bad arguments, 3 refused: no TPU
and no --tiny (a CPU number never stands in for a TPU number).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
import time

EXIT_REFUSED = 3
# --tiny: the sizes a CPU runs in interpret mode in seconds (the bookkeeping, not speed)
TINY = {
    "seq_lens": [256],
    "blocks": [128, 256],
    "calls": 2,
    "chain": 2,
    "warmup": 1,
    "agreement_t": 128,
    "heads": 1,
}


def positive_ints(text: str) -> list[int]:
    """An argparse type: "512,2048" -> [512, 2048]; every value >= 1."""
    try:
        values = [int(item) for item in text.split(",") if item]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/flash_vs_jax.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="the result JSON file")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock cap")
    parser.add_argument("--seq-lens", type=positive_ints, default=[8192, 4096, 2048, 16384])
    parser.add_argument("--blocks", type=positive_ints, default=[128, 256, 512, 1024])
    parser.add_argument("--kernels", default="this,jax_flash,splash,xla")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--calls", type=int, default=10, help="timed dispatches (median)")
    parser.add_argument(
        "--chain", type=int, default=8, help="kernel calls per dispatch, chained (>= 1)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--backward-top", type=int, default=4, help="fwd+bwd at each kernel's N best forward"
    )
    parser.add_argument("--agreement-t", type=int, default=1024)
    parser.add_argument(
        "--no-ablation",
        dest="ablation",
        action="store_false",
        help="leave out this kernel's matmuls-only forward at its best blocks",
    )
    parser.add_argument("--record", default="", help="also write a benchmark record NAME")
    parser.add_argument(
        "--tiny", action="store_true", help="CPU bookkeeping test: interpret mode, T=256"
    )
    return parser


def _say(line: str) -> None:
    print(line, flush=True)


def _versions() -> dict:
    import jax
    import jaxlib

    versions = {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
    try:
        from importlib import metadata

        versions["libtpu"] = metadata.version("libtpu")
    except Exception:  # noqa: BLE001 - not installed off a TPU host
        pass
    return versions


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc) else ''}"


def time_program(
    program, args, warmup: int, calls: int, chain: int = 1
) -> tuple[float, list[float]]:
    """(compile seconds, seconds per kernel call of each timed dispatch): compiled ahead of
    time, ``warmup`` dispatches, then ``calls`` dispatches each ended by block_until_ready,
    each one's seconds divided by ``chain``, the calls a dispatch runs."""
    import jax

    start = time.perf_counter()
    compiled = program.lower(*args).compile()
    compile_s = time.perf_counter() - start
    for _ in range(warmup):
        jax.block_until_ready(compiled(*args))
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        seconds.append((time.perf_counter() - start) / chain)
    return compile_s, seconds


class Sweep:
    """The run's state: rows measured so far, written to OUT after each one."""

    def __init__(self, args, document: dict, budget):
        self.args, self.document, self.budget = args, document, budget
        self.rows: list[dict] = document["rows"]

    def save(self) -> None:
        from core.kernels import attention_sweep

        self.document["best"] = attention_sweep.best_per_kernel(self.rows)
        self.document["speedups"] = attention_sweep.speedups(self.document["best"])
        self.document["elapsed_s"] = round(self.budget.elapsed(), 1)
        out = pathlib.Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = out.with_suffix(out.suffix + ".tmp")
        temporary.write_text(json.dumps(self.document, indent=1) + "\n")
        os.replace(temporary, out)

    def measure(
        self,
        kernel: str,
        pass_: str,
        t: int,
        blocks: tuple[int, int],
        operands,
        variant: str = "attention",
    ):
        from core.kernels import attention_sweep

        shape = self.document["shape"][:2] + [t] + self.document["shape"][3:]
        common = {
            "shape": tuple(shape),
            "peak_flops": self.document["peak_flops"],
            "variant": variant,
        }
        if self.budget.expired():
            item = attention_sweep.row(
                kernel, pass_, t, *blocks, "skipped", reason=self.budget.reason(), **common
            )
        else:
            try:
                attend = attention_sweep.make_attend(
                    kernel, t, shape[1], shape[3], *blocks, self.document["interpret"], variant
                )
                chain = self.args.chain
                program = attention_sweep.programs(kernel, attend, self.interpret, chain)[pass_]
                inputs = operands[:3] if pass_ == "forward" else operands
                compile_s, seconds = time_program(
                    program, inputs, self.args.warmup, self.args.calls, chain
                )
                item = attention_sweep.row(
                    kernel,
                    pass_,
                    t,
                    *blocks,
                    "ok",
                    seconds=seconds,
                    compile_s=compile_s,
                    chain=chain,
                    **common,
                )
            except Exception as exc:  # noqa: BLE001 - recorded; the sweep goes on
                item = attention_sweep.row(
                    kernel, pass_, t, *blocks, "error", reason=_error_text(exc), **common
                )
        self.rows.append(item)
        self.save()
        timing = (
            f"{item['median_s'] * 1e3:.3f} ms, {item['tflops_per_s']:.1f} TFLOP/s"
            if item["status"] == "ok"
            else f"{item['status']}: {item['reason']}"
        )
        shown = kernel if variant == "attention" else f"{kernel} ({variant})"
        _say(f"[{self.budget.elapsed():5.0f} s] T={t} {shown} {pass_} {blocks}: {timing}")
        return item

    @property
    def interpret(self):
        return self.document["interpret"]


def operands_for(shape, dtype):
    import jax

    keys = jax.random.split(jax.random.key(1), 4)
    return tuple(jax.random.normal(key, shape, jax.numpy.float32).astype(dtype) for key in keys)


def run(args) -> int:
    import jax
    import jax.numpy as jnp

    from core.kernels import attention_sweep
    from core.tpu import specs

    on_tpu = jax.default_backend() == "tpu"
    if not on_tpu and not args.tiny:
        print(
            "refused: no TPU here (a CPU number never stands in for a TPU number); "
            "--tiny runs the bookkeeping on CPU",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    if args.tiny:
        for name, value in TINY.items():
            setattr(args, name, value)
    kernels = [name for name in args.kernels.split(",") if name]
    unknown = sorted(set(kernels) - set(attention_sweep.KERNELS))
    if unknown:
        print(
            f"error: unknown kernels {unknown}; known: {attention_sweep.KERNELS}", file=sys.stderr
        )
        return 2
    device_kind = jax.devices()[0].device_kind
    dtype = jnp.dtype(args.dtype)
    budget = attention_sweep.Budget(args.budget_s)
    document = {
        "kind": "tpu result" if on_tpu else "cpu rehearsal — not a TPU result",
        "is_tpu_result": on_tpu,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "tpu_scripts/flash_vs_jax.py", *sys.argv[1:]],
        "backend": jax.default_backend(),
        "device_kind": device_kind,
        "versions": _versions(),
        "shape": [args.batch, args.heads, None, args.head_dim],
        "dtype": dtype.name,
        "flop_formula": attention_sweep.FLOP_FORMULA,
        "chain": args.chain,
        "timing": timing_statement(args.chain),
        "peak_flops": specs.bf16_peak_of_device_kind(device_kind) if on_tpu else None,
        "interpret": False if on_tpu else True,
        "budget_s": args.budget_s,
        "agreement": [],
        "rows": [],
    }
    sweep = Sweep(args, document, budget)
    agreement_shape = (args.batch, args.heads, args.agreement_t, args.head_dim)
    for kernel in kernels:
        blocks = (0, 0) if kernel == "xla" else (min(512, args.agreement_t),) * 2
        for check_dtype in (jnp.bfloat16, jnp.float32):
            if budget.expired():
                document["agreement"].append(
                    {
                        "kernel": kernel,
                        "dtype": jnp.dtype(check_dtype).name,
                        "error": budget.reason(),
                    }
                )
                continue
            try:
                found = attention_sweep.agreement(
                    kernel, agreement_shape, check_dtype, blocks, document["interpret"]
                )
            except Exception as exc:  # noqa: BLE001
                found = {
                    "kernel": kernel,
                    "dtype": jnp.dtype(check_dtype).name,
                    "error": _error_text(exc),
                }
            document["agreement"].append(found)
            _say(f"agreement {kernel} {found['dtype']}: {found.get('agrees', found.get('error'))}")
    sweep.save()
    for t in args.seq_lens:
        shape = (args.batch, args.heads, t, args.head_dim)
        operands = operands_for(shape, dtype)
        pairs = attention_sweep.block_pairs(t, args.blocks)
        for kernel in kernels:
            kernel_pairs = [(0, 0)] if kernel == "xla" else pairs
            forward = [sweep.measure(kernel, "forward", t, p, operands) for p in kernel_pairs]
            ran = sorted((r for r in forward if r["status"] == "ok"), key=lambda r: r["median_s"])
            top = ran if args.backward_top == 0 else ran[: args.backward_top]
            chosen = [(r["block_q"], r["block_k"]) for r in top] or kernel_pairs[:1]
            for blocks in chosen:
                sweep.measure(kernel, "forward_backward", t, blocks, operands)
            if kernel == "this" and args.ablation and ran:
                best = (ran[0]["block_q"], ran[0]["block_k"])
                sweep.measure(kernel, "forward", t, best, operands, variant="matmuls_only")
        del operands
    sweep.save()
    for line in document["speedups"]:
        _say(f"{line['pass']} T={line['T']}: this kernel {line['speedup']:.2f}x {line['rival']}")
    if args.record:
        write_record(args, document)
    _say(f"wrote {args.out}")
    return 0


def timing_statement(chain: int, calls: str = "kernel calls") -> str:
    """How a row's seconds were timed, for the document and the record's notes; ``calls``
    names what a dispatch chains (the matmul sweep's are products)."""
    if chain == 1:
        return f"one of the {calls} per timed dispatch, the host's dispatch and sync included"
    return (
        f"{chain} chained {calls} per timed dispatch, the median dispatch divided by "
        f"{chain} (the host's dispatch and sync spread over the chain)"
    )


def record_figures(document: dict) -> dict:
    """The record's flat figures: each best row's median ms and TFLOP/s, and the speedups."""
    figures = {"device_kind": document["device_kind"], "dtype": document["dtype"]}
    for item in document["best"]:
        key = f"{item['kernel']}_{item['pass']}_t{item['T']}"
        figures[f"{key}_ms"] = item["median_s"] * 1e3
        figures[f"{key}_tflops"] = item["tflops_per_s"]
        figures[f"{key}_blocks"] = f"{item['block_q']}x{item['block_k']}"
    for line in document["speedups"]:
        figures[f"speedup_{line['pass']}_t{line['T']}_vs_{line['rival']}"] = line["speedup"]
    # The ablation: this kernel's matmuls alone at its best forward blocks, and their share of
    # the kernel's time there.
    best_this = {
        item["T"]: item
        for item in document["best"]
        if item["kernel"] == "this" and item["pass"] == "forward"
    }
    for row in document["rows"]:
        if row.get("variant", "attention") == "attention" or row["status"] != "ok":
            continue
        key = f"this_{row['variant']}_forward_t{row['T']}"
        figures[f"{key}_ms"] = row["median_s"] * 1e3
        figures[f"{key}_blocks"] = f"{row['block_q']}x{row['block_k']}"
        if row["T"] in best_this:
            figures[f"{key}_share"] = row["median_s"] / best_this[row["T"]]["median_s"]
    # The square-block curve (bq = bk) of every forward sweep: what the Pallas lessons chart
    # beside their cost model (kernel_iteration's block-size chart).
    for row in document["rows"]:
        if row.get("variant", "attention") != "attention":
            continue
        if row["pass"] == "forward" and row["status"] == "ok" and row["block_q"] == row["block_k"]:
            key = f"{row['kernel']}_forward_t{row['T']}_square{row['block_q']}_ms"
            if row["block_q"]:  # XLA has no blocks
                figures[key] = row["median_s"] * 1e3
    return figures


def write_record(args, document: dict) -> None:
    """The benchmark record beside OUT (records/NAME/...), load-checked on this machine; a
    refusal or failure is printed and kept in OUT, never fatal."""
    from core.perf import records

    root = pathlib.Path(args.out).parent / "records"
    try:
        path = records.write_record(
            args.record,
            " ".join(document["command"]),
            record_figures(document),
            notes=f"{document['kind']}; {document['timing']}; {document['flop_formula']}",
            root=root,
        )
        document["record"] = str(path)
        _say(f"record: {path}")
    except Exception as exc:  # noqa: BLE001 - the measurements are already in OUT
        document["record_error"] = _error_text(exc)
        _say(f"record not written: {document['record_error']}")
    pathlib.Path(args.out).write_text(json.dumps(document, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (
        args.calls < 1
        or args.chain < 1
        or args.warmup < 0
        or args.backward_top < 0
        or not args.budget_s > 0
    ):
        print(
            "error: need --calls >= 1, --chain >= 1, --warmup >= 0, --backward-top >= 0, "
            "--budget-s > 0",
            file=sys.stderr,
        )
        return 2
    if not args.tiny:
        return run(args)
    from core import runtime

    runtime.use_cpu_devices()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
