"""PPO solves CartPole-v1: every seed trained in one vmapped, compiled call.

    python benchmarks/rl_ppo.py [--quick] [--seeds 5] [-o benchmarks/results/rl_ppo.json]
                                [--record]

``--record`` (full run only) also keeps the figures as a dated benchmark record in the repo,
``benchmarks/records/rl_ppo/<date>_<machine>.json``: what the lesson cites.

The claim of the lesson "Policy gradients and PPO": with purejaxrl's CartPole settings
(core.rl.ppo.Config defaults), PPO reaches a mean greedy return >= 475 (gymnasium's reward
threshold for CartPole-v1) over the final evaluation episodes for at least 4 of 5 seeds
within 500k environment steps. Wall times are this machine's (CPU unless JAX says otherwise).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)  # one device: one vmapped program

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import _report  # noqa: E402
from core.perf import timing  # noqa: E402
from core.rl import ppo  # noqa: E402

NAME = "rl_ppo"  # the record's name: benchmarks/records/rl_ppo/
REQUIRED_SOLVED = 4  # of 5 seeds (the criterion)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50k steps (a smoke run)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--algorithm", default="ppo", choices=ppo.ALGORITHMS)
    parser.add_argument(
        "--fast-compile", action="store_true", help="XLA backend optimization level 0"
    )
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / "rl_ppo.json"))
    parser.add_argument(
        "--record", action="store_true", help="keep a benchmark record in benchmarks/records/"
    )
    args = parser.parse_args(argv)
    if args.record and args.quick:
        parser.error("--record keeps the full run's figures: drop --quick")

    config = ppo.Config(algorithm=args.algorithm, total_timesteps=50_000 if args.quick else 500_000)
    print(f"compiling {args.seeds} vmapped {args.algorithm} trainings ...", flush=True)
    compiled, compile_s = timing.timed_call(
        lambda: ppo.compile_runs(config, args.seeds, args.fast_compile)
    )
    keys = jax.random.split(jax.random.key(0), args.seeds)
    hparams = ppo.run_hparams(config, args.seeds)
    (_, metrics), train_s = timing.timed_call(compiled, keys, hparams)
    eval_mean_S = np.asarray(metrics["eval_returns_E"]).mean(axis=1)
    curve_SU = ppo.learning_curve(metrics["return_sum_U"], metrics["episodes_U"])
    rows = [
        {
            "seed": s,
            "eval_mean_return": float(eval_mean_S[s]),
            "eval_min_return": float(np.asarray(metrics["eval_returns_E"])[s].min()),
            "final_train_return": float(curve_SU[s, -1]),
            "solved": bool(eval_mean_S[s] >= ppo.SOLVED_RETURN),
        }
        for s in range(args.seeds)
    ]
    print(
        _report.format_table(
            rows,
            ["seed", "eval_mean_return", "eval_min_return", "final_train_return", "solved"],
        )
    )
    solved = sum(r["solved"] for r in rows)
    env_steps = config.num_updates * config.batch_size
    print(
        f"\n{solved}/{args.seeds} seeds solved (greedy mean over {config.eval_episodes} "
        f"episodes >= {ppo.SOLVED_RETURN:g}) within {env_steps:,} env steps per seed; "
        f"compile {compile_s:.1f} s, training (all seeds, one call) {train_s:.1f} s"
    )
    document = {
        "benchmark": "rl_ppo",
        "machine": _report.machine_label(),
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "env_steps_per_seed": env_steps,
        "seeds": args.seeds,
        "seeds_solved": solved,
        "criterion_met": solved >= REQUIRED_SOLVED if args.seeds == 5 else None,
        "fast_compile": args.fast_compile,
        "compile_s": compile_s,
        "train_s": train_s,
        "env_steps_per_s": env_steps * args.seeds / train_s,
        "rows": rows,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    if args.record:
        command = "python benchmarks/rl_ppo.py --record" + " --fast-compile" * args.fast_compile
        if args.seeds != 5 or args.algorithm != "ppo":
            command += f" --seeds {args.seeds} --algorithm {args.algorithm}"
        figures = {
            "seeds": args.seeds,
            "seeds_solved": solved,
            "env_steps_per_seed": env_steps,
            "eval_mean_return_by_seed": [float(r["eval_mean_return"]) for r in rows],
            "compile_s": compile_s,
            "train_s": train_s,
            "env_steps_per_s": env_steps * args.seeds / train_s,
        }
        notes = (
            f"{args.algorithm}, core.rl.ppo.Config defaults, {args.seeds} seeds in one vmapped "
            f"call on one CPU device; greedy mean over {config.eval_episodes} episodes, solved "
            f">= {ppo.SOLVED_RETURN:g}"
        )
        return _report.keep_record(NAME, command, figures, notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
