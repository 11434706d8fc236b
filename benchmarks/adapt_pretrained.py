"""The adapt_pretrained lesson's figures: head-only vs full fine-tuning vs LoRA, on this CPU.

    python benchmarks/adapt_pretrained.py [--quick] [--record] [-o benchmarks/results/...json]

At the lesson's defaults (``adapt_pretrained.LESSON``: 2-pixel shift, 10 images per class,
rank 4, 200 full-batch Adam steps), per method and seed: held-out accuracy, trainable
parameters, the first call's seconds (trace + compile + train) and the median of --repeats
further calls (train only, the same compiled program). Accuracy is summarised over --seeds
seeds (min, mean, max). Every time is this machine's CPU, not a TPU's.
``--record`` writes benchmarks/records/adapt_pretrained/<date>_<machine>.json.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices()

from benchmarks import _report  # noqa: E402
from core.lessons.deployment import adapt_pretrained as lesson  # noqa: E402
from core.perf import allocator, timing  # noqa: E402

NAME = "adapt_pretrained"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 3 repeats (a smoke run)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0 .. N-1")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls after the first")
    parser.add_argument("--record", action="store_true", help="write a benchmark record")
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / f"{NAME}.json"))
    args = parser.parse_args(argv)
    seeds, repeats = (1, 3) if args.quick else (args.seeds, args.repeats)
    if seeds < 1 or repeats < 1:
        parser.error("--seeds and --repeats must be >= 1")
    settings = {k: lesson.LESSON[k] for k in ("rank", "alpha", "steps", "learning_rate")}

    faults_before = allocator.page_faults()
    per_seed = []
    for seed in range(seeds):
        params, _ = lesson.pretrain(seed)
        task = lesson.shifted_task(lesson.LESSON["shift"], lesson.LESSON["shots"], seed)
        for method in lesson.METHODS:
            call_args = lesson.training_args(method, params, task, **settings, seed=seed)
            result = lesson.adapt(method, params, task, **settings, seed=seed)
            steady = timing.time_calls(lesson.train_call, call_args, repeats=repeats, warmup=1)
            per_seed.append(
                {
                    "method": method,
                    "seed": seed,
                    "accuracy": result.accuracy,
                    "trainable": result.trainable_count,
                    "first_call_s": result.first_s,
                    "train_median_s": steady.summary.median,
                }
            )
    faults_after = allocator.page_faults()
    rows = []
    for method in lesson.METHODS:
        mine = [r for r in per_seed if r["method"] == method]
        accuracies = [r["accuracy"] for r in mine]
        rows.append(
            {
                "method": method,
                "trainable": mine[0]["trainable"],
                "accuracy min": min(accuracies),
                "accuracy mean": statistics.mean(accuracies),
                "accuracy max": max(accuracies),
                "first call (s)": statistics.median(r["first_call_s"] for r in mine),
                "train median (ms)": 1e3 * statistics.median(r["train_median_s"] for r in mine),
            }
        )
    print(_report.format_table(rows, list(rows[0])))
    malloc = allocator.in_force()
    faults = faults_after["minor_faults"] - faults_before["minor_faults"]
    print(
        f"\n{seeds} seed(s), {repeats} timed calls each, {lesson.LESSON['steps']} steps per "
        f"call; malloc: {malloc}; minor page faults over the run: {faults}"
    )
    document = {
        "benchmark": NAME,
        "machine": _report.machine_label(),
        "settings": lesson.LESSON,
        "seeds": seeds,
        "repeats": repeats,
        "malloc": malloc,
        "minor_faults": faults,
        "rows": rows,
        "per_seed": per_seed,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    if args.record:
        command = "python benchmarks/adapt_pretrained.py --record" + (
            " --quick" if args.quick else f" --seeds {seeds} --repeats {repeats}"
        )
        figures = {f"{r['method']}: {k}": v for r in rows for k, v in r.items() if k != "method"}
        notes = (
            f"lesson defaults {lesson.LESSON}; one full adaptation run (all steps) per timed "
            f"call, this CPU (not a TPU); malloc: {malloc}"
        )
        return _report.keep_record(NAME, command, figures, notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
