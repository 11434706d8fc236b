"""A hyperparameter sweep of the byte Transformer on one chip: held-out bits per byte over
chip time, each configuration given the same wall-clock budget.

    python tpu_scripts/byte_transformer_sweep.py --out DIR [--budget-s 75] [--evals 6]
        [--grid NAME | --config "key=value key=value" ...] [--allow-cpu-rehearsal]

One process holds the chip and trains the configurations one after another (capstone
Config overrides; --grid names a list kept below). Each one's budget counts everything
from its first compile: a probe (the same model at a constant rate, 20 timed steps) gives
the step time, from which the run's step count is chosen so the training ends inside the
budget, and the learning-rate schedule (warmup, cosine decay) spans exactly those steps.
Held-out bits per byte are measured on EVERY held-out byte (the files the split keeps out of
training, packed at the configuration's seq_len), --evals times along the run and at its
end. Training here is the capstone's own step (training.make_train_step, the same data
stream), without checkpoints or metrics files: the sweep picks a configuration; the real
loop (``python -m capstones.byte_transformer train preset=...``) is what gets recorded.

DIR/sweep.json is rewritten after every configuration, so a stopped sweep keeps what it
finished ("kind": "tpu result", or "cpu rehearsal — not a TPU result" off a TPU). Without a
TPU and without --allow-cpu-rehearsal it refuses: exit status 3, nothing written.

Rehearse on a CPU (every number a CPU number):

    python tpu_scripts/byte_transformer_sweep.py --out /tmp/sweep --allow-cpu-rehearsal \\
        --budget-s 20 --evals 2 --config "d_model=32 num_layers=1 num_heads=2 seq_len=32 \\
        batch_size=4 max_files=6 max_bytes=4096"
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import statistics
import sys
import time

EXIT_REFUSED = 3
PROBE_STEPS = 20
# The fixed part of every configuration in a grid: bf16 matmuls, a warmup then a cosine
# decay, Adam's second moment forgetting spikes sooner, decoupled weight decay.
COMMON = {
    "compute_dtype": "bfloat16",
    "lr_schedule": "cosine",
    "warmup_steps": 200,
    "final_lr_fraction": 0.1,
    "adam_b2": 0.95,
    "weight_decay": 0.1,
}
GRIDS: dict[str, list[dict]] = {
    # Width, depth, context, dropout and rate around a 512-wide model; heads of 128.
    "first": [
        {
            "d_model": 256,
            "num_layers": 4,
            "num_heads": 2,
            "seq_len": 512,
            "batch_size": 32,
            "learning_rate": 2e-3,
            "dropout": 0.1,
        },
        {
            "d_model": 512,
            "num_layers": 8,
            "num_heads": 4,
            "seq_len": 512,
            "batch_size": 32,
            "learning_rate": 1e-3,
            "dropout": 0.1,
        },
        {
            "d_model": 512,
            "num_layers": 8,
            "num_heads": 4,
            "seq_len": 512,
            "batch_size": 32,
            "learning_rate": 1e-3,
            "dropout": 0.25,
        },
        {
            "d_model": 512,
            "num_layers": 8,
            "num_heads": 4,
            "seq_len": 1024,
            "batch_size": 16,
            "learning_rate": 1e-3,
            "dropout": 0.25,
        },
        {
            "d_model": 512,
            "num_layers": 8,
            "num_heads": 4,
            "seq_len": 512,
            "batch_size": 32,
            "learning_rate": 2e-3,
            "dropout": 0.25,
        },
        {
            "d_model": 768,
            "num_layers": 8,
            "num_heads": 6,
            "seq_len": 512,
            "batch_size": 32,
            "learning_rate": 6e-4,
            "dropout": 0.3,
        },
    ],
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/byte_transformer_sweep.py",
        description="Held-out bits per byte of several configurations, each on the same "
        "wall-clock budget on one chip.",
    )
    parser.add_argument("--out", required=True, type=pathlib.Path, help="folder for sweep.json")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=75.0,
        help="seconds per configuration, compiles included (default 75)",
    )
    parser.add_argument(
        "--evals",
        type=int,
        default=6,
        help="held-out measurements along each run, besides its end (default 6)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        help="train exactly this many steps (no probe; default: as many as fit --budget-s)",
    )
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--grid", choices=sorted(GRIDS), help="a kept list of configurations")
    choice.add_argument(
        "--config",
        action="append",
        default=[],
        help="one configuration as 'key=value ...' (repeat for more)",
    )
    parser.add_argument(
        "--allow-cpu-rehearsal",
        action="store_true",
        help="run on a CPU (tiny sizes; the numbers are CPU numbers)",
    )
    return parser


def configurations(args) -> list[dict]:
    """Each configuration's overrides: a grid's (with COMMON under them) or --config's."""
    if args.grid:
        return [COMMON | entry for entry in GRIDS[args.grid]]
    from capstones.byte_transformer import config as config_lib

    found = []
    for text in args.config or []:
        found.append(COMMON | config_lib.parse_overrides(text.split()))
    return found


def heldout_rows(config, corpus) -> int:
    """Rows of seq_len bytes that every held-out byte packs into."""
    from core.lm import corpus as corpus_lib

    return int(corpus_lib.pack(corpus.heldout, config.seq_len).tokens_BT.shape[0])


def probe_step_time(base, corpus) -> float:
    """Seconds per training step of ``base``'s shapes at a constant rate, after a compile
    (a separate program: a run's schedule is compiled into its own)."""
    import dataclasses

    from capstones.byte_transformer import data, training

    probe = dataclasses.replace(base, lr_schedule="constant", warmup_steps=0, steps=PROBE_STEPS)
    probe_step = training.make_train_step(probe)
    stream = data.training_stream(probe, corpus)
    state = training.init_state(probe)
    state, metrics = probe_step(state, stream.next_batch())
    float(metrics["loss"])
    tick = time.perf_counter()
    for _ in range(PROBE_STEPS):
        state, metrics = probe_step(state, stream.next_batch())
    float(metrics["loss"])
    probe_step_s = (time.perf_counter() - tick) / PROBE_STEPS
    return probe_step_s


def train_on_budget(overrides: dict, budget_s: float, evals: int, fixed_steps: int = 0) -> dict:
    """One configuration trained for about ``budget_s`` seconds of wall clock (compiles
    included); its curve of held-out bits per byte and what it cost."""
    import dataclasses

    import jax

    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import data, training

    began = time.perf_counter()
    overrides = dict(overrides)
    overrides.setdefault("max_len", overrides.get("seq_len", config_lib.Config.seq_len))
    base = config_lib.Config(**overrides)
    corpus = data.load_corpus(base)
    rows = heldout_rows(base, corpus)
    base = dataclasses.replace(base, eval_batches=math.ceil(rows / base.batch_size))

    probe_step_s = probe_step_time(base, corpus) if not fixed_steps else 0.0
    # The run: its schedule spans the steps that fit what is left (one compile, the evals
    # and the host's batches priced in at a quarter of the training time).
    left = budget_s - (time.perf_counter() - began)
    steps = fixed_steps or max(base.warmup_steps + 50, int(0.75 * left / probe_step_s))
    config = dataclasses.replace(base, steps=steps, schedule_steps=steps)
    step_fn = training.make_train_step(config)
    stream = data.training_stream(config, corpus)
    heldout = data.heldout_batches(config, corpus)
    state = training.init_state(config)
    eval_at = {round(steps * (i + 1) / (evals + 1)) for i in range(evals)} | {steps}
    curve, losses, step_times = [], [], []
    started = time.perf_counter()
    for step in range(1, steps + 1):
        tick = time.perf_counter()
        state, metrics = step_fn(state, stream.next_batch())
        losses.append(float(metrics["loss"]))
        step_times.append(time.perf_counter() - tick)
        if step in eval_at:
            held = training.evaluate(config, state["params"], heldout)
            recent = losses[-min(len(losses), 100) :]
            curve.append(
                {
                    "step": step,
                    "elapsed_s": round(time.perf_counter() - began, 2),
                    "tokens_seen": step * config.tokens_per_step(),
                    "train_loss_recent": round(statistics.fmean(recent), 4),
                    "heldout_bpb": round(held["bits_per_byte"], 4),
                }
            )
            print(
                f"  step {step}/{steps} train {curve[-1]['train_loss_recent']:.3f} nats "
                f"held-out {curve[-1]['heldout_bpb']:.3f} bpb "
                f"{curve[-1]['elapsed_s']:.0f} s",
                flush=True,
            )
    train_bytes = sum(len(d.content) for d in corpus.train)
    params = sum(leaf.size for leaf in jax.tree.leaves(state["params"]))
    return {
        "overrides": {
            k: v
            for k, v in config.to_dict().items()
            if k in overrides or k in ("steps", "schedule_steps", "eval_batches")
        },
        "parameters": int(params),
        "steps": steps,
        "tokens_per_step": config.tokens_per_step(),
        "epochs": round(steps * config.tokens_per_step() / train_bytes, 2),
        "train_bytes": train_bytes,
        "heldout_bytes": sum(len(d.content) for d in corpus.heldout),
        "heldout_files": len(corpus.heldout),
        "probe_step_ms": round(1e3 * probe_step_s, 3),
        "median_step_ms": round(1e3 * statistics.median(step_times[1:] or step_times), 3),
        "first_step_s": round(step_times[0], 2),
        "training_s": round(time.perf_counter() - started, 2),
        "wall_s": round(time.perf_counter() - began, 2),
        "curve": curve,
        "final_heldout_bpb": curve[-1]["heldout_bpb"],
        "best_heldout_bpb": min(point["heldout_bpb"] for point in curve),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.budget_s <= 0 or args.evals < 0:
        print("--budget-s must be > 0 and --evals >= 0", file=sys.stderr)
        return 2
    try:
        wanted = configurations(args)
    except ValueError as exc:
        print(f"bad --config: {exc}", file=sys.stderr)
        return 2
    if not wanted:
        print("nothing to sweep: give --grid or --config", file=sys.stderr)
        return 2
    import jax

    on_tpu = jax.default_backend() == "tpu"
    if not on_tpu and not args.allow_cpu_rehearsal:
        print(
            f"no TPU here ({jax.default_backend()}): add --allow-cpu-rehearsal to rehearse",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "kind": "tpu result" if on_tpu else "cpu rehearsal — not a TPU result",
        "device": str(jax.devices()[0].device_kind),
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "tpu_scripts/byte_transformer_sweep.py", *(argv or sys.argv[1:])],
        "budget_s": args.budget_s,
        "runs": [],
    }
    for index, overrides in enumerate(wanted):
        print(f"[{index + 1}/{len(wanted)}] {overrides}", flush=True)
        try:
            run = train_on_budget(overrides, args.budget_s, args.evals, args.steps)
        except Exception as exc:  # a configuration that fails is recorded; the rest go on
            run = {"overrides": overrides, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"  failed: {run['error'][:300]}", flush=True)
        result["runs"].append(run)
        (args.out / "sweep.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
