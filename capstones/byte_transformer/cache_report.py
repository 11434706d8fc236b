"""The KV cache report: the bf16 and int8 caches against fp32 on held-out windows (logit error,
teacher-forced and greedy agreement, held-out loss, bytes per token against the targets), and
its command ``cache-report``. The caches themselves are in kv_cache.py.

cache_report.json schema (keys; documents.CacheReport, docs/schemas/cache_report.schema.json):
    {"format": "byte_transformer cache report", "version": 1,
     "model": {d_model, num_layers, num_heads, head_dim, compute_dtype, params},
     "data": {"source": "held-out documents", "files": [...], "windows": int,
              "window_tokens": int, "prefill_len": int, "scored_tokens": int},
     "prompts": [str], "gen_tokens": int, "backend": str,
     "full_forward_loss": float,              # no cache, the model's own forward pass
     "fp32_cache_vs_full_forward_max_abs": float,   # both at HIGHEST matmul precision
     "full_forward_max_abs_logit": float,     # the logits' scale that difference is read on
     "targets": {"int8": 0.27, "bf16": 0.5},  # max bytes ratio vs fp32 the issue asks for
     "rows": [{"cache": "fp32"|"bf16"|"int8",
               "bytes_per_token_per_layer": int, "ratio_vs_fp32": float,
               "target_ratio": float|null, "meets_target": bool|null,
               "max_abs_logit_error": float, "mean_abs_logit_error": float,   # vs fp32 cache
               "teacher_forced_top1_agreement": float,   # argmax vs fp32's, same inputs
               "greedy_agreement": float,                # generated tokens equal to fp32's
               "greedy_first_divergence": [int|null],    # per prompt (null: never)
               "heldout_loss": float, "heldout_loss_delta": float}]}   # nats/byte
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence

import jax
import numpy as np

from capstones.byte_transformer import args, documents, kv_cache
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.kv_cache import (
    DEFAULT_PROMPTS,
    PRECISIONS,
    TARGET_RATIOS,
    bytes_per_token_per_layer,
    bytes_ratio,
    generate_padded,
    mean_next_token_loss,
    pad_prompts,
    teacher_forced_logits_BTV,
)
from core import numerics
from core.lm import transformer

REPORT_FORMAT = documents.CACHE_REPORT_FORMAT
# The fp32 cache vs the full forward pass, max |Δ logit| / max(max |logit|, 1) on a CPU: the
# same model summed in another order over a whole forward pass, ten times the table's float32.
FP32_CACHE_VS_FULL_CPU = 1e-4


def fp32_cache_tolerance(backend: str | None = None) -> numerics.Tolerance:
    """The bound on the fp32 cache vs the full forward pass (both at HIGHEST, as
    fp32_cache_and_full_forward runs them) on ``backend`` (default: this process's): the CPU's
    FP32_CACHE_VS_FULL_CPU, or the backend's float32 bound at HIGHEST where that is larger (a
    TPU's 6 bfloat16 passes), with its reason."""
    highest = numerics.tolerance("float32", backend=backend, precision="HIGHEST")
    if highest.reason and highest > FP32_CACHE_VS_FULL_CPU:
        return highest
    return numerics.Tolerance(FP32_CACHE_VS_FULL_CPU)


def fp32_cache_and_full_forward(model, tokens_BT, prefill_len: int, capacity: int):
    """(full forward logits_BTV, fp32-cache teacher-forced logits_BTV), every matmul at HIGHEST
    precision. At a TPU's DEFAULT each float32 matmul is one bfloat16 pass, and the two paths
    are not rounded alike (the decode's one-row products may run in float32, jax#16349): on a
    v5e they differed by 2.7e-3 of the logits' scale, which says nothing about the cache."""
    with jax.default_matmul_precision("highest"):
        full = np.asarray(transformer.forward(model, tokens_BT))
        cached = teacher_forced_logits_BTV(model, tokens_BT, "fp32", prefill_len, capacity)
    return full, cached


def heldout_windows(documents, window: int, max_windows: int) -> np.ndarray:
    """(N, window) int32: consecutive non-overlapping windows of the held-out documents."""
    rows = []
    for doc in documents:
        tokens = np.asarray(getattr(doc, "tokens", doc), np.int32)
        for start in range(0, len(tokens) - window + 1, window):
            rows.append(tokens[start : start + window])
            if len(rows) == max_windows:
                return np.stack(rows)
    if not rows:
        longest = max((len(np.asarray(getattr(d, "tokens", d))) for d in documents), default=0)
        raise ValueError(
            f"no held-out document has {window} tokens (longest {longest}); lower n_tokens"
        )
    return np.stack(rows)


def cache_report(
    model,
    documents,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    n_tokens: int = 128,
    gen_tokens: int = 32,
    prefill_len: int = 16,
    max_windows: int = 8,
) -> dict:
    """Compare the bf16 and int8 caches with fp32 (see the module docstring for the keys).

    Held-out windows of n_tokens + 1 bytes are fed teacher-forced through prefill
    (``prefill_len`` bytes) and then decode; greedy generation of ``gen_tokens`` bytes from
    each prompt compares the tokens chosen."""
    cfg = model.config
    window = n_tokens + 1
    if window > cfg.max_len:
        raise ValueError(f"n_tokens + 1 = {window} exceeds max_len={cfg.max_len}")
    tokens = heldout_windows(documents, window, max_windows)
    prefill_len = max(1, min(prefill_len, window - 1))
    prompt_tokens, lengths = pad_prompts(list(prompts))
    # one capacity for both: with as many prompts as windows, decode compiles once
    capacity = max(window, prompt_tokens.shape[1] + gen_tokens)
    if capacity > cfg.max_len:
        raise ValueError(f"longest prompt + gen_tokens = {capacity} exceeds max_len={cfg.max_len}")
    full, fp32_at_highest = fp32_cache_and_full_forward(model, tokens, prefill_len, capacity)
    logits, generated = {}, {}
    for precision in PRECISIONS:
        logits[precision] = teacher_forced_logits_BTV(
            model, tokens, precision, prefill_len, capacity
        )
        generated[precision] = generate_padded(
            model, prompt_tokens, lengths, gen_tokens, precision, capacity=capacity
        ).new_tokens_BN
    reference, ref_tokens = logits["fp32"], generated["fp32"]
    ref_loss = mean_next_token_loss(reference, tokens)
    rows = []
    for precision in PRECISIONS:
        error = np.abs(logits[precision].astype(np.float64) - reference)
        same = generated[precision] == ref_tokens
        diverged = [int(np.argmin(r)) if not r.all() else None for r in same]
        loss = mean_next_token_loss(logits[precision], tokens)
        ratio = bytes_ratio(cfg, precision)
        target = TARGET_RATIOS.get(precision)
        rows.append(
            {
                "cache": precision,
                "bytes_per_token_per_layer": bytes_per_token_per_layer(cfg, precision),
                "ratio_vs_fp32": ratio,
                "target_ratio": target,
                "meets_target": None if target is None else bool(ratio <= target),
                "max_abs_logit_error": float(error.max()),
                "mean_abs_logit_error": float(error.mean()),
                "teacher_forced_top1_agreement": float(
                    np.mean(logits[precision].argmax(-1) == reference.argmax(-1))
                ),
                "greedy_agreement": float(same.mean()) if same.size else 1.0,
                "greedy_first_divergence": diverged,
                "heldout_loss": loss,
                "heldout_loss_delta": loss - ref_loss,
            }
        )
    return {
        "format": REPORT_FORMAT,
        "version": 1,
        "model": {
            "d_model": cfg.width,
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "head_dim": cfg.head_dim,
            "compute_dtype": cfg.precision.compute,
            "params": transformer.count_params(model),
        },
        "data": {
            "source": "held-out documents",
            "files": [d.name for d in documents if hasattr(d, "name")],
            "windows": int(tokens.shape[0]),
            "window_tokens": window,
            "prefill_len": prefill_len,
            "scored_tokens": int(tokens.shape[0] * (window - 1)),
        },
        "prompts": list(prompts),
        "gen_tokens": gen_tokens,
        "backend": jax.default_backend(),
        "full_forward_loss": mean_next_token_loss(full, tokens),
        "fp32_cache_vs_full_forward_max_abs": numerics.max_abs_error(full, fp32_at_highest),
        "full_forward_max_abs_logit": float(np.max(np.abs(np.asarray(full, np.float64)))),
        "targets": dict(TARGET_RATIOS),
        "rows": rows,
    }


def format_report(report: dict) -> str:
    """The report's rows as a fixed-width table."""
    head = (
        f"{'cache':<6} {'B/tok/layer':>11} {'ratio':>6} {'target':>7} {'max|dlogit|':>11} "
        f"{'mean|dlogit|':>12} {'top1 agree':>10} {'greedy agree':>12} {'loss':>8} {'dloss':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in report["rows"]:
        target = (
            "-"
            if r["target_ratio"] is None
            else f"<={r['target_ratio']:.2f}" + ("" if r["meets_target"] else "!")
        )
        lines.append(
            f"{r['cache']:<6} {r['bytes_per_token_per_layer']:>11} {r['ratio_vs_fp32']:>6.3f} "
            f"{target:>7} {r['max_abs_logit_error']:>11.2e} {r['mean_abs_logit_error']:>12.2e} "
            f"{r['teacher_forced_top1_agreement']:>10.3f} {r['greedy_agreement']:>12.3f} "
            f"{r['heldout_loss']:>8.4f} {r['heldout_loss_delta']:>+9.2e}"
        )
    data = report["data"]
    lines.append(
        f"({data['windows']} held-out windows x {data['window_tokens'] - 1} scored bytes, prefill "
        f"{data['prefill_len']} then decode; full-forward loss {report['full_forward_loss']:.4f}, "
        "fp32 cache vs full forward (both at HIGHEST) max |dlogit| "
        f"{report['fp32_cache_vs_full_forward_max_abs']:.1e}; "
        f"greedy over {report['gen_tokens']} tokens from {len(report['prompts'])} prompts)"
    )
    return "\n".join(lines)


# --- the command ----------------------------------------------------------------------------


def _heldout_documents(config: config_lib.Config):
    """The run's held-out documents (data.load_corpus: the same split training used)."""
    from capstones.byte_transformer import data

    return data.load_corpus(config).heldout


def run_cache_report(parsed: args.Parsed) -> int:
    if parsed["n_tokens"] < 1 or parsed["gen_tokens"] < 0 or parsed["max_windows"] < 1:
        raise args.UsageError("need n_tokens >= 1, gen_tokens >= 0, max_windows >= 1")
    prompts = [p for p in parsed["prompts"].split("|") if p]
    if not prompts:
        raise args.UsageError("prompts: give at least one prompt (separate several with |)")
    config, model = kv_cache._load_model(parsed["run_dir"])
    if parsed["n_tokens"] + 1 > model.config.max_len:
        raise args.UsageError(f"n_tokens + 1 must be <= max_len={model.config.max_len}")
    try:
        report = cache_report(
            model,
            _heldout_documents(config),
            prompts,
            parsed["n_tokens"],
            parsed["gen_tokens"],
            parsed["prefill_len"],
            parsed["max_windows"],
        )
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    out = pathlib.Path(parsed["out"] or pathlib.Path(parsed["run_dir"]) / "cache_report.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    documents.write(out, documents.CacheReport, report)
    print(format_report(report))
    print(f"wrote {out}")
    failed = [r["cache"] for r in report["rows"] if r["meets_target"] is False]
    if failed:
        print(
            f"note: {', '.join(failed)} above the bytes target (int8 needs head_dim >= 50: "
            f"ratio = 1/4 + 1/head_dim)",
            file=sys.stderr,
        )
    return 0


COMMANDS = {
    "cache-report": args.Command(
        "fp32/bf16/int8 KV cache: bytes, logit error, greedy agreement",
        {
            "run_dir": kv_cache.RUN_DIR,
            "n_tokens": args.Option(int, 128, "teacher-forced bytes scored per held-out window"),
            "max_windows": args.Option(int, 8, "held-out windows (rows) to score"),
            "prefill_len": args.Option(int, 16, "bytes of each window fed by prefill"),
            "gen_tokens": args.Option(int, 32, "greedy bytes generated per prompt"),
            "prompts": args.Option(str, "|".join(DEFAULT_PROMPTS), "prompts, separated by |"),
            "out": args.Option(str, "", "JSON path (default RUN_DIR/cache_report.json)"),
        },
        run_cache_report,
        config_overrides=False,
    ),
}
