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

and re-checks two things on the trained model itself (point 1 of the capstone; live_checks.py):
no logit depends on a later byte (gradients through the whole model on a held-out window) and
the valid-token loss of a held-out batch equals a numpy float64 forward pass + loss.

Writes DIR/report/report.md, DIR/report/report.json and PNG charts beside them.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from capstones.byte_transformer import args, data, documents, rundir, training
from capstones.byte_transformer.live_checks import causality_check, loss_check
from core.documents import write_text_atomic
from core.lm import transformer
from core.state import checkpoint

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
MODELS = {
    "eval": documents.EvalResult,
    "cache_report": documents.CacheReport,
    "export": documents.ExportManifest,
    "profile": documents.ProfileResult,
    "bench": documents.BenchResult,
    "plan": documents.Plan,
    "run_manifest": documents.RunManifest,
}


def load_pieces(run_dir: pathlib.Path) -> dict[str, Any]:
    """{piece: its verified document, or None when the file is not there} for every optional
    piece (documents.DocumentError, naming the file and field, for one that is not JSON or
    not what its command writes)."""
    return {
        name: documents.load_optional(run_dir / file, MODELS[name])
        for name, (file, _) in PIECES.items()
    }


def load_metrics(run_dir: pathlib.Path) -> list[dict]:
    """metrics.jsonl's records (training.read_metrics), each verified (DocumentError)."""
    path = run_dir / training.METRICS_FILE
    records = training.read_metrics(run_dir)
    for number, record in enumerate(records, start=1):
        documents.check(documents.MetricsRecord, record, f"{path} (record {number})")
    return records


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
    config, restored = training.load_state(run_dir)  # refuses a missing run: nothing made
    corpus_path = run_dir / training.CORPUS_FILE
    corpus_identity = documents.load_optional(corpus_path, documents.CorpusIdentity) or {}
    metrics = load_metrics(run_dir)
    pieces = load_pieces(run_dir)  # every piece verified before anything is written
    out = run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
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
    if cache and cache.get("rows"):
        bar_chart(
            [r["cache"] for r in cache["rows"]],
            [float(r["bytes_per_token_per_layer"]) for r in cache["rows"]],
            "KV cache: stored bytes per token per layer",
            "bytes",
            out / "cache_bytes.png",
        )
        report["charts"]["cache_bytes"] = "cache_bytes.png"
    bench = pieces["bench"]
    if bench and "jax" in bench:
        labels, values = ["JAX"], [bench["jax"]["step"]["tokens_per_s"]]
        for name in ("torch_eager", "torch_compile"):
            if "step" in bench.get(name, {}):
                labels.append(name.replace("_", " "))
                values.append(bench[name]["step"]["tokens_per_s"])
        bar_chart(
            labels,
            values,
            "Training tokens/s (same model, same batch)",
            "tokens/s",
            out / "throughput.png",
        )
        report["charts"]["throughput"] = "throughput.png"
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
    renderers = {
        "cache_report": ("3 · KV cache: fp32 vs bf16 vs int8", _cache_section),
        "export": ("4 · Exported endpoints (jax.export)", _export_section),
        "profile": ("5 · Profile (warmed train step, compile excluded)", _profile_section),
        "bench": ("5 · Benchmark (one run, one machine)", _bench_section),
        "run_manifest": ("6 · Run manifest", _manifest_section),
        "plan": ("7 · TPU plan, precision policy, memory budget, hypothesis", _plan_section),
    }
    for name, (title, render) in renderers.items():
        piece = pieces[name]
        lines += ["", f"## {title}", ""]
        if piece is None:
            lines.append(f"Not run yet: `python -m capstones.byte_transformer {PIECES[name][1]}`")
            continue
        try:
            lines += render(piece, report)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # a piece from another version of its command: show it raw rather than fail
            lines += [f"(could not summarise: {exc!r}; raw values follow)", ""]
            lines.append(md_table(_flat_rows(piece)[:80]))
    return "\n".join(lines) + "\n"


def _cache_section(cache: dict, report: dict) -> list[str]:
    keys = (
        "cache bytes_per_token_per_layer ratio_vs_fp32 target_ratio meets_target "
        "max_abs_logit_error mean_abs_logit_error teacher_forced_top1_agreement "
        "greedy_agreement heldout_loss_delta"
    ).split()
    lines = [
        f"{cache['data']['windows']} held-out windows x {cache['data']['window_tokens']} bytes "
        f"(prefill {cache['data']['prefill_len']}, then decode), greedy generation of "
        f"{cache['gen_tokens']} bytes from {len(cache['prompts'])} prompts. The fp32 cache vs "
        "the full forward pass, both at HIGHEST matmul precision: max |Δ logit| "
        f"{cache['fp32_cache_vs_full_forward_max_abs']:.2g}.",
        "",
        md_table([{k: row.get(k) for k in keys} for row in cache["rows"]]),
    ]
    if "cache_bytes" in report["charts"]:
        lines += ["", "![cache bytes](cache_bytes.png)"]
    return lines


def _export_section(manifest: dict, report: dict) -> list[str]:
    rows = [
        {
            "endpoint": name,
            "bytes": item["bytes"],
            "sha256": item["sha256"][:16] + "…",
            "platforms": ",".join(item["platforms"]),
            "inputs": "; ".join(
                f"{i['name']} {i['dtype']}{i['shape']}" for i in item["inputs"][-3:]
            ),
        }
        for name, item in manifest["artifacts"].items()
    ]
    versions = manifest["versions"]
    return [
        f"Shapes {manifest['shapes']}; weights `{manifest['weights']['file']}` "
        f"({manifest['weights']['bytes']:,} bytes, "
        f"sha256 `{manifest['weights']['sha256'][:16]}…`); "
        f"jax {versions.get('jax')}, "
        f"calling convention {versions.get('calling_convention_version')}. "
        "Inputs column: the last three (the weights come first).",
        "",
        md_table(rows),
    ]


def _profile_section(profile: dict, report: dict) -> list[str]:
    keep = ("op", "count", "ms_per_step", "share", "source")
    return [
        f"{profile['steps']} traced steps after warm-up; wall {profile['wall_total_s']:.3g} s; "
        f"ops busy {profile['op_busy_s']:.3g} s. Top ops by self time:",
        "",
        md_table([{k: r.get(k) for k in keep} for r in profile["op_table"][:12]]),
        "",
        md_table(profile.get("by_phase", [])),
    ]


def _bench_section(bench: dict, report: dict) -> list[str]:
    figures = [
        {
            "measure": "JAX lower + compile (train step)",
            "value": f"{bench['jax']['lower_s']:.2f} + {bench['jax']['compile_s']:.2f} s",
        },
        {
            "measure": "JAX step (median)",
            "value": f"{bench['jax']['step']['median_s'] * 1e3:.1f} ms, "
            f"{bench['jax']['step']['tokens_per_s']:,.0f} tokens/s",
        },
    ]
    for name in ("torch_eager", "torch_compile"):
        part = bench.get(name, {})
        figures.append(
            {
                "measure": f"{name.replace('_', ' ')} step (median)",
                "value": f"{part['step']['median_s'] * 1e3:.1f} ms, "
                f"{part['step']['tokens_per_s']:,.0f} tokens/s"
                if "step" in part
                else f"failed: {part.get('error')}",
            }
        )
    figures += [
        {
            "measure": "FLOPs per step",
            "value": f"{bench['flops']['total']:.3g} ({bench['flops']['formula']})",
        },
        {
            "measure": "f32 GEMM peak (fastest measured: XLA | torch)",
            "value": f"{bench['peak']['flop_per_s'] / 1e9:.1f} GFLOP/s, {bench['peak']['kernel']}"
            f" ({bench['peak']['xla_best_flop_per_s'] / 1e9:.1f} | "
            f"{bench['peak']['torch_best_flop_per_s'] / 1e9:.1f})",
        },
        {
            "measure": "decode: KV cache vs recompute (per-token dispatch | on-device loop)",
            "value": f"{bench['decode']['speedup']:.1f}x | "
            f"{bench['decode'].get('speedup_device_loop') or float('nan'):.1f}x at context "
            f"{bench['decode']['context']}",
        },
    ]
    targets = [
        {"measure": k, "value": v["value"], "goal": f"{v['op']} {v['target']}", "pass": v["pass"]}
        for k, v in bench["targets"].items()
    ]
    lines = [
        f"Machine: {bench['machine']}; load average {bench['load_average']['start']} -> "
        f"{bench['load_average']['end']}.",
        "",
        md_table(figures),
        "",
        md_table(targets),
    ]
    if bench.get("defects"):
        lines += ["", "Defects (targets missed, explained):", ""] + [
            f"- {d}" for d in bench["defects"]
        ]
    lines += ["", *_bench_story(bench)]
    from capstones.byte_transformer.bench import report as bench_text  # the optional parts

    if extra := bench_text.variant_lines(bench):
        lines += ["", "```text", *extra[1:], "```"]
    if "throughput" in report["charts"]:
        lines += ["", "![throughput](throughput.png)"]
    return lines


def _bench_story(bench: dict) -> list[str]:
    """Measure, find the bottleneck, fix, measure again: the bench's own figures in order."""
    malloc, speed, flops = bench["allocator_comparison"], bench["jax_vs_torch"], bench["flops"]
    jax_step, torch_step = bench["jax"]["step"], bench[speed["faster_torch"]]["step"]
    lines = ["**Why JAX was slower, and what changed (measure, find, fix, measure again)**", ""]
    if malloc.get("error") is None and malloc.get("glibc_defaults"):
        before, after = malloc["glibc_defaults"], malloc["tuned"]
        lines.append(
            f"1. *The profile misled.* With glibc's default malloc the JAX step took "
            f"{before['median_s']:.3f} s with {before['minor_faults_per_step']:,.0f} minor page "
            f"faults and {before['system_s_per_step']:.3f} s of system CPU per step: XLA's "
            "freed step buffers were unmapped and faulted in again every step, inside the ops, "
            "so every op of the trace looked slow. Faults per step (getrusage) and the temp "
            "bytes of `compiled.memory_analysis()` showed it."
        )
        lines.append(
            f"2. *The fix:* one arena, no mmap, no trim (core/perf/allocator.py): "
            f"{after['median_s']:.3f} s, {after['minor_faults_per_step']:,.0f} faults per step "
            f"({malloc['speedup']:.2f}x; two fresh processes, one after the other)."
        )
    else:
        lines.append(f"1. Allocator before/after not measured: {malloc.get('error')}.")
    lines.append(
        f"3. *Attention:* the causal blocked core skips {flops['attention_skipped'] / 1e9:.2f} "
        f"of the formula's {flops['total'] / 1e9:.2f} GFLOP (counted in MFU anyway); in the "
        f"same rounds the dense core gives {speed['dense_attention_speedup']:.2f}x torch, the "
        f"blocked one {speed['speedup']:.2f}x."
    )
    lines.append(
        f"4. *Measured again:* JAX {jax_step['median_s']:.3f} s "
        f"({jax_step['minor_faults_per_step']:,.0f} faults/step) vs {speed['faster_torch']} "
        f"{torch_step['median_s']:.3f} s: {speed['speedup']:.2f}x (median of per-round ratios "
        f"{speed['median_of_round_ratios']:.2f}x); MFU {bench['jax']['mfu']:.1%} of the "
        f"fastest GEMM measured here."
    )
    return lines


def _manifest_section(manifest: dict, report: dict) -> list[str]:
    tpu = manifest["tpu"] or {}
    events = manifest["backend_events"] or {"counts": "no job log given"}
    teardown = manifest["teardown"] or {}
    return [
        f"**{manifest['verdict']}** (is_tpu_run: {manifest['is_tpu_run']}, backend "
        f"{manifest['backend']}, {len(manifest['devices'])} devices).",
        "",
        md_table(
            [
                {
                    "field": "TPU",
                    "value": f"{tpu.get('name')} {tpu.get('zone')} "
                    f"{tpu.get('accelerator_type')} {tpu.get('runtime_version')}",
                },
                {
                    "field": "packages",
                    "value": ", ".join(
                        f"{k} {v}" for k, v in manifest["environment"]["packages"].items()
                    ),
                },
                {
                    "field": "backend events",
                    "value": json.dumps(events.get("counts")),
                },
                {
                    "field": "checkpoint files",
                    "value": f"{manifest['checkpoints']['file_count']} "
                    f"({manifest['checkpoints']['total_bytes']:,} bytes)",
                },
                {
                    "field": "teardown",
                    "value": f"deleted {teardown.get('deleted')}; "
                    f"{str(teardown.get('proof'))[:120]}",
                },
            ]
        ),
    ]


def _plan_section(plan: dict, report: dict) -> list[str]:
    choice = plan["recommendation"]["choice"]
    lines = [
        f"**Recommendation: {choice.get('generation')} {choice.get('topology')} "
        f"({choice.get('accelerator_type')}, {choice.get('chips')} chips).**",
        "",
    ]
    lines += [f"- {reason}" for reason in plan["recommendation"].get("reasons", [])]
    lines += ["", "Precision policy:", "", md_table(plan["precision"]), ""]
    compiler = plan["compiler"]
    if compiler.get("available"):
        for name, topo in compiler["topologies"].items():
            lines += [
                f"Memory per chip, analytic vs the TPU compiler ({name}):",
                "",
                md_table(topo["comparison"]),
                "",
            ]
    else:
        lines += [f"TPU compiler not available: {compiler.get('problem')}", ""]
    hypothesis = plan["hypothesis"]
    lines += [
        f"**Hypothesis**: {hypothesis['statement']}",
        "",
        md_table(
            [
                {
                    k: hypothesis.get(k)
                    for k in (
                        "peak_bytes_before",
                        "peak_bytes_after",
                        "peak_reduction_pct",
                        "flops_increase_pct",
                        "cpu_step_change_pct",
                        "loss_abs_diff",
                        "max_abs_grad_diff",
                    )
                }
            ]
        ),
        "",
        f"Verdict: {hypothesis.get('verdict')}",
    ]
    return lines


def write_report(run_dir: pathlib.Path, live_checks: bool = True) -> pathlib.Path:
    report = build_report(run_dir, live_checks)
    out = pathlib.Path(run_dir) / REPORT_DIR
    documents.write(out / "report.json", documents.Report, report)
    return write_text_atomic(out / "report.md", render_markdown(report))


def report_command(parsed: args.Parsed) -> int:
    run_dir = rundir.require_run(parsed["run_dir"])
    path = write_report(run_dir, live_checks=parsed["checks"])
    report = documents.load(path.parent / "report.json", documents.Report)
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
