"""``record=true``: the bench's key figures as benchmark records kept in the repo.

core.perf.records writes them (benchmarks/records/<name>/<date>_<machine>.json, with the
machine, versions, command and the load during the run; it refuses, with nothing written,
when other processes kept the machine busy); one record per part that ran, so a citation
points at the part that measured it:

    byte_transformer_bench        step medians, JAX vs torch, MFU, decode ratios
    byte_transformer_block_sweep  the block-count sweep (causal_blocked.DEFAULT_BLOCKS)
    byte_transformer_bf16         the bf16 compute-policy rows, loss curves
    byte_transformer_decode_ab    the decode A/Bs (Eigen on/off loop, arena_max=1 vs default)
"""

from __future__ import annotations

import pathlib

from core.perf import records

NAMES = {
    "bench": "byte_transformer_bench",
    "block_sweep": "byte_transformer_block_sweep",
    "bf16": "byte_transformer_bf16",
    "decode_ab": "byte_transformer_decode_ab",
}
STEPS = ("jax", "jax_dense_attention", "torch_eager", "torch_compile")


def _r(value):
    """A figure as a float; core.perf.records keeps its significant digits (never a fixed
    number of decimals, which turned small non-zero figures into 0.0)."""
    return None if value is None else float(value)


def _load_note(result: dict) -> str:
    load = result["load_average"]
    others = load.get("other_processes_cores")
    return (
        "interleaved rounds in one process on a shared machine: load average "
        f"{[round(v, 2) for v in load['start']]} at the start, "
        f"{[round(v, 2) for v in load['end']]} at the end, "
        + ("n/a" if others is None else f"{others:.2f}")
        + " cores busy with other processes on average"
    )


def bench_figures(result: dict) -> dict:
    figures = {}
    for name in STEPS:
        step = result[name].get("step")
        if step:
            figures[f"{name}_step_median_s"] = _r(step["median_s"])
            figures[f"{name}_step_p10_p90_s"] = [_r(step["p10_s"]), _r(step["p90_s"])]
            figures[f"{name}_mfu"] = _r(result[name]["mfu"])
    speed, decode = result["jax_vs_torch"], result["decode"]
    figures.update(
        jax_vs_torch_speedup=_r(speed["speedup"]),
        jax_vs_torch_median_of_round_ratios=_r(speed["median_of_round_ratios"]),
        faster_torch=speed["faster_torch"],
        dense_attention_speedup=_r(speed["dense_attention_speedup"]),
        rounds=result["timing"]["rounds"],
        peak_flop_per_s=_r(result["peak"]["flop_per_s"]),
        decode_context=decode["context"],
        decode_new_tokens=decode["new_tokens"],
    )
    for key in ("speedup", "speedup_device_loop", "end_to_end_speedup"):
        if decode.get(key) is not None:
            figures[f"decode_{key}"] = _r(decode[key])
    allocator = result["allocator_comparison"]
    if allocator.get("speedup") is not None:
        figures["allocator_speedup"] = _r(allocator["speedup"])
    return figures


def sweep_figures(sweep: dict) -> dict:
    rows = sweep["rows"]
    figures = {
        "seq_len": sweep["seq_len"],
        "rounds": sweep["rounds"],
        "blocks": [str(r["blocks"]) for r in rows],
        "step_median_s": [_r(r["step"]["median_s"]) for r in rows],
        "step_p10_s": [_r(r["step"]["p10_s"]) for r in rows],
        "step_p90_s": [_r(r["step"]["p90_s"]) for r in rows],
        "fastest": str(sweep["fastest"]),
        "default_blocks": sweep["default_blocks"],
    }
    if all("vs_dense" in r for r in rows):
        figures["vs_dense_median_of_round_ratios"] = [_r(r["vs_dense"]["median"]) for r in rows]
    return figures


def bf16_figures(bf16: dict) -> dict:
    rows = bf16["rows"]
    figures = {"rounds": bf16["rounds"], "warmup": bf16["warmup"]}
    for name, row in rows.items():
        figures[f"{name}_step_median_s"] = _r(row["median_s"])
        figures[f"{name}_loss_curve"] = [_r(v) for v in row["loss_curve"]]
    for key in (
        "jax_bf16_vs_torch_bf16",
        "jax_f32_vs_torch_f32",
        "jax_bf16_vs_jax_f32",
        "torch_bf16_vs_torch_f32",
    ):
        figures[f"{key}_of_medians"] = _r(bf16[key]["of_medians"])
        spread = bf16[key]["rounds"]
        figures[f"{key}_round_ratios_median_p10_p90"] = [
            _r(spread["median"]),
            _r(spread["p10"]),
            _r(spread["p90"]),
        ]
    for key in (
        "loss_gap_jax_bf16_vs_f32",
        "loss_gap_torch_bf16_vs_f32",
        "loss_gap_jax_vs_torch_f32",
    ):
        figures[key] = _r(bf16[key])
    return figures


def decode_ab_figures(ab: dict) -> dict:
    here = ab["in_process"]
    figures = {"context": ab["context"], "new_tokens": ab["new_tokens"], "rounds": ab["rounds"]}
    for way, spread in here["ratio_vs_recompute"].items():
        figures[f"{way}_ratio_median_min_max"] = [
            _r(spread["median"]),
            _r(spread["min"]),
            _r(spread["max"]),
        ]
    for way, spread in here["tokens_per_s"].items():
        figures[f"{way}_tokens_per_s_median"] = _r(spread["median"])
    eigen = here["loop_eigen_off_vs_on"]
    figures["loop_eigen_off_vs_on_median_min_max"] = [
        _r(eigen["median"]),
        _r(eigen["min"]),
        _r(eigen["max"]),
    ]
    arena = ab["arena"]
    if "error" in arena:
        figures["arena_error"] = arena["error"][:300]
    else:
        for mode in ("arena_max_1", "arena_default"):
            for way in ("per_token", "loop"):
                spread = arena[mode][f"{way}_ratio"]
                figures[f"{mode}_{way}_ratio_median_min_max"] = [
                    _r(spread["median"]),
                    _r(spread["min"]),
                    _r(spread["max"]),
                ]
        for way in ("per_token", "loop"):
            figures[f"{way}_arena_max_1_vs_default"] = _r(arena[f"{way}_arena_max_1_vs_default"])
    figures["faster"] = [f"{k}={v}" for k, v in ab["faster"].items()]
    return figures


def write_records(result: dict, command: str, root=None) -> list[pathlib.Path]:
    """One record per part of ``result`` (bench.json's document) that ran."""
    note = _load_note(result)
    config = result["config"]
    shape = (
        f"d_model {config['d_model']}, layers {config['num_layers']}, seq {config['seq_len']}, "
        f"batch {config['batch_size']}, compute {config['compute_dtype']}"
    )
    written = [
        records.write_record(
            NAMES["bench"], command, bench_figures(result), f"{shape}; {note}", root
        )
    ]
    parts = (
        ("block_sweep", sweep_figures),
        ("bf16", bf16_figures),
        ("decode_ab", decode_ab_figures),
    )
    for key, figures in parts:
        if result.get(key):
            written.append(
                records.write_record(
                    NAMES[key],
                    command,
                    figures(result[key]),
                    f"{result[key]['method']}; {note}",
                    root,
                )
            )
    return written
