"""Records of the model worth keeping: a chip run of ``preset=quality-v5e`` (the real training
loop: data stream, metrics every step, held-out evaluations, checkpoints) and the sweep that
chose it, built from the files the TPU host sent back, never from this machine's clock.

    python -m capstones.byte_transformer.quality_record --run DIR --sweep A.json [B.json ...]
        --command "the command that ran on the host" --command-wall-s S
        [--records benchmarks/records]

DIR holds the run's config.json, corpus.json and metrics.jsonl (or metrics.jsonl.gz); each
sweep file is tpu_scripts/byte_transformer_sweep.py's sweep.json. The host's facts (device
kind, JAX and Python versions, date) come from the sweep files, written by the same host in
the same session; the run's corpus hashes must equal this machine's, so the compressors' lines
(capstones/byte_transformer/compressors.py), computed here, are of the very files the model
was held out on.

Writes ``byte_transformer_quality`` and ``byte_transformer_sweep`` (core.perf.records).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import statistics
import sys

QUALITY_RECORD = "byte_transformer_quality"
SWEEP_RECORD = "byte_transformer_sweep"
TRAIN_LOSS_WINDOW = 250  # steps per point of the recorded training-loss curve


def read_metrics(run_dir: pathlib.Path) -> list[dict]:
    plain, packed = run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.gz"
    text = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def host_facts(sweeps: list[dict]) -> dict:
    """Device kind, versions and date the host's sweep files agree on (ValueError if not)."""
    facts = {(s["kind"], s["device"], s["jax"], s["python"], s["date_utc"][:10]) for s in sweeps}
    if len(facts) != 1:
        raise ValueError(f"the sweep files are not of one host session: {sorted(facts)}")
    kind, device, jax_version, python, date = facts.pop()
    if kind != "tpu result":
        raise ValueError(f"not a TPU result: {kind!r}")
    return {"device": device, "jax": jax_version, "python": python, "date": date}


def run_figures(run_dir: pathlib.Path, peak_flops: float) -> dict:
    """The chip run's figures: held-out bits per byte along the run, training loss by window,
    step time, model-FLOPs utilisation (model_math.CAUSAL_FLOP_FORMULA over the median step)."""
    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import model_math

    config = config_lib.Config.load(run_dir / "config.json")
    corpus = json.loads((run_dir / "corpus.json").read_text())
    records = read_metrics(run_dir)
    evaluated = [r for r in records if "heldout_bpb" in r]
    if not evaluated or [r["step"] for r in records] != list(range(1, len(records) + 1)):
        raise ValueError(f"{run_dir}: metrics.jsonl is not one run from step 1 with evaluations")
    best = min(evaluated, key=lambda r: r["heldout_bpb"])
    step_s = statistics.median(r["step_time_s"] for r in records[1:])
    parameters = model_math.param_count(config)
    step_flops = model_math.causal_train_flops(config, config.batch_size)["total"]
    windows = range(0, len(records), TRAIN_LOSS_WINDOW)
    return {
        "config": config,
        "corpus": corpus,
        "figures": {
            "parameters": parameters,
            "steps": len(records),
            "tokens_per_step": config.tokens_per_step(),
            "tokens_seen": sum(r["tokens"] for r in records),
            "heldout_bpb_steps": [r["step"] for r in evaluated],
            "heldout_bpb": [r["heldout_bpb"] for r in evaluated],
            "heldout_elapsed_s": [r["elapsed_s"] for r in evaluated],
            "final_heldout_bpb": evaluated[-1]["heldout_bpb"],
            "best_heldout_bpb": best["heldout_bpb"],
            "best_step": best["step"],
            "train_loss_steps": [min(start + TRAIN_LOSS_WINDOW, len(records)) for start in windows],
            "train_loss_nats": [
                statistics.fmean(r["loss"] for r in records[start : start + TRAIN_LOSS_WINDOW])
                for start in windows
            ],
            "first_step_s": records[0]["step_time_s"],
            "median_step_ms": 1e3 * step_s,
            "loop_s": records[-1]["elapsed_s"],
            "mfu_percent": 100 * model_math.mfu(step_flops, step_s, peak_flops),
        },
    }


def compressor_figures(config, corpus_identity: dict) -> dict:
    """Compressors' bits per byte on the run's held-out files (ValueError when this
    machine's files are not the run's)."""
    from capstones.byte_transformer import compressors, data

    corpus = data.load_corpus(config)
    here = corpus.identity()
    for key in ("train_sha256", "heldout_sha256"):
        if here[key] != corpus_identity[key]:
            raise ValueError(
                f"this machine's corpus differs from the run's ({key}): another "
                "Python version; the compressors' lines would be of other files"
            )
    rates = compressors.compressor_rates(corpus.heldout, corpus.train)
    return {
        "train_files": len(corpus.train),
        "train_bytes": sum(len(d.content) for d in corpus.train),
        "heldout_files": len(corpus.heldout),
        "heldout_bytes": sum(len(d.content) for d in corpus.heldout),
        "compressors": list(rates),
        "compressor_bpb": list(rates.values()),
    }


def sweep_figures(sweeps: list[dict]) -> dict:
    """One entry per finished configuration of the sweeps, in order."""
    runs = [run for sweep in sweeps for run in sweep["runs"] if "error" not in run]
    if not runs:
        raise ValueError("no finished configuration in the sweep files")
    shape = ("d_model", "num_layers", "num_heads", "seq_len", "batch_size")
    return {
        "configs": [
            " ".join(f"{k}={run['overrides'][k]}" for k in (*shape, "learning_rate", "dropout"))
            for run in runs
        ],
        "parameters": [run["parameters"] for run in runs],
        "steps": [run["steps"] for run in runs],
        "epochs": [run["epochs"] for run in runs],
        "median_step_ms": [run["median_step_ms"] for run in runs],
        "wall_s": [run["wall_s"] for run in runs],
        "final_heldout_bpb": [run["final_heldout_bpb"] for run in runs],
        "best_heldout_bpb": [run["best_heldout_bpb"] for run in runs],
        "length": [  # each run's step count: fitted to a wall-clock budget, or fixed
            f"--steps {run['steps']}"
            if "--steps" in sweep["command"]
            else f"budget {sweep['budget_s']:g} s"
            for sweep in sweeps
            for run in sweep["runs"]
            if "error" not in run
        ],
    }


def machine(facts: dict, cores: int) -> dict:
    from core.perf import records

    chips = {"kind": facts["device"], "count": 1}
    return {
        "label": records.machine_label(f"unknown, {cores} cores", chips),
        "cpu": "unknown",
        "cores": cores,
        "platform": "tpu",
        "accelerator": chips,
    }


def build_records(run_dir, sweep_paths, command, command_wall_s, host_cores=13) -> list[dict]:
    """The two record documents (validated, not written)."""
    from core.perf import records
    from core.tpu import specs

    sweeps = [json.loads(pathlib.Path(p).read_text()) for p in sweep_paths]
    facts = host_facts(sweeps)
    if facts["device"] != "TPU v5 lite":
        raise ValueError(f"the peak used here is v5e's; the host was {facts['device']!r}")
    run = run_figures(pathlib.Path(run_dir), specs.chip("v5e").bf16_flops.value)
    quality = {
        **run["figures"],
        **compressor_figures(run["config"], run["corpus"]),
        "command_wall_s": command_wall_s,
    }
    versions = {"python": facts["python"], "jax": facts["jax"]}
    host = machine(facts, host_cores)
    notes = (
        "The real loop (python -m capstones.byte_transformer train, preset quality-v5e's "
        "values) on one chip; held-out bits per byte over every held-out byte; compressors "
        "computed on the same files by capstones/byte_transformer/compressors.py."
    )
    sweep_command = " ; ".join(" ".join(s["command"]) for s in sweeps)
    return [
        records.record_of(
            QUALITY_RECORD, command, quality, host, versions, facts["date"], None, notes
        ),
        records.record_of(
            SWEEP_RECORD,
            sweep_command,
            sweep_figures(sweeps),
            host,
            versions,
            facts["date"],
            None,
            "tpu_scripts/byte_transformer_sweep.py",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capstones.byte_transformer.quality_record")
    parser.add_argument("--run", required=True, type=pathlib.Path)
    parser.add_argument("--sweep", required=True, nargs="+", type=pathlib.Path)
    parser.add_argument("--command", required=True)
    parser.add_argument("--command-wall-s", required=True, type=float)
    parser.add_argument("--records", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    from core.perf import records

    try:
        documents = build_records(args.run, args.sweep, args.command, args.command_wall_s)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    for document in documents:
        print(f"record: {records.write_document(document, args.records)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
