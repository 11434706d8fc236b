"""The edge lesson's figures: LiteRT float32 and int8 vs JAX on the digits CNN, on this CPU.

    python benchmarks/edge_deploy.py [--quick] [--record] [-o benchmarks/results/edge_deploy.json]

Trains the lesson's default CNN (through the weights cache), converts it (jax2tf ->
SavedModel -> LiteRT float32 and full-integer int8, timed: TensorFlow's import apart from
the conversion), then per variant: file size, latency per inference on a batch of one
(median and p90 over --repeats, one interpreter thread; JAX's jitted call beside it),
held-out accuracy and error vs JAX. Every time is this machine's CPU, not an edge device's
and not a TPU's. ``--record`` writes benchmarks/records/edge_deploy/<date>_<machine>.json.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices()

import numpy as np  # noqa: E402

from benchmarks import _report  # noqa: E402
from core.lessons.deployment import edge_deploy as lesson  # noqa: E402
from core.perf import allocator, timing  # noqa: E402
from interop import tflite  # noqa: E402

NAME = "edge_deploy"
DEFAULTS = {"channels": (8, 16), "epochs": 6, "seed": 0}


def _latencies_ms(call, x, repeats: int) -> dict:
    samples = timing.time_calls(lambda: call(x), repeats=repeats, warmup=5).samples
    ms = np.asarray(samples) * 1e3
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=2000, help="timed inferences per variant")
    parser.add_argument("--record", action="store_true", help="write a benchmark record")
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / f"{NAME}.json"))
    args = parser.parse_args(argv)
    repeats = 50 if args.quick else args.repeats
    if repeats < 10:
        parser.error("--repeats must be >= 10")

    faults_before = allocator.page_faults()
    split, model, origin = lesson.train(DEFAULTS["channels"], DEFAULTS["epochs"], DEFAULTS["seed"])
    fn, params = tflite.nnx_function(model)
    start = time.perf_counter()
    import tensorflow  # noqa: F401  (timed apart: the conversion's fixed cost)

    tf_import_s = time.perf_counter() - start
    start = time.perf_counter()
    variants = tflite.convert(fn, params, (8, 8, 1), representative=split.x_train)
    convert_s = time.perf_counter() - start

    jax_row, jax_logits = lesson.jax_row(model, split.x_test, split.y_test, repeats=10)
    import jax
    from flax import nnx

    forward = nnx.jit(lambda m, x: m(x))
    one = split.x_test[:1]
    jax.block_until_ready(forward(model, one))
    rows = [
        {
            "variant": "JAX float32 (XLA:CPU)",
            "size_bytes": jax_row["size (bytes)"],
            **_latencies_ms(lambda x: forward(model, x), one, repeats),
            "accuracy": jax_row["accuracy"],
            "max_abs_error": 0.0,
            "error_over_range": 0.0,
        }
    ]
    for name in tflite.QUANTIZATIONS:
        runner = tflite.Runner(variants[name], 1)
        logits = tflite.run(variants[name], split.x_test)
        rows.append(
            {
                "variant": f"LiteRT {name}",
                "size_bytes": len(variants[name]),
                **_latencies_ms(runner, one, repeats),
                "accuracy": tflite.accuracy(logits, split.y_test),
                "max_abs_error": float(np.max(np.abs(logits - jax_logits))),
                "error_over_range": tflite.range_scaled_error(logits, jax_logits),
            }
        )
    faults_after = allocator.page_faults()
    columns = list(rows[0])
    print(_report.format_table(rows, columns))
    print(
        f"\nweights: {origin}; TensorFlow import {tf_import_s:.1f} s, conversion (SavedModel + "
        f"float + int8) {convert_s:.1f} s; {repeats} timed inferences per variant; "
        f"minor page faults over the run: "
        f"{faults_after['minor_faults'] - faults_before['minor_faults']}"
    )
    malloc = allocator.in_force()
    document = {
        "benchmark": NAME,
        "machine": _report.machine_label(),
        "model": {**DEFAULTS, "channels": list(DEFAULTS["channels"])},
        "repeats": repeats,
        "tensorflow_import_s": tf_import_s,
        "convert_s": convert_s,
        "malloc": malloc,
        "minor_faults": faults_after["minor_faults"] - faults_before["minor_faults"],
        "rows": rows,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    if args.record:
        command = "python benchmarks/edge_deploy.py --record" + (
            " --quick" if args.quick else f" --repeats {repeats}"
        )
        figures = {
            "tensorflow_import_s": tf_import_s,
            "convert_s": convert_s,
            **{f"{r['variant']}: {k}": v for r in rows for k, v in r.items() if k != "variant"},
        }
        notes = (
            f"digits CNN channels {DEFAULTS['channels']}, {DEFAULTS['epochs']} epochs, seed "
            f"{DEFAULTS['seed']}; batch-of-one latency, one LiteRT thread, this CPU (not an "
            f"edge device); malloc: {malloc}"
        )
        return _report.keep_record(NAME, command, figures, notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
