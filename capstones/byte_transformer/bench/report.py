"""The readable text of bench.json and profile.json."""

from __future__ import annotations

import statistics

from capstones.byte_transformer import kv_cache

STEP_ROWS = (
    ("jax", "JAX"),
    ("jax_dense_attention", "JAX dense attn"),
    ("torch_eager", "torch eager"),
    ("torch_compile", "torch.compile"),
)


def machine_lines(report: dict) -> list[str]:
    """Machine and load, config, peak, model FLOPs, compile times."""
    load = report["load_average"]
    others = load.get("other_processes_cores")
    config, batch = report["config"], report["batch"]
    peak, flops, jax_fig = report["peak"], report["flops"], report["jax"]
    tc = report["torch_compile"]
    if "error" in tc:
        torch_compile = f"torch.compile: {tc['error'][:160]}"
    else:
        torch_compile = (
            f"torch.compile: first step {tc['first_step_s']:.1f}s "
            f"(~{tc['compile_s_estimate']:.1f}s compiling)"
        )
    return [
        f"machine: {report['machine']}  (load average start {load['start'][0]:.2f}, end "
        f"{load['end'][0]:.2f}; other processes used "
        + ("n/a" if others is None else f"{others:.2f}")
        + " cores on average during the run)",
        f"config: d_model {config['d_model']}, layers {config['num_layers']}, heads "
        f"{config['num_heads']}, seq {config['seq_len']}, batch {config['batch_size']}, "
        f"dropout {config['dropout']}; {batch['tokens_per_step']} tokens/step "
        f"({batch['valid_tokens_per_step']:.0f} valid)",
        f"peak: {peak['kernel']} {peak['flop_per_s'] / 1e9:.1f} GFLOP/s (best XLA "
        f"{peak['xla_best_flop_per_s'] / 1e9:.1f}, best torch "
        f"{peak['torch_best_flop_per_s'] / 1e9:.1f} GFLOP/s over {len(peak['candidates'])} "
        "GEMMs)",
        f"model FLOPs/step: {flops['total'] / 1e9:.2f} G (matmul {flops['matmul'] / 1e9:.2f} G, "
        f"attention {flops['attention'] / 1e9:.2f} G, of which "
        f"{flops['attention_skipped'] / 1e9:.2f} G above the diagonal are skipped by the "
        "blocked core but counted in MFU)",
        f"allocator: {report['allocator']['mechanism']} "
        + " ".join(f"{k}={v}" for k, v in report["allocator"]["settings"].items())
        + f" ({report['allocator']['reason']}); XLA_FLAGS={report['xla_flags'] or '(none)'}",
        f"JAX compile: lower {jax_fig['lower_s']:.2f}s + compile {jax_fig['compile_s']:.2f}s",
        torch_compile,
    ]


def step_lines(report: dict) -> list[str]:
    """The train-step table, the JAX/torch ratio and the JAX step by category."""
    lines = [
        "",
        f"{'train step':<14} {'median s':>9} {'p10-p90 s':>13} {'cpu s':>7} {'sys s':>6} "
        f"{'faults':>8} {'tokens/s':>10} {'MFU':>6}",
    ]
    for name, label in STEP_ROWS:
        part = report[name]
        if "step" not in part:
            continue
        s = part["step"]
        lines.append(
            f"{label:<14} {s['median_s']:>9.3f} {s['p10_s']:>6.3f}-{s['p90_s']:<6.3f} "
            f"{s['cpu_median_s']:>7.2f} {s['system_s_per_step']:>6.3f} "
            f"{s['minor_faults_per_step']:>8,.0f} {s['tokens_per_s']:>10,.0f} {part['mfu']:>6.1%}"
        )
    speed = report["jax_vs_torch"]
    lines.append(
        f"JAX vs faster torch ({speed['faster_torch']}): {speed['speedup']:.2f}x (median of "
        f"per-round ratios {speed['median_of_round_ratios']:.2f}x); with the dense attention "
        f"core (the step before): {speed['dense_attention_speedup']:.2f}x"
    )
    lines.append("(faults = minor page faults per step; sys s = system CPU seconds per step)")
    breakdown = report["jax"]["breakdown"]
    # The slowdown is this run's own: the traced steps' wall clock over the untraced median.
    slowdown = breakdown["wall_step_s"] / report["jax"]["step"]["median_s"] - 1
    lines.append(
        f"JAX step by category (traced, {breakdown['wall_step_s']:.3f}s/step on the wall clock, "
        f"{slowdown:+.0%} against the untraced median: read shares, not milliseconds):"
    )
    for row in breakdown["categories"]:
        lines.append(f"  {row['category']:<58} {row['ms_per_step']:>8.1f} ms {row['share']:>6.1%}")
    return lines


def decode_lines(report: dict) -> list[str]:
    decode, cache = report["decode"], report["cache_bytes"]
    return [
        "",
        f"decode ({decode['context']}-byte prompt, {decode['new_tokens']} new tokens, batch 1): "
        + ", ".join(
            f"{p} cache {v['tokens_per_s']:,.1f} tok/s" for p, v in decode["cached"].items()
        )
        + f"; recompute {decode['recompute']['tokens_per_s']:,.1f} tok/s; "
        f"greedy tokens identical: {decode.get('greedy_tokens_identical')}",
        "cache bytes/token/layer: "
        + ", ".join(
            f"{p} {cache[p]['closed_form']} (measured {cache[p]['measured']:.0f}, "
            f"{cache[p]['ratio_vs_fp32']:.3f} of fp32)"
            for p in kv_cache.PRECISIONS
        ),
    ]


def target_lines(report: dict) -> list[str]:
    lines = ["", f"{'target':<22} {'value':>9} {'goal':>9}  result"]
    for name, row in report["targets"].items():
        value = "n/a" if row["value"] is None else f"{row['value']:.3f}"
        lines.append(
            f"{name:<22} {value:>9} {row['op'] + ' ' + str(row['target']):>9}  "
            f"{'PASS' if row['pass'] else 'FAIL'}"
        )
    lines += [f"DEFECT: {defect}" for defect in report["defects"]]
    lines += [f"WARNING: {warning}" for warning in report["warnings"]]
    return lines


def _spread(row: dict) -> str:
    return f"{row['median']:.2f}x ({row['min']:.2f}-{row['max']:.2f})"


def variant_lines(report: dict) -> list[str]:
    """The optional parts: block sweep, bf16 policy, decode A/Bs (only those that ran)."""
    lines = []
    sweep = report.get("block_sweep")
    if sweep:
        lines += [
            "",
            f"attention block sweep (T={sweep['seq_len']}, {sweep['rounds']} "
            f"interleaved rounds; default {sweep['default_blocks']} blocks):",
        ]
        for row in sweep["rows"]:
            step = row["step"]
            vs = f", {row['vs_dense']['median']:.2f}x dense" if "vs_dense" in row else ""
            lines.append(
                f"  {str(row['blocks']):<6} {step['median_s']:.3f}s/step "
                f"({step['p10_s']:.3f}-{step['p90_s']:.3f}; skips "
                f"{row['skipped_fraction']:.0%} of the scores{vs})"
            )
        lines.append(f"  fastest: {sweep['fastest']}")
    bf16 = report.get("bf16")
    if bf16:
        lines += ["", f"bf16 compute policy ({bf16['rounds']} interleaved rounds):"]
        for name, row in bf16["rows"].items():
            curve = row["loss_curve"]
            lines.append(
                f"  {name:<11} {row['median_s']:.3f}s/step, loss {curve[0]:.4f} -> {curve[-1]:.4f}"
            )
        for key in (
            "jax_bf16_vs_torch_bf16",
            "jax_f32_vs_torch_f32",
            "jax_bf16_vs_jax_f32",
            "torch_bf16_vs_torch_f32",
        ):
            rounds = bf16[key]["rounds"]
            lines.append(
                f"  {key}: {bf16[key]['of_medians']:.2f}x (per-round {rounds['median']:.2f}x, "
                f"p10-p90 {rounds['p10']:.2f}-{rounds['p90']:.2f})"
            )
        lines.append(
            f"  largest loss gap along the curves: JAX bf16 vs f32 "
            f"{bf16['loss_gap_jax_bf16_vs_f32']:.4f}, torch bf16 vs f32 "
            f"{bf16['loss_gap_torch_bf16_vs_f32']:.4f}"
        )
    ab = report.get("decode_ab")
    if ab:
        here = ab["in_process"]
        ratios = here["ratio_vs_recompute"]
        lines += [
            "",
            f"decode A/B ({ab['rounds']} interleaved rounds; ratio vs recompute, "
            "median (min-max)):",
        ]
        lines.append("  " + ", ".join(f"{way} {_spread(r)}" for way, r in ratios.items()))
        lines.append(f"  loop Eigen off / on: {_spread(here['loop_eigen_off_vs_on'])}")
        arena = ab["arena"]
        if "error" in arena:
            lines.append(f"  arena A/B failed: {arena['error'][:200]}")
        else:
            for mode in ("arena_max_1", "arena_default"):
                lines.append(
                    f"  {mode}: per-token {_spread(arena[mode]['per_token_ratio'])}, loop "
                    f"{_spread(arena[mode]['loop_ratio'])}"
                )
        lines.append("  faster: " + ", ".join(f"{k}={v}" for k, v in ab["faster"].items()))
    return lines


def format_bench(report: dict) -> str:
    """The readable table of a bench report."""
    sections = (machine_lines, step_lines, decode_lines, variant_lines, target_lines)
    return "\n".join(line for section in sections for line in section(report))


def format_profile(report: dict) -> str:
    steps = report["steps"]
    lines = [
        f"profile of {report['module']} on {report['machine']}: {steps} traced steps",
        f"wall per step: {statistics.median(report['wall_step_s']):.3f}s (median); op time "
        f"{report['op_time_total_s'] / steps:.3f}s/step summed over "
        f"{report['threads']} threads; some op running {report['op_busy_s'] / steps:.3f}s/step",
        "",
        f"{'op':<28} {'count':>5} {'ms/step':>9} {'share':>6}  source",
    ]
    for row in report["op_table"]:
        lines.append(
            f"{row['op'][:28]:<28} {row['count']:>5} {row['ms_per_step']:>9.2f} "
            f"{row['share']:>6.1%}  {row['source'][-70:]}"
        )
    lines += ["", f"{'by JAX primitive':<28} {'ms/step':>9} {'share':>6}"]
    for row in report["by_source"][:12]:
        lines.append(f"{row['source'][:28]:<28} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines += ["", f"{'by category':<58} {'ms/step':>9} {'share':>6}"]
    for row in report["by_category"]:
        lines.append(f"{row['category']:<58} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines += ["", f"{'by phase':<28} {'ms/step':>9} {'share':>6}"]
    for row in report["by_phase"]:
        lines.append(f"{row['phase']:<28} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines.append(f"\ntrace: {report['trace_dir']}")
    return "\n".join(lines)
