"""The tiling_pipelining lesson's block-size question on the chip: the project's TPU-style
Pallas matmul (core.kernels.matmul: f32 accumulator in VMEM, k the reduction axis) over block
shapes bm x bk x bn, beside XLA's jnp.dot, at N = M = K = 4096 and 8192, in one process.

    python tpu_scripts/matmul_blocks_tpu.py --out OUT.json [--budget-s 60] [--sizes 4096,8192]
        [--blocks 128x128x128,512x1024x1024,...] [--calls 10] [--chain 8] [--warmup 2]
        [--record NAME]
    python tpu_scripts/matmul_blocks_tpu.py --out /tmp/mm.json --allow-cpu-rehearsal

What it does (core.kernels.matmul_sweep holds the block shapes, the FLOP formula and the
bookkeeping): first the kernel's and jnp.dot's agreement with NumPy float64 at
--agreement-n with blocks 256 x 256 x 256 (a 4 x 4 x 4 grid: the accumulator crosses k
steps), in bfloat16 and float32 (scaled max error against the dtype's tolerance on this
backend); then, N by N, XLA's jnp.dot and the kernel at every block shape that divides N:
bfloat16 x and y, float32 accumulation (preferred_element_type), a bfloat16 result. Each
configuration is compiled ahead of time, dispatched --warmup times, then --calls times with
block_until_ready (flash_vs_jax.time_program); a dispatch runs --chain products, each one's
result the next one's x, and a row's time is the median dispatch divided by --chain (--chain
1: one product a dispatch, the host's dispatch and sync included, as the record of 2026-12-06
was timed). Then TFLOP/s (2 N^3) and the fraction of the chip's bf16 peak (core.tpu.specs).
A shape that fails (Mosaic's scoped VMEM limit, out of memory) is recorded with its error
and the sweep goes on; once --budget-s has passed, every remaining configuration is recorded
as skipped with the reason. OUT.json is rewritten after every configuration, so a run cut
short keeps what it measured.

OUT.json: {"kind", "is_tpu_result", "device_kind", "versions", "dtype", "accumulator",
"flop_formula", "chain", "timing", "peak_flops", "agreement": [...], "rows": [...],
"budget_s", "elapsed_s"};
--record NAME (e.g. pallas_matmul_blocks) also writes the figures as a benchmark record
(core.perf.records) under OUT's folder: records/NAME/<date>_<machine>.json, keyed by N and
blocks (matmul_sweep.figure_key) for the lesson to chart beside its model; copy it into
benchmarks/records/.

Exit status: 0 done (errors and skips are in the rows), 2 bad arguments, 3 refused: no TPU
and no --allow-cpu-rehearsal (a CPU number never stands in for a TPU number). The rehearsal
runs the kernel in Pallas interpret mode at N = 256: bookkeeping, never speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys

from tpu_scripts import flash_vs_jax

EXIT_REFUSED = 3
AGREEMENT_BLOCKS = (256, 256, 256)
# --allow-cpu-rehearsal: sizes interpret mode runs in seconds on a CPU (bookkeeping, not speed)
REHEARSAL = {
    "sizes": [256],
    "blocks": [(128, 128, 128), (256, 256, 256), (128, 256, 128)],
    "calls": 2,
    "chain": 2,
    "warmup": 1,
    "agreement_n": 256,
}
REHEARSAL_AGREEMENT_BLOCKS = (128, 128, 128)


def _blocks(text: str) -> list[tuple[int, int, int]]:
    from core.kernels import matmul_sweep

    try:
        return matmul_sweep.parse_blocks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    from core.kernels import matmul_sweep

    default_blocks = ",".join("x".join(map(str, b)) for b in matmul_sweep.BLOCKS)
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/matmul_blocks_tpu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="the result JSON file")
    parser.add_argument("--budget-s", type=float, default=60.0, help="wall-clock cap")
    parser.add_argument(
        "--sizes", type=flash_vs_jax.positive_ints, default=list(matmul_sweep.SIZES)
    )
    parser.add_argument("--blocks", type=_blocks, default=_blocks(default_blocks))
    parser.add_argument("--calls", type=int, default=10, help="timed dispatches (median)")
    parser.add_argument(
        "--chain", type=int, default=8, help="products per dispatch, chained (>= 1)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--agreement-n", type=int, default=1024)
    parser.add_argument("--record", default="", help="also write a benchmark record NAME")
    parser.add_argument(
        "--allow-cpu-rehearsal",
        action="store_true",
        help="without a TPU: Pallas interpret mode at N = 256, marked 'cpu rehearsal — not a "
        "TPU result'",
    )
    return parser


def problems(args) -> list[str]:
    """What is wrong with the arguments (before anything runs or is written)."""
    found = []
    if args.calls < 1 or args.chain < 1 or args.warmup < 0 or not args.budget_s > 0:
        found.append("need --calls >= 1, --chain >= 1, --warmup >= 0, --budget-s > 0")
    if args.agreement_n % 256:
        found.append(f"--agreement-n must be a multiple of 256, got {args.agreement_n}")
    from core.kernels import matmul_sweep

    unused = [n for n in args.sizes if not matmul_sweep.usable_blocks(n, args.blocks)]
    if unused and not args.allow_cpu_rehearsal:
        found.append(f"no block shape divides N = {unused}")
    return found


def _programs(n: int, blocks, dtype, interpret, chain: int = 1):
    """The jitted program of one configuration: XLA's jnp.dot (blocks (0, 0, 0)) or the
    kernel, both bf16 in, f32 accumulation, the input dtype out. ``chain`` > 1: ``chain``
    products in one dispatch (a fori_loop), each product the next one's x; it returns the
    last (the values grow, which a product's time does not depend on)."""
    import jax
    import jax.numpy as jnp

    from core.kernels import matmul

    if tuple(blocks) == (0, 0, 0):

        def product(x, y):
            return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)
    else:
        product = matmul.matmul_call(n, n, n, *blocks, dtype, interpret=interpret)
    if chain == 1:
        return jax.jit(product)
    return jax.jit(lambda x, y: jax.lax.fori_loop(0, chain, lambda _, x: product(x, y), x))


def _operands(n: int, dtype, seed: int = 0):
    import jax

    kx, ky = jax.random.split(jax.random.key(seed))
    return tuple(jax.random.normal(k, (n, n), jax.numpy.float32).astype(dtype) for k in (kx, ky))


class Sweep:
    """The run's state: rows measured so far, written to OUT after each one."""

    def __init__(self, args, document: dict, budget):
        self.args, self.document, self.budget = args, document, budget

    def save(self) -> None:
        self.document["elapsed_s"] = round(self.budget.elapsed(), 1)
        out = pathlib.Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = out.with_suffix(out.suffix + ".tmp")
        temporary.write_text(json.dumps(self.document, indent=1) + "\n")
        os.replace(temporary, out)

    def measure(self, kernel: str, n: int, blocks, operands) -> dict:
        import jax.numpy as jnp

        from core.kernels import matmul_sweep

        common = {"peak_flops": self.document["peak_flops"]}
        if self.budget.expired():
            item = matmul_sweep.row(
                kernel, n, blocks, "skipped", reason=self.budget.reason(), **common
            )
        else:
            try:
                chain = self.args.chain
                dtype = jnp.dtype(self.document["dtype"])
                program = _programs(n, blocks, dtype, self.interpret, chain)
                compile_s, per_product = flash_vs_jax.time_program(
                    program, operands, self.args.warmup, self.args.calls, chain
                )
                item = matmul_sweep.row(
                    kernel,
                    n,
                    blocks,
                    "ok",
                    seconds=per_product,
                    compile_s=compile_s,
                    chain=chain,
                    **common,
                )
            except Exception as exc:  # noqa: BLE001 - recorded; the sweep goes on
                reason = flash_vs_jax._error_text(exc)
                item = matmul_sweep.row(kernel, n, blocks, "error", reason=reason, **common)
        self.document["rows"].append(item)
        self.save()
        if item["status"] == "ok":
            fraction = item["fraction_of_peak"]
            timing = f"{item['median_s'] * 1e3:.3f} ms, {item['tflops_per_s']:.1f} TFLOP/s"
            timing += f", {100 * fraction:.1f}% of peak" if fraction is not None else ""
        else:
            timing = f"{item['status']}: {item['reason']}"
        shown = "jnp.dot" if kernel == "xla" else "x".join(map(str, blocks))
        flash_vs_jax._say(f"[{self.budget.elapsed():5.0f} s] N={n} {kernel} {shown}: {timing}")
        return item

    @property
    def interpret(self):
        from core.kernels import matmul

        return False if self.document["is_tpu_result"] else matmul.interpret_for("hlo")


def check_agreement(document: dict, budget, n: int) -> None:
    """The kernel's and jnp.dot's product against NumPy float64, in bfloat16 and float32."""
    import jax
    import jax.numpy as jnp

    from core.kernels import matmul, matmul_sweep

    on_tpu = document["is_tpu_result"]
    blocks = AGREEMENT_BLOCKS if on_tpu else REHEARSAL_AGREEMENT_BLOCKS
    # Off a TPU the kernel runs in TPU interpret mode with its race detector and NaN-filled
    # uninitialized memory: a missing accumulator init or a race fails here, not silently.
    interpret = False if on_tpu else matmul.interpret_for("interpret")
    for dtype_name in ("bfloat16", "float32"):
        dtype = jnp.dtype(dtype_name)
        for kernel in matmul_sweep.KERNELS:
            if budget.expired():
                found = {"kernel": kernel, "dtype": dtype_name, "error": budget.reason()}
            else:
                try:
                    x, y = _operands(n, dtype, seed=1)
                    chosen = matmul_sweep.NO_BLOCKS if kernel == "xla" else blocks
                    result = jax.block_until_ready(_programs(n, chosen, dtype, interpret)(x, y))
                    found = matmul_sweep.agreement(kernel, result, x, y, dtype_name)
                    found["blocks"] = list(chosen)
                except Exception as exc:  # noqa: BLE001 - recorded; the sweep goes on
                    found = {
                        "kernel": kernel,
                        "dtype": dtype_name,
                        "error": flash_vs_jax._error_text(exc),
                    }
            document["agreement"].append(found)
            shown = (
                f"agrees {found['agrees']}: scaled max error {found['scaled_max_error']:.2e} "
                f"(tolerance {found['tolerance']:g})"
                if "agrees" in found
                else found["error"]
            )
            flash_vs_jax._say(f"agreement {kernel} {dtype_name} N={n}: {shown}")


def run(args) -> int:
    import jax
    import jax.numpy as jnp

    from capstones.byte_transformer import run_manifest
    from core.kernels import attention_sweep, matmul_sweep
    from core.tpu import specs

    on_tpu = jax.default_backend() == "tpu"
    if not on_tpu and not args.allow_cpu_rehearsal:
        print(
            "refused: no TPU here (jax.default_backend() is "
            f"{jax.default_backend()!r}); a CPU number never stands in for a TPU number. "
            "--allow-cpu-rehearsal runs the bookkeeping in Pallas interpret mode. Nothing "
            "was written.",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    if not on_tpu:
        for name, value in REHEARSAL.items():
            setattr(args, name, value)
    device_kind = jax.devices()[0].device_kind
    budget = attention_sweep.Budget(args.budget_s)
    document = {
        "kind": run_manifest.TPU_RESULT_KIND if on_tpu else run_manifest.REHEARSAL_KIND,
        "is_tpu_result": on_tpu,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "tpu_scripts/matmul_blocks_tpu.py", *sys.argv[1:]],
        "backend": jax.default_backend(),
        "device_kind": device_kind,
        "versions": flash_vs_jax._versions(),
        "dtype": "bfloat16",
        "accumulator": "float32",
        "flop_formula": matmul_sweep.FLOP_FORMULA,
        "chain": args.chain,
        "timing": flash_vs_jax.timing_statement(args.chain, "products"),
        "peak_flops": specs.bf16_peak_of_device_kind(device_kind) if on_tpu else None,
        "kernel_mode": "compiled by Mosaic" if on_tpu else "Pallas interpret mode (CPU)",
        "budget_s": args.budget_s,
        "agreement": [],
        "rows": [],
    }
    flash_vs_jax._say(f"backend {document['backend']}, {device_kind}: {document['kind']}")
    sweep = Sweep(args, document, budget)
    check_agreement(document, budget, args.agreement_n)
    sweep.save()
    for n in args.sizes:
        operands = _operands(n, jnp.bfloat16)
        sweep.measure("xla", n, matmul_sweep.NO_BLOCKS, operands)
        for blocks in matmul_sweep.usable_blocks(n, args.blocks):
            sweep.measure("pallas", n, blocks, operands)
        del operands
    sweep.save()
    if args.record:
        write_record(args, document)
    flash_vs_jax._say(f"wrote {args.out} ({budget.elapsed():.0f} s)")
    return 0


def write_record(args, document: dict) -> None:
    """The benchmark record beside OUT (records/NAME/...), load-checked on this machine; a
    refusal or failure is printed and kept in OUT, never fatal."""
    from core.kernels import matmul_sweep
    from core.perf import records

    root = pathlib.Path(args.out).parent / "records"
    notes = f"{document['kind']}; {document['kernel_mode']}; {document['timing']}; "
    notes += f"FLOPs {document['flop_formula']}"
    try:
        path = records.write_record(
            args.record,
            " ".join(document["command"]),
            matmul_sweep.record_figures(document),
            notes=notes,
            root=root,
        )
        document["record"] = str(path)
        flash_vs_jax._say(f"record: {path}")
    except Exception as exc:  # noqa: BLE001 - the measurements are already in OUT
        document["record_error"] = flash_vs_jax._error_text(exc)
        flash_vs_jax._say(f"record not written: {document['record_error']}")
    pathlib.Path(args.out).write_text(json.dumps(document, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    found = problems(args)
    if found:
        print("error: " + "; ".join(found), file=sys.stderr)
        return 2
    from core import runtime

    runtime.use_cpu_devices(1)  # no TPU here: pin the CPU (no slow probe); a TPU VM keeps its TPU
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
