"""Reference agreement: the flash-attention kernel against NumPy float64, over a table of
shapes x block sizes x dtypes x causal flags, and the property tests that search further.

Each row runs the forward kernel and the Pallas backward kernels (``backward="kernel"``) in
interpret mode on standard-normal q, k, v, dO and measures the max scaled error
(core.numerics.scaled_max_error) of O, dQ, dK, dV against ``attention_numpy`` /
``attention_grad_numpy`` (float64 closed forms), judged against the dtype's tolerance
(core.numerics.TOLERANCE: inputs and outputs in that dtype, so one rounding each).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Sequence

import numpy as np

from capstones.byte_transformer import args
from capstones.pallas_kernel import common
from core import curriculum, numerics

# (B, H, T, D): two sequence lengths, head dims and batch/head splits
SHAPES = ((1, 2, 32, 16), (2, 1, 64, 32))
# (block_q, block_k): both divide every T above and keep bfloat16's 16-row tile
BLOCKS = ((16, 16), (32, 16))
DTYPES = ("float32", "bfloat16")
CAUSALS = (False, True)
MEASURES = ("O", "dQ", "dK", "dV")

# Interpret mode runs every program instance as its own step on the CPU (three kernels: the
# forward, dK/dV and dQ); more than this many per kernel is too slow for an interactive check.
MAX_PROGRAMS = 64

PROPERTY_TEST = "core/kernels/flash_attention_test.py"
PROPERTY_BENCHMARK = "benchmarks/results/flash_attention_properties.json"


def problem(shape, blocks, dtype: str) -> str | None:
    """Why the kernel cannot run on (B, H, T, D) ``shape`` with ``blocks`` (in words), or None:
    the TPU tiling rule for q/O and k/v blocks, and the interpret-mode program budget."""
    import jax.numpy as jnp

    from core.kernels import tiling

    b, h, t, d = shape
    for name, block in (("q and O", blocks[0]), ("k and v", blocks[1])):
        reason = tiling.block_problem(name, (t, d), (block, d), jnp.dtype(dtype))
        if reason is not None:
            return reason
    count = b * h * (t // blocks[0]) * (t // blocks[1])
    if count > MAX_PROGRAMS:
        return (
            f"{b * h} (batch, head) pairs x {t // blocks[0]} q blocks x {t // blocks[1]} k blocks "
            f"= {count} program instances per kernel; interpret mode runs each as its own step "
            f"on the CPU, so more than {MAX_PROGRAMS} is too slow here: larger blocks, a shorter "
            "T or fewer heads"
        )
    return None


def operands(shape, dtype: str, seed: int):
    """q, k, v, dO: (B, H, T, D) standard normals drawn with NumPy and cast to ``dtype``."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    drawn = rng.standard_normal((4, *shape)).astype(jnp.dtype(dtype))
    return tuple(jnp.asarray(x) for x in drawn)


def references(q, k, v, do, causal: bool):
    """(O, dQ, dK, dV) in NumPy float64 from the closed forms, on the same (rounded) inputs."""
    from core.kernels import flash_attention

    o, _ = flash_attention.attention_numpy(q, k, v, causal)
    return (o, *flash_attention.attention_grad_numpy(q, k, v, do, causal))


def errors(outputs: Sequence, expected: Sequence) -> dict[str, float]:
    """{measure: scaled max error} of the kernel's (O, dQ, dK, dV) against the references."""
    pairs = zip(MEASURES, outputs, expected, strict=True)
    return {name: numerics.scaled_max_error(out, ref) for name, out, ref in pairs}


def judge(measured: dict[str, float], dtype: str) -> dict:
    """The verdict of one row: the dtype's tolerance, the worst error / tolerance, pass."""
    tol = numerics.tolerance(dtype)
    worst = max(measured.values())
    return {"tolerance": tol, "worst / tolerance": worst / tol, "pass": bool(worst <= tol)}


def kernel_outputs(q, k, v, do, causal: bool, blocks, interpret):
    """The kernel's (O, dQ, dK, dV): forward kernel, then the Pallas backward kernels."""
    from core.kernels import flash_attention

    o, _, grads = flash_attention.forward_and_grads(
        q, k, v, do, causal, blocks[0], blocks[1], "kernel", interpret
    )
    return (o, *grads)


def row(shape, blocks, dtype: str, causal: bool, seed: int, interpret) -> dict:
    """One row of the table: the case, its errors per measure and the verdict."""
    q, k, v, do = operands(shape, dtype, seed)
    outputs = kernel_outputs(q, k, v, do, causal, blocks, interpret)
    measured = errors(outputs, references(q, k, v, do, causal))
    return {
        "shape (B,H,T,D)": "x".join(map(str, shape)),
        "blocks (bq,bk)": f"{blocks[0]},{blocks[1]}",
        "dtype": dtype,
        "causal": causal,
        **{f"{name} error": value for name, value in measured.items()},
        **judge(measured, dtype),
    }


def table(
    shapes=SHAPES,
    blocks=BLOCKS,
    dtypes=DTYPES,
    causals=CAUSALS,
    seed: int = 0,
    interpret=None,
    progress=None,
) -> list[dict]:
    """Every combination of the settings, one row each (seeds differ per row)."""
    rows = []
    for s, shape in enumerate(shapes):
        for b, block in enumerate(blocks):
            for dtype in dtypes:
                for causal in causals:
                    rows.append(row(shape, block, dtype, causal, seed + 10 * s + b, interpret))
                    if progress is not None:
                        last = rows[-1]
                        progress(
                            f"agreement: {last['shape (B,H,T,D)']} blocks {block} {dtype} "
                            f"causal {causal}: worst/tol {last['worst / tolerance']:.3f}"
                        )
    return rows


def ci_examples(test_source: str) -> int | None:
    """max_examples of the hypothesis "ci" profile registered in the property test's source."""
    match = re.search(r'register_profile\(\s*"ci",\s*max_examples=(\d+)', test_source)
    return int(match.group(1)) if match else None


def property_tests(repo: pathlib.Path | None = None) -> dict:
    """The property tests and, if its JSON exists, the large benchmark's result (never
    invented: absent means "not run here")."""
    repo = pathlib.Path(repo or curriculum.REPO_ROOT)
    source = repo / PROPERTY_TEST
    summary = {
        "test": PROPERTY_TEST,
        "ci_examples": ci_examples(source.read_text(encoding="utf-8"))
        if source.is_file()
        else None,
        "ci_profile": "hypothesis 'ci' profile: derandomized, plus REGRESSION_CASES and "
        "EDGE_CASES as explicit examples (run by make test)",
        "benchmark": None,
    }
    result = common.read_json(repo / PROPERTY_BENCHMARK)
    if result is not None:
        rows = result.get("summary", [])
        summary["benchmark"] = {
            "file": PROPERTY_BENCHMARK,
            "measured_utc": result.get("machine", {}).get("measured_utc"),
            "max_examples": result.get("max_examples"),
            "cases": sum(r.get("cases", 0) for r in rows),
            "failure": result.get("failure"),
            "worst error / tolerance": max(
                (r.get("worst error / tolerance", 0.0) for r in rows), default=None
            ),
            "summary": rows,
        }
    return summary


def property_line(summary: dict) -> str:
    """One sentence naming the property tests and the benchmark's result (or its absence)."""
    line = (
        f"Property tests: {summary['test']} (hypothesis, 'ci' profile "
        f"{summary['ci_examples']} drawn examples per run, plus the regression and edge cases)."
    )
    bench = summary.get("benchmark")
    if bench is None:
        return line + f" Large profile: {PROPERTY_BENCHMARK} not found (not run here)."
    verdict = "no failure" if bench["failure"] is None else f"FAILED: {bench['failure']}"
    return line + (
        f" Large profile ({bench['file']}, measured {bench['measured_utc']}): "
        f"{bench['cases']} cases, {verdict}, worst error {bench['worst error / tolerance']:.2f} "
        "of its tolerance."
    )


def run(interpret: str = "tpu", seed: int = 0, quick: bool = False, progress=None) -> dict:
    """The agreement section: the table, its verdict, the property tests and the hardware."""
    mode = common.interpret_mode(interpret)
    settings = dict(shapes=SHAPES[:1], blocks=BLOCKS[:1]) if quick else {}
    rows = table(seed=seed, interpret=mode, progress=progress, **settings)
    summary = property_tests()
    return {
        "section": "agreement",
        "created_utc": common.now_utc(),
        "hardware": common.hardware(),
        "label": common.INTERPRET_LABEL if mode is not False else "compiled by Mosaic on a TPU",
        "interpret": interpret,
        "reference": "NumPy float64 closed forms (attention_numpy, attention_grad_numpy)",
        "rows": rows,
        "all_pass": all(r["pass"] for r in rows),
        "property_tests": summary,
        "property_line": property_line(summary),
    }


def command(parsed: args.Parsed) -> int:
    interpret = args.choice("interpret", parsed["interpret"], common.INTERPRETS)
    out = pathlib.Path(parsed["out"])
    section = run(interpret, parsed["seed"], parsed["quick"], progress=print)
    common.print_rows(section["rows"], f"\nagreement ({section['label']}):")
    print(section["property_line"])
    path = common.write_json(out, "agreement.json", section)
    print(f"wrote {path}")
    return 0 if section["all_pass"] else 1


OPTIONS = {
    "out": args.Option(str, common.DEFAULT_OUT, "output folder (agreement.json)"),
    "interpret": args.Option(str, "tpu", "tpu (races detected) or hlo (plain HLO interpreter)"),
    "seed": args.Option(int, 0, "seed of the operands (each row adds its own offset)"),
    "quick": args.Option(bool, False, "one shape and one block setting (4 rows)"),
}
COMMANDS = {
    "agreement": args.Command(
        "kernel vs NumPy float64: shapes x blocks x dtypes x causal", OPTIONS, command, False
    )
}
