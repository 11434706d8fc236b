"""Measure this machine's sustained matmul FLOP/s and memory bandwidth; write JSON.

    python benchmarks/machine.py [--quick] [--no-bf16] [-o benchmarks/results/machine.json]

f32 (and bf16) n x n matmul FLOP/s and the bandwidth of ``x + 1`` over a large float32
array, each the median of several blocked runs after a warm-up. The roofline lesson
(apps/hlo_roofline.py) reads the JSON when it exists. Every figure is labelled with the
machine (CPU model from /proc/cpuinfo, core count): a measurement of this host, never a TPU.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)  # one device: the whole machine behind one XLA CPU client

from benchmarks import _report  # noqa: E402
from core.perf import machine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, noisier)")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 matmul")
    parser.add_argument("-o", "--output", default=str(machine.DEFAULT_JSON))
    args = parser.parse_args(argv)

    start = time.perf_counter()
    report = machine.measure(quick=args.quick, bf16=not args.no_bf16)
    report["benchmark_seconds"] = round(time.perf_counter() - start, 2)
    report["label"] = _report.machine_label()

    print(f"Measured on: {report['machine']} · backend {report['backend']} · jax {report['jax']}")
    print(
        _report.format_table(
            machine.report_rows(report), ["kernel", "median time (ms)", "sustained"]
        )
    )
    ridge = report["peak_flop_per_s"] / report["bytes_per_s"]
    print(f"ridge point on this CPU (f32 matmul FLOP/s / copy bytes/s): {ridge:.1f} FLOP/byte")
    path = _report.write_json(report, args.output)
    print(f"wrote {path} ({report['benchmark_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
