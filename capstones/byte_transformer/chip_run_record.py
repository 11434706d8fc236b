"""The chip run's benchmark record (tpu_scripts/byte_transformer_run_tpu.py --record NAME):
its flat figures, written from the run's result, and read back as rows a chart can draw.

    figures(result)                  the record's figures from the run's result JSON
    loss_curve_rows(record)          [{"step", "loss"}]: the training loss curve (downsampled)
    heldout_rows(record)             [{"step", "bits_per_byte"}]: held-out evaluation
    first_losses_rows(record)        [{"step", "machine", "loss"}]: CPU, TPU DEFAULT, HIGHEST
    decode_rows(record)              [{"context", "path", "tokens_per_s"}]: cached vs recompute
    latest(name=RECORD_NAME)         the newest record of that name (core.perf.records)

A yes/no figure is the string "yes" or "no" (a record's figures are numbers, strings or
lists of those). A part that failed leaves "<part>_error" with its message instead.
"""

from __future__ import annotations

RECORD_NAME = "byte_transformer_chip_run"
NOTES = (
    "byte Transformer (capstone defaults, float32) trained on one chip: loss curve (every "
    "step in the run's metrics.jsonl, downsampled here), held-out bits per byte, a checkpoint "
    "resumed in a fresh process (identical = same float32 loss and grad norm), the first "
    "losses on the CPU vs the chip at DEFAULT and HIGHEST (max relative difference, tolerance "
    "= 4 x (MXU emulated on the CPU + the chip's float32 elementwise error)), greedy decode "
    "with the fp32 KV cache vs recomputing the full forward, tokens/s incl. prefill. Positions "
    ">= seq_len were never trained: long-context text is poor, its speed is not"
)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def figures(result: dict) -> dict:
    """The record's figures from the run's result (its "parts" and "summary")."""
    summary, parts = result["summary"], result["parts"]
    out: dict = {"device_kind": str(parts.get("train", {}).get("device_kind", "unknown"))}
    training = summary["training"]
    if training.get("steps"):
        curve = parts["train"]["curve"]
        out |= {
            "steps": training["steps"],
            "final_train_loss": training["final_loss"],
            "median_step_ms": training["median_step_s"] * 1e3,
            "loss_curve_steps": [step for step, _ in curve],
            "loss_curve": [loss for _, loss in curve],
            "heldout_steps": [item["step"] for item in training["heldout"]],
            "heldout_bpb": [item["bits_per_byte"] for item in training["heldout"]],
            "final_heldout_bpb": training["heldout"][-1]["bits_per_byte"],
        }
    else:
        out["train_error"] = str(training.get("error", "no result"))
    resume = summary["resume"]
    if "error" in resume:
        out["resume_error"] = resume["error"]
    else:
        out |= {
            "resume_step": resume["resume_step"],
            "resume_next_loss": resume["resumed_loss"],
            "uninterrupted_next_loss": resume["uninterrupted_loss"],
            "resume_identical": _yes(resume["identical"]),
        }
    agreements = summary["cpu_vs_tpu"]
    if "error" in agreements:
        out["cpu_vs_tpu_error"] = agreements["error"]
        agreements = {}
    for name, line in agreements.items():
        key = f"cpu_vs_tpu_{name}"
        if "error" in line:
            out[f"{key}_error"] = line["error"]
            continue
        out |= {
            f"{key}_steps": line["steps"],
            f"{key}_max_rel_diff": line["max_relative_difference"],
            f"{key}_at_step": line["at_step"],
            f"{key}_tolerance": line["tolerance"],
            f"{key}_tolerance_reason": line["tolerance_reason"],
            f"{key}_agrees": _yes(line["agrees"]),
            f"{key}_chip_losses": line["chip_losses"],
        }
        out["cpu_losses"] = line["cpu_losses"]
    decode = summary["decode"]
    if "error" in decode:
        out["decode_error"] = decode["error"]
    for item in decode.get("contexts", []):
        key = f"decode_ctx{item['prompt_len']}"
        greedy = item["greedy"]
        out |= {
            f"{key}_new_tokens": item["new_tokens"],
            f"{key}_cached_tokens_per_s": item["cached"]["tokens_per_s"],
            f"{key}_recompute_tokens_per_s": item["recompute"]["tokens_per_s"],
            f"{key}_speedup": item["speedup"],
            f"{key}_greedy_identical": _yes(greedy["identical"]),
        }
        if not greedy["identical"]:
            out[f"{key}_first_difference_index"] = greedy["first_difference_index"]
            out[f"{key}_margins_there"] = [greedy["cached_margin"], greedy["recompute_margin"]]
            at_highest = item.get("greedy_at_highest", {})
            if "identical" in at_highest:
                out[f"{key}_greedy_identical_at_highest"] = _yes(at_highest["identical"])
    return out


def loss_curve_rows(record) -> list[dict]:
    figures_ = record.figures
    steps, losses = figures_.get("loss_curve_steps", []), figures_.get("loss_curve", [])
    return [{"step": s, "loss": v} for s, v in zip(steps, losses, strict=True)]


def heldout_rows(record) -> list[dict]:
    figures_ = record.figures
    steps, bpb = figures_.get("heldout_steps", []), figures_.get("heldout_bpb", [])
    return [{"step": s, "bits_per_byte": v} for s, v in zip(steps, bpb, strict=True)]


def first_losses_rows(record) -> list[dict]:
    """The first losses of the CPU and of the chip at each precision, one row per step."""
    figures_ = record.figures
    series = {"CPU float32": figures_.get("cpu_losses", [])}
    for name in ("default", "highest"):
        series[f"TPU {name.upper()}"] = figures_.get(f"cpu_vs_tpu_{name}_chip_losses", [])
    return [
        {"step": step, "machine": machine, "loss": loss}
        for machine, losses in series.items()
        for step, loss in enumerate(losses, 1)
    ]


def decode_rows(record) -> list[dict]:
    figures_ = record.figures
    rows = []
    for key, value in figures_.items():
        for path in ("cached", "recompute"):
            suffix = f"_{path}_tokens_per_s"
            if key.startswith("decode_ctx") and key.endswith(suffix):
                context = int(key[len("decode_ctx") : -len(suffix)])
                rows.append({"context": context, "path": path, "tokens_per_s": value})
    return sorted(rows, key=lambda row: (row["context"], row["path"]))


def latest(name: str = RECORD_NAME, root=None):
    """The newest citable record of the chip run (core.perf.records.latest)."""
    from core.perf import records

    return records.latest(name, root=root)
