"""The three speed claims of the transformations lessons, measured as ratios in one run.

    python benchmarks/transformations.py [--quick] [-o benchmarks/results/transformations.json]

1. vmap vs a Python loop over examples   (lesson "Batch a function with vmap")
2. jit vs eager dispatch as size grows    (lesson "Compile a function with jit")
3. lax.scan vs an unrolled Python loop: compile time as length grows (lesson "Compiled
   loops with lax.scan")

Every figure is this machine's (CPU unless JAX says otherwise): it says nothing about a TPU.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)  # one device: the lessons' claims are about a single device

from benchmarks import _report  # noqa: E402
from core.lessons.control_flow import lax_scan  # noqa: E402
from core.lessons.transformations import vmap  # noqa: E402
from core.perf import compilation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (seconds, for a smoke run)"
    )
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / "transformations.json"))
    args = parser.parse_args(argv)

    batches = (8, 64) if args.quick else (8, 64, 256, 1024)
    sizes = (16, 128) if args.quick else (16, 128, 512, 1024)  # (size, size) matrices
    lengths = (8, 16) if args.quick else (8, 16, 32, 64)

    print("1/3 vmap vs Python loop ...", flush=True)
    vmap_rows = [vmap.loop_vs_vmap(batch=b, repeats=5) for b in batches]
    print(
        _report.format_table(
            vmap_rows,
            ["batch", "rows", "cols", "loop_s", "vmap_s", "speedup", "max_abs_difference"],
        )
    )

    print("\n2/3 jit vs eager ...", flush=True)
    jit_rows = compilation.jit_vs_eager(sizes, repeats=5)
    print(
        _report.format_table(
            jit_rows,
            [
                "size",
                "trace_lower_s",
                "compile_s",
                "jit_s",
                "eager_s",
                "speedup",
                "break_even_calls",
            ],
        )
    )

    print("\n3/3 scan vs unrolled loop, compile time ...", flush=True)
    scan_rows = lax_scan.scan_vs_unrolled_compile(lengths)
    for row in scan_rows:
        row["unrolled_over_scan"] = row["unrolled_compile_s"] / row["scan_compile_s"]
    print(
        _report.format_table(
            scan_rows,
            [
                "length",
                "scan_compile_s",
                "unrolled_compile_s",
                "unrolled_over_scan",
                "scan_equations",
                "unrolled_equations",
            ],
        )
    )

    document = {
        "machine": _report.machine_label(),
        "note": "CPU measurements on this machine; not TPU figures.",
        "vmap_vs_loop": vmap_rows,
        "jit_vs_eager": jit_rows,
        "scan_vs_unrolled_compile": scan_rows,
    }
    path = _report.write_json(document, args.output)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
