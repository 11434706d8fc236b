"""The parity matrix's worst error per pair: DigitsNet in every framework and format, several seeds.

    python benchmarks/parity_matrix.py [--quick] [--seeds 3] [--batch 64] [--record]

For each seed: one seeded DigitsNet and one digits batch run as JAX/NNX, PyTorch, ONNX Runtime,
a jax2tf SavedModel, LiteRT float and int8, and the Keras twin under jax, torch and tensorflow
(interop/parity.py); every pair's error is judged against its bound (float32's tolerance, or
parity.INT8_BOUND for pairs with the int8 model). Prints the worst error per pair over the
seeds, the formats that did not run and why, and each format's seconds (first run: imports,
conversions and subprocess start-ups included). ``--record`` writes the figures with
core.perf.records (the README and the app cite them). ``--quick``: the cheap formats, one seed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)

from benchmarks import _report  # noqa: E402
from core.perf import allocator  # noqa: E402
from interop import parity  # noqa: E402

NAME = "parity_matrix"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="jax, torch, onnx; one seed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (weights and batch)")
    parser.add_argument("--batch", type=int, default=64, help="digits images per batch")
    parser.add_argument("--record", action="store_true", help="write a benchmark record")
    parser.add_argument("--records-root", default=None, help="records folder (default: repo's)")
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / f"{NAME}.json"))
    args = parser.parse_args(argv)
    formats = parity.CHEAP if args.quick else parity.FORMATS
    seeds = [0] if args.quick else list(range(args.seeds))
    if not seeds:
        parser.error("--seeds must be >= 1")

    faults_before = allocator.page_faults()
    matrices = []
    seconds: dict[str, list[float]] = {f: [] for f in formats}
    start = time.perf_counter()
    for seed in seeds:
        print(f"seed {seed}: {', '.join(formats)} ...", flush=True)
        matrix = parity.parity_matrix(formats, seed=seed, batch=args.batch)
        matrices.append(matrix)
        for name, run in matrix.runs.items():
            if run.ran:
                seconds[name].append(run.seconds)
    total_s = time.perf_counter() - start
    faults_after = allocator.page_faults()

    worst = parity.worst_per_pair(matrices)
    rows = [
        {
            "pair": pair,
            "worst error": entry["error"],
            "bound": entry["bound"],
            "measure": entry["measure"],
            "worst max abs": entry["max_abs"],
            "within": entry["error"] <= entry["bound"],
        }
        for pair, entry in worst.items()
    ]
    print(_report.format_table(rows, list(rows[0])))
    not_run = {}
    for matrix in matrices:
        for name, status in matrix.not_run().items():
            not_run.setdefault(name, status)
    for name, status in not_run.items():
        print(f"{name}: {status}")
    per_format = {f: (max(s) if s else None) for f, s in seconds.items()}
    print(
        "seconds per format (slowest seed): "
        + ", ".join(f"{f} {s:.1f}" for f, s in per_format.items() if s is not None)
    )
    malloc = allocator.in_force()
    minor = faults_after["minor_faults"] - faults_before["minor_faults"]
    print(
        f"total {total_s:.1f} s over {len(seeds)} seed(s), batch {args.batch}; minor page "
        f"faults {minor}; malloc {malloc}"
    )
    document = {
        "benchmark": NAME,
        "machine": _report.machine_label(),
        "seeds": seeds,
        "batch": args.batch,
        "formats": list(formats),
        "rows": rows,
        "not_run": not_run,
        "seconds_per_format": per_format,
        "total_s": total_s,
        "malloc": malloc,
        "minor_faults": minor,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    if args.record:
        command = f"python benchmarks/parity_matrix.py --record --seeds {len(seeds)} " + (
            f"--batch {args.batch}" + (" --quick" if args.quick else "")
        )
        figures = {
            **{f"{r['pair']}: worst error": float(r["worst error"]) for r in rows},
            **{f"{r['pair']}: bound": float(r["bound"]) for r in rows},
            "pairs outside their bound": sum(not r["within"] for r in rows),
            **{f"{name}: not run": status for name, status in not_run.items()},
            **{f"{f}: seconds": s for f, s in per_format.items() if s is not None},
        }
        notes = (
            f"DigitsNet (interop/twins.py) seeded weights, seeds {seeds}, batch {args.batch}; "
            "errors: float32 pairs scaled max error (numerics.scaled_max_error), pairs with "
            "int8 range-scaled (parity.INT8_BOUND); seconds include imports, conversions and "
            f"subprocess start-ups; CPU only; malloc: {malloc}"
        )
        return _report.keep_record(NAME, command, figures, notes, args.records_root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
