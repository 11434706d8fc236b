"""The plan as readable text: one plain-text table per section of plan.json."""

from __future__ import annotations

from capstones.byte_transformer.plan.remat import _pct


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table (columns: the first row's keys unless given)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    text = [[str(column) for column in columns]]
    for row in rows:
        text.append([_cell(row.get(column, "")) for column in columns])
    widths = [max(len(line[i]) for line in text) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in text
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _mb(value) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def params_text(plan: dict) -> list[str]:
    params = plan["params"]
    return [
        f"== Parameters: {params['analytic']:,} analytic ({params['formula']}), "
        f"{params['actual']:,} in training.init_state -> "
        f"{'match' if params['matches'] else 'MISMATCH'}",
        format_table([{"part": k, "count": f"{v:,}"} for k, v in params["parts"].items()]),
    ]


def precision_text(plan: dict) -> list[str]:
    rows = [
        {
            "quantity": r["quantity"],
            "dtype": r["dtype"],
            "bytes": r["bytes_per_element"],
            "why": r["why"][:90] + ("..." if len(r["why"]) > 90 else ""),
        }
        for r in plan["precision"]
    ]
    return ["\n== Precision policy", format_table(rows)]


def memory_text(plan: dict) -> list[str]:
    config, analytic = plan["config"], plan["memory_analytic"]
    components = [
        {"component": c["component"], "MB": _mb(c["bytes"]), "formula": c["formula"]}
        for c in analytic["components"]
    ]
    tensors = [
        {"tensor": r["tensor"], "MB": _mb(r["bytes"]), "formula": r["formula"]}
        for r in analytic["per_layer"] + analytic["head"]
    ]
    return [
        f"\n== Analytic memory per chip: data parallel over {analytic['chips']} chips, "
        f"b = {analytic['local_batch']} rows x T = {config['seq_len']} "
        f"({config['compute_dtype']} activations)",
        format_table(components),
        "per layer (saved for the backward pass, no remat):",
        format_table(tensors),
        f"peak (liveness estimate) {_mb(analytic['peak_liveness_bytes'])} MB, with remat "
        f"{_mb(analytic['peak_liveness_remat_bytes'])} MB, everything at once "
        f"{_mb(analytic['peak_all_at_once_bytes'])} MB",
    ]


def kv_cache_text(plan: dict) -> list[str]:
    rows = [
        {
            "cache": r["precision"],
            "bytes/elem": r["bytes_per_element"],
            "batch x context": f"{r['serve_batch']} x {r['context']}",
            "MB": _mb(r["bytes"]),
            "formula": r["formula"],
        }
        for r in plan["kv_cache"]
    ]
    return ["\n== KV cache for serving (per chip, unsharded)", format_table(rows)]


def compiler_text(plan: dict) -> list[str]:
    compiler = plan["compiler"]
    out = ["\n== Analytic vs the TPU compiler (memory_analysis, cost_analysis; one chip)"]
    if not compiler["available"]:
        out.append(f"TPU compiler: {compiler['problem']}")
    for group, label in (("topologies", ""), ("remat", " + remat")):
        for topology, compiled in compiler[group].items():
            out.append(
                f"{topology}{label} ({compiled['device_kind']}, {compiled['chips']} chips, "
                f"compiled in {compiled['compile_s']:.1f} s)"
            )
            rows = [
                {
                    "quantity": r["quantity"],
                    "unit": "MB" if r["unit"] == "bytes" else "MFLOP",
                    "analytic": _mb(r["analytic"]),
                    "compiler": _mb(r["compiler"]),
                    "analytic/compiler": r["analytic_over_compiler"],
                }
                for r in compiled["comparison"]
            ]
            out.append(format_table(rows))
    if compiler["available"]:
        out.append("the gap:")
        out.extend(f"  - {line}" for line in compiler["gap_explanation"])
    return out


def _hypothesis_rows(h: dict) -> list[dict]:
    def giga(value):
        return None if value is None else value / 1e9

    return [
        {
            "measure": f"compiled peak per chip ({h['topology'] or 'no TPU compile'}), MB",
            "before": _mb(h["peak_bytes_before"]),
            "after": _mb(h["peak_bytes_after"]),
            "change %": None if h["peak_reduction_pct"] is None else -h["peak_reduction_pct"],
        },
        {
            "measure": "compiled FLOPs per chip (cost_analysis), GFLOP",
            "before": giga(h["flops_before"]),
            "after": giga(h["flops_after"]),
            "change %": h["flops_increase_pct"],
        },
        {
            "measure": f"CPU step time (median of {h['timing_repeats']}, interleaved), ms",
            "before": h["cpu_step_s_before"] * 1e3,
            "after": h["cpu_step_s_after"] * 1e3,
            "change %": h["cpu_step_change_pct"],
        },
        {
            "measure": "XLA:CPU buffer peak (not TPU evidence), MB",
            "before": _mb(h["cpu_peak_bytes_before"]),
            "after": _mb(h["cpu_peak_bytes_after"]),
            "change %": _pct(h["cpu_peak_bytes_after"], h["cpu_peak_bytes_before"]),
        },
        {
            "measure": "loss on the first batch",
            "before": h["loss_before"],
            "after": h["loss_after"],
            "change %": None,
        },
    ]


def hypothesis_text(plan: dict) -> list[str]:
    h = plan["hypothesis"]
    return [
        f"\n== Hypothesis: {h['statement']}",
        format_table(_hypothesis_rows(h)),
        f"max |grad difference| {h['max_abs_grad_diff']:.3g} (max |grad| "
        f"{h['max_abs_grad']:.3g}); max |param difference| after one AdamW step "
        f"{h['max_abs_param_diff_after_one_step']:.3g} ({h['param_diff_note']})",
        f"verdict: {h['verdict']}",
    ]


def recommendation_text(plan: dict) -> list[str]:
    rec = plan["recommendation"]
    rows = [
        {
            "gen": r["generation"],
            "HBM GB": r["hbm_bytes"] / 1e9,
            "footprint MB": _mb(r["footprint_bytes"]),
            "HBM used %": r["hbm_used_pct"],
            "step >= ms": max(r["step_compute_s"], r["step_memory_s"]) * 1e3,
            "bound": r["bound"],
            "tok/s/chip <=": f"{r['tokens_per_s_per_chip']:,.0f}",
            "$/chip-h": r["usd_per_chip_hour"] if r["usd_per_chip_hour"] is not None else "-",
            "$/1M tok >=": (
                f"{r['usd_per_million_tokens']:.3g}"
                if r["usd_per_million_tokens"] is not None
                else "no list price"
            ),
            "slice for target": r["accelerator_type_for_target"],
        }
        for r in rec["generations"]
    ]
    choice = rec["choice"]
    return [
        "\n== Generation and topology",
        format_table(rows),
        f"recommendation: {choice['topology']} ({choice['accelerator_type']}, "
        f"{choice['chips']} chips)",
        *(f"  - {line}" for line in rec["reasons"]),
        "move up when:",
        *(f"  - {line}" for line in rec["move_up_when"]),
        f"prices: {rec['price_source']}",
    ]


SECTIONS = (
    params_text,
    precision_text,
    memory_text,
    kv_cache_text,
    compiler_text,
    hypothesis_text,
    recommendation_text,
)


def report_text(plan: dict) -> str:
    """The plan as readable tables."""
    return "\n".join(line for section in SECTIONS for line in section(plan))
