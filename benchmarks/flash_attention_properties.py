"""The flash-attention property at the "benchmark" profile: many drawn cases, a table of errors.

    python benchmarks/flash_attention_properties.py [--max-examples 300] [--seed 0]
        [-o benchmarks/results/flash_attention_properties.json]

The same property as core/kernels/flash_attention_test.py (its strategy ``cases``, its
``property_errors`` and ``tolerances``), with hypothesis' "benchmark" profile (300 examples,
not derandomized: each seed explores new cases) instead of the small "ci" one. Every case
runs in an interpreter on this CPU (--mode): the figures are errors, never speed. A failing case
is shrunk by hypothesis and printed as a ``Case(...)`` to add to REGRESSION_CASES.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hypothesis  # noqa: E402

from benchmarks import _report  # noqa: E402
from core.kernels import flash_attention_test as properties  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    parser.add_argument(
        "--mode",
        default=properties.PROPERTY_MODE,
        choices=("hlo", "interpret"),
        help="hlo: jax's HLO interpreter (the test's mode); interpret: TPU interpret mode",
    )
    parser.add_argument(
        "-o", "--output", default=str(_report.RESULTS_DIR / "flash_attention_properties.json")
    )
    args = parser.parse_args(argv)
    rows: list[dict] = []

    @hypothesis.seed(args.seed)
    @hypothesis.settings(
        hypothesis.settings.get_profile("benchmark"), max_examples=args.max_examples
    )
    @hypothesis.given(properties.cases())
    def run(case):
        start = time.perf_counter()
        errors = properties.property_errors(case, args.mode)
        bounds = properties.tolerances(case)
        worst = max(errors, key=lambda name: errors[name] / bounds[name])
        rows.append(
            {
                **vars(case),
                "worst": worst,
                "error": errors[worst],
                "tolerance": bounds[worst],
                "error / tolerance": errors[worst] / bounds[worst],
                "seconds": time.perf_counter() - start,
            }
        )
        assert errors[worst] <= bounds[worst], f"{case}: {worst} {errors[worst]:.3g}"

    failure = None
    try:
        run()
    except Exception as error:  # hypothesis re-raises the shrunk failing case
        failure = f"{type(error).__name__}: {str(error).splitlines()[0]}"

    groups = collections.defaultdict(list)
    for row in rows:
        groups[(row["dtype"], row["causal"])].append(row)
    summary = [
        {
            "dtype": dtype,
            "causal": causal,
            "cases": len(group),
            "worst error / tolerance": max(r["error / tolerance"] for r in group),
            "worst measure": max(group, key=lambda r: r["error / tolerance"])["worst"],
            "median s per case": sorted(r["seconds"] for r in group)[len(group) // 2],
        }
        for (dtype, causal), group in sorted(groups.items())
    ]
    print(_report.format_table(summary, list(summary[0]) if summary else ["dtype"]))
    print(f"{len(rows)} cases run (shrinking included); failure: {failure or 'none'}")
    document = {
        "machine": _report.machine_label(),
        "max_examples": args.max_examples,
        "seed": args.seed,
        "mode": args.mode,
        "failure": failure,
        "summary": summary,
        "cases": rows,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    return 1 if failure else 0


if __name__ == "__main__":
    raise SystemExit(main())
