"""``report run_dir=DIR``: every result of the capstone in one Markdown + JSON report.

Reads what the other commands wrote (each optional: a missing piece is listed with the
command that produces it, never invented):

    DIR/config.json, corpus.json, metrics.jsonl, checkpoints/   train
    DIR/eval.json                                               eval
    DIR/cache_report.json                                       cache-report
    DIR/artifacts/manifest.json                                 export
    DIR/profile/profile.json                                    profile
    DIR/bench.json                                              bench
    DIR/plan.json                                               plan
    DIR/run_manifest.json                                       run-manifest

and re-checks two things on the trained model itself (point 1 of the capstone): no logit
depends on a later byte (gradients through the whole model on a held-out window) and the
valid-token loss of a held-out batch equals a numpy float64 forward pass + loss.

Writes DIR/report/report.md, DIR/report/report.json and PNG charts beside them.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from capstones.byte_transformer import args, data, training
from core import checkpoint, tokenizer, transformer

REPORT_DIR = "report"
PIECES = {
    "eval": ("eval.json", "eval run_dir=DIR"),
    "cache_report": ("cache_report.json", "cache-report run_dir=DIR"),
    "export": ("artifacts/manifest.json", "export run_dir=DIR out=DIR/artifacts"),
    "profile": ("profile/profile.json", "profile run_dir=DIR out=DIR/profile"),
    "bench": ("bench.json", "bench out=DIR/bench.json"),
    "plan": ("plan.json", "plan out=DIR/plan.json"),
    "run_manifest": ("run_manifest.json", "run-manifest run_dir=DIR"),
}


def _load_json(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def load_pieces(run_dir: pathlib.Path) -> dict[str, Any]:
    """{piece: parsed JSON or None} for every optional piece."""
    return {name: _load_json(run_dir / file) for name, (file, _) in PIECES.items()}


# --- live checks on the trained model ------------------------------------------------------


def causality_check(config, params, batch: dict, window: int = 32, seed: int = 0) -> dict:
    """Largest |d (logits[t] . r) / d embedding[s]| over s > t (must be exactly 0) and the
    smallest over s <= t in the same document (must be > 0), on the first ``window``
    positions of a held-out row, by reverse-mode autodiff through the whole model.

    r is a random direction over the 256 byte logits: a zero Jacobian block gives exactly 0
    for every r, a non-zero one gives non-zero for almost every r, and it costs T backward
    passes instead of T * 256.
    """
    import jax
    import jax.numpy as jnp

    model = training.model_from_params(config, params)
    t = min(window, config.seq_len)
    tokens = jnp.asarray(batch["tokens_BT"][:1, :t])
    segments = np.asarray(batch["segment_ids_BT"][0, :t])
    positions = jnp.asarray(batch["positions_BT"][:1, :t])
    mask = tokenizer.segment_mask_BTS(jnp.asarray(segments[None]), causal=True)[:, None]
    direction_V = jax.random.normal(jax.random.key(seed), (model.config.vocab_size,))

    def projected_logits_T(x):
        return model.unembed(model.backbone(x[None], mask))[0] @ direction_V

    jacobian_TSD = jax.jacrev(projected_logits_T)(model.embed(tokens, positions)[0])
    norms = np.asarray(jnp.sqrt(jnp.sum(jacobian_TSD**2, axis=-1)), np.float64)
    later = np.triu(np.ones((t, t), bool), 1)
    same = (segments[:, None] == segments[None, :]) & (segments[:, None] != 0)
    return {
        "window": t,
        "max_norm_later": float(norms[later].max()),
        "min_norm_allowed": float(norms[~later & same].min()),
        "passed": bool(norms[later].max() == 0.0 and norms[~later & same].min() > 0),
    }


def loss_check(config, params, packed: tokenizer.Packed, rows: int = 2) -> dict:
    """The valid-token loss of the first ``rows`` held-out rows: JAX vs numpy float64
    (forward pass and loss written out independently, counting placed document bytes)."""
    rows = min(rows, packed.tokens_BT.shape[0])
    small = tokenizer.Packed(
        packed.tokens_BT[:rows],
        packed.segment_ids_BT[:rows],
        packed.positions_BT[:rows],
        tuple(p for p in packed.placements if p.row < rows),
    )
    model = training.model_from_params(config, params)
    batch = transformer.batch_from_packed(small)
    logits = transformer.forward(
        model, batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"]
    )
    loss, count = transformer.token_loss(logits, batch["targets_BT"], batch["weights_BT"])
    reference_logits = transformer.lm_reference(
        model, small.tokens_BT, small.segment_ids_BT, small.positions_BT
    )
    reference, reference_count = transformer.token_loss_reference(reference_logits, small)
    error = abs(float(loss) - reference) / max(abs(reference), 1e-12)
    tolerance = 1e-4 if config.compute_dtype == "float32" else 2e-2
    return {
        "rows": rows,
        "jax_loss": float(loss),
        "numpy_float64_loss": reference,
        "valid_tokens": int(count),
        "numpy_valid_tokens": reference_count,
        "relative_error": error,
        "tolerance": tolerance,
        "passed": bool(int(count) == reference_count and error <= tolerance),
    }


# --- charts --------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def loss_chart(metrics: list[dict], path: pathlib.Path) -> None:
    plt = _plt()
    figure, axis = plt.subplots(figsize=(7, 3.6))
    steps = [r["step"] for r in metrics]
    axis.plot(steps, [r["loss"] for r in metrics], color="#9ecae1", label="train (valid bytes)")
    held = [(r["step"], r["heldout_loss"]) for r in metrics if "heldout_loss" in r]
    if held:
        axis.plot(*zip(*held, strict=True), "o-", color="#e45756", label="held-out files")
    axis.axhline(math.log(256), color="#888", linestyle="--", label="uniform over 256 bytes")
    axis.set(xlabel="step", ylabel="loss (nats per byte)", title="Training loss")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def bar_chart(labels: list[str], values: list[float], title: str, ylabel: str, path) -> None:
    plt = _plt()
    figure, axis = plt.subplots(figsize=(7, 3.2))
    axis.bar(labels, values, color="#4c78a8")
    for index, value in enumerate(values):
        axis.annotate(f"{value:,.3g}", (index, value), ha="center", va="bottom")
    axis.set(title=title, ylabel=ylabel)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# --- markdown ------------------------------------------------------------------------------


def md_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    keys = list(dict.fromkeys(k for row in rows for k in row))

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(row.get(k, "")) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def _flat_rows(value: Any, prefix: str = "") -> list[dict]:
    """A nested JSON value as (key, value) rows (lists of scalars joined)."""
    rows = []
    if isinstance(value, dict):
        for key, item in value.items():
            rows += _flat_rows(item, f"{prefix}{key}.")
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, item in enumerate(value):
            rows += _flat_rows(item, f"{prefix}{index}.")
    else:
        text = json.dumps(value) if isinstance(value, list) else value
        rows.append({"key": prefix.rstrip("."), "value": text})
    return rows


def _table_rows(piece: Any) -> list[dict] | None:
    """The first list of flat dicts under a 'rows'/'table' key (a command's own table)."""
    if isinstance(piece, dict):
        for key in ("rows", "table", "top_ops", "endpoints"):
            value = piece.get(key)
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return [
                    {k: v for k, v in row.items() if not isinstance(v, (dict, list))}
                    for row in value
                ]
    return None


def build_report(run_dir: pathlib.Path, live_checks: bool = True) -> dict:
    """Gather everything into one dict (what report.json holds) and draw the charts."""
    run_dir = pathlib.Path(run_dir)
    out = run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    config, restored = training.load_state(run_dir)
    corpus_identity = _load_json(run_dir / training.CORPUS_FILE) or {}
    metrics = training.read_metrics(run_dir)
    pieces = load_pieces(run_dir)
    report: dict[str, Any] = {
        "run_dir": str(run_dir.absolute()),
        "config": config.to_dict(),
        "parameters": int(sum(np.prod(np.shape(x)) for x in _leaves(restored.state["params"]))),
        "corpus": {
            "train_files": len(corpus_identity.get("train_files", [])),
            "heldout_files": len(corpus_identity.get("heldout_files", [])),
            "train_sha256": corpus_identity.get("train_sha256"),
            "heldout_sha256": corpus_identity.get("heldout_sha256"),
            "overlap": sorted(
                set(corpus_identity.get("train_files", []))
                & set(corpus_identity.get("heldout_files", []))
            ),
        },
        "training": _training_summary(metrics, restored.step),
        "checkpoints": _checkpoint_rows(run_dir / training.CHECKPOINTS, config),
        "pieces": pieces,
        "missing": {name: command for name, (_, command) in PIECES.items() if pieces[name] is None},
        "charts": {},
    }
    if metrics:
        loss_chart(metrics, out / "loss.png")
        report["charts"]["loss"] = "loss.png"
    cache = pieces["cache_report"]
    cache_rows = _table_rows(cache) or []
    if cache_rows and "precision" in cache_rows[0]:
        byte_key = next((k for k in cache_rows[0] if "bytes" in k), None)
        if byte_key:
            bar_chart(
                [r["precision"] for r in cache_rows],
                [float(r[byte_key]) for r in cache_rows],
                "KV cache: stored bytes per token per layer",
                "bytes",
                out / "cache_bytes.png",
            )
            report["charts"]["cache_bytes"] = "cache_bytes.png"
    if live_checks:
        corpus = data.load_corpus(config)
        packed = data.heldout_packed(config, corpus)
        report["checks"] = {
            "causality": causality_check(
                config, restored.state["params"], transformer.batch_from_packed(packed[0])
            ),
            "valid_token_loss": loss_check(config, restored.state["params"], packed[0]),
        }
    return report


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def _training_summary(metrics: list[dict], checkpoint_step: int) -> dict:
    if not metrics:
        return {"steps": 0, "checkpoint_step": checkpoint_step}
    held = [r for r in metrics if "heldout_loss" in r]
    steady = [r["step_time_s"] for r in metrics[1:]] or [metrics[0]["step_time_s"]]
    return {
        "steps": metrics[-1]["step"],
        "checkpoint_step": checkpoint_step,
        "first_loss": metrics[0]["loss"],
        "last_loss": metrics[-1]["loss"],
        "last_heldout_loss": held[-1]["heldout_loss"] if held else None,
        "last_heldout_bpb": held[-1]["heldout_bpb"] if held else None,
        "valid_tokens": int(sum(r["tokens"] for r in metrics)),
        "median_step_time_s": float(np.median(steady)),
        "first_step_time_s": metrics[0]["step_time_s"],
        "median_tokens_per_s": float(np.median([r["tokens_per_s"] for r in metrics[1:]] or [0])),
    }


def _checkpoint_rows(directory: pathlib.Path, config) -> list[dict]:
    rows = []
    for step, step_dir in sorted(checkpoint.step_dirs(directory).items()):
        problems = checkpoint.manifest_problems(step, step_dir, None)
        rows.append(
            {
                "step": step,
                "verified": not problems,
                "problems": "; ".join(problems) or "-",
                "bytes": sum(f.stat().st_size for f in step_dir.rglob("*") if f.is_file()),
            }
        )
    return rows


def render_markdown(report: dict) -> str:
    config, training_summary, pieces = report["config"], report["training"], report["pieces"]
    lines = [
        "# Byte Transformer capstone report",
        "",
        f"Run directory `{report['run_dir']}`. Model: d_model {config['d_model']}, "
        f"{config['num_layers']} layers, {config['num_heads']} heads, MLP "
        f"{config['mlp_width'] or 4 * config['d_model']}, seq_len {config['seq_len']}, batch "
        f"{config['batch_size']}, dropout {config['dropout']}, compute {config['compute_dtype']}: "
        f"**{report['parameters']:,} parameters**.",
        "",
        "## Data (split by file)",
        "",
        f"{report['corpus']['train_files']} training files (sha256 "
        f"`{str(report['corpus']['train_sha256'])[:16]}…`), {report['corpus']['heldout_files']} "
        f"held-out files (sha256 `{str(report['corpus']['heldout_sha256'])[:16]}…`); files on "
        f"both sides: {report['corpus']['overlap'] or 'none'}.",
        "",
        "## Training",
        "",
        md_table([training_summary]),
    ]
    if "loss" in report["charts"]:
        lines += ["", "![training loss](loss.png)"]
    lines += [
        "",
        "### Checkpoints (sha256 manifests re-verified now)",
        "",
        md_table(report["checkpoints"]),
    ]
    if "checks" in report:
        lines += [
            "",
            "## 1 · Causality and the valid-token loss, re-checked on the trained model",
            "",
        ]
        for name, check in report["checks"].items():
            lines += [
                f"**{name}**: {'PASS' if check['passed'] else 'FAIL'}",
                "",
                md_table([check]),
                "",
            ]
    if pieces["eval"]:
        ev = pieces["eval"]
        lines += [
            "",
            "### Held-out evaluation",
            "",
            f"Step {ev.get('step')}: **{ev.get('loss', float('nan')):.4f} nats/byte = "
            f"{ev.get('bits_per_byte', float('nan')):.4f} bits/byte** over {ev.get('tokens')} "
            f"bytes of {ev.get('heldout_files')} files never trained on (uniform: 8 bits/byte).",
        ]
    titles = {
        "cache_report": "3 · KV cache: fp32 vs bf16 vs int8",
        "export": "4 · Exported endpoints (jax.export)",
        "profile": "5 · Profile (warmed train step)",
        "bench": "5 · Benchmark",
        "run_manifest": "6 · Run manifest",
        "plan": "7 · TPU plan, precision policy, memory budget, hypothesis",
    }
    for name, title in titles.items():
        piece = pieces[name]
        lines += ["", f"## {title}", ""]
        if piece is None:
            lines.append(f"Not run yet: `python -m capstones.byte_transformer {PIECES[name][1]}`")
            continue
        rows = _table_rows(piece)
        if rows:
            lines += [md_table(rows), ""]
        summary = {k: v for k, v in piece.items() if not isinstance(v, (dict, list))}
        if summary:
            lines.append(md_table([{"key": k, "value": v} for k, v in summary.items()]))
        if name == "cache_report" and "cache_bytes" in report["charts"]:
            lines += ["", "![cache bytes](cache_bytes.png)"]
        if not rows and not summary:
            lines.append(md_table(_flat_rows(piece)[:60]))
    return "\n".join(lines) + "\n"


def write_report(run_dir: pathlib.Path, live_checks: bool = True) -> pathlib.Path:
    report = build_report(run_dir, live_checks)
    out = pathlib.Path(run_dir) / REPORT_DIR
    checkpoint.write_json_atomic(out / "report.json", report)
    markdown = out / "report.md"
    tmp = markdown.with_suffix(".md.tmp")
    tmp.write_text(render_markdown(report))
    tmp.replace(markdown)
    return markdown


def report_command(parsed: args.Parsed) -> int:
    run_dir = pathlib.Path(parsed["run_dir"])
    path = write_report(run_dir, live_checks=parsed["checks"])
    report = json.loads((path.parent / "report.json").read_text())
    print(f"report: {path} (+ report.json, charts)")
    for name, command in report["missing"].items():
        print(f"  missing {name}: python -m capstones.byte_transformer {command}")
    failed = [k for k, v in report.get("checks", {}).items() if not v["passed"]]
    if failed:
        print(f"FAILED checks: {failed}")
        return 1
    return 0


COMMANDS = {
    "report": args.Command(
        "Gather training, evaluation, checks, KV cache, export, profile, bench, plan and the "
        "run manifest of DIR into DIR/report/report.md + report.json (+ PNG charts).",
        {
            "run_dir": training.RUN_DIR,
            "checks": args.Option(bool, True, "re-run causality and loss checks on the model"),
        },
        report_command,
        config_overrides=False,
    )
}
