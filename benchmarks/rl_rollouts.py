"""Environment steps per second: a vmapped, scanned JAX rollout vs a Python loop over gymnasium.

    python benchmarks/rl_rollouts.py [--quick] [-o benchmarks/results/rl_rollouts.json]

The claim of the lesson "Batch environments and scan rollouts": the compiled rollout's rate
grows with the number of environments N while the gymnasium loop's stays flat, so beyond a
crossover N the JAX rollout is faster, by the ratio in the JSON (N = 1 ... 4096, random
actions, CartPole-v1). Every figure is this machine's (CPU unless JAX says otherwise).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)  # one device: the lesson's claim is about one device

from benchmarks import _report  # noqa: E402
from core.lessons.reinforcement_learning import batched_rollouts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1, 64 (a smoke run)")
    parser.add_argument("--steps", type=int, default=128, help="rollout length T")
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / "rl_rollouts.json"))
    args = parser.parse_args(argv)

    counts = [1, 64] if args.quick else batched_rollouts.env_counts(1, 4096, 7)
    print(f"steps/s over N = {counts}, T = {args.steps} ...", flush=True)
    rows = batched_rollouts.sweep(counts, args.steps, repeats=5)
    columns = ["envs", "jax steps/s", "gymnasium steps/s", "jax / gymnasium", "jax compile (s)"]
    print(_report.format_table(rows, columns))
    where = batched_rollouts.crossover(rows)
    print(f"\ncrossover N: {where if where is None else round(where, 1)}")
    document = {
        "benchmark": "rl_rollouts",
        "machine": _report.machine_label(),
        "rollout_steps": args.steps,
        "rows": rows,
        "crossover_envs": where,
        "ratio_at_largest_n": rows[-1]["jax / gymnasium"],
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
