"""How a trained policy compares with its reference: true reward, KL, diversity, accuracy.

Responses are sampled from the policy (temperature 1) on given prompts; the KL to the
reference is estimated per sequence as the sum over response tokens of the per-token k1 and
k3 estimators (losses.kl_estimators), averaged over the samples.
"""

from __future__ import annotations

import jax
import numpy as np

from core.post_training import losses, model, preferences, task

SAMPLES_PER_PROMPT = 4


def hashes_caption(base_origin: str, more: str = "") -> str:
    """The caption of a table of content hashes: hashes of trained weights hold for this
    process's device count (XLA:CPU rounds the same training differently with 1 and with 8
    devices, so base_params(0) hashes differently), and where the base model came from."""
    caption = (
        f"Content hashes (sha256, first {model.HASH_CHARS} hex). Trained weights hash the "
        f"same only at the same device count ({len(jax.devices())} devices here) on the same "
        "kind of machine: the training's float rounding depends on them. Base model: "
        f"{base_origin}"
    )
    return f"{caption}; {more}" if more else caption


BAR_WIDTH = 60  # pixels per bar of bars_by_policy


def bars_by_policy(reports: dict[str, dict], measures, title: str):
    """One bar per policy for each measure (a column each). The policies are named by the
    colour legend under the chart, not under the bars: their names are wider than a bar and
    ran into each other there ("DPO policyreference (base)")."""
    import altair as alt
    import pandas as pd

    rows = pd.DataFrame(
        [
            {"policy": name, "measure": measure, "value": values[measure]}
            for name, values in reports.items()
            for measure in measures
        ]
    )
    return (
        alt.Chart(rows, title=title)
        .mark_bar()
        .encode(
            x=alt.X("policy:N", title=None, axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("value:Q", title=None),
            color=alt.Color("policy:N", legend=alt.Legend(orient="bottom", title=None)),
            column=alt.Column("measure:N", title=None),
        )
        .properties(width=BAR_WIDTH * len(reports), height=200)
    )


def sequence_kl(policy, reference, tokens_BT, weights_BT) -> dict[str, np.ndarray]:
    """Per-sequence KL estimates (nats): k1 and k3 summed over the response tokens."""
    logp = model.token_logprobs_BT(policy, tokens_BT)
    ref = model.token_logprobs_BT(reference, tokens_BT)
    estimates = losses.kl_estimators(logp, ref)
    return {k: np.asarray((v * weights_BT).sum(1)) for k, v in estimates.items()}


def policy_report(policy, reference, prompts, key, rm=None) -> dict[str, float]:
    """Mean true reward, learned reward (when ``rm`` is given), KL to the reference (k1, k3),
    the share of distinct responses and greedy accuracy of ``policy`` on ``prompts``."""
    repeated = [p for p in prompts for _ in range(SAMPLES_PER_PROMPT)]
    tokens, weights = task.sample(policy, repeated, key)
    kl = sequence_kl(policy, reference, tokens, weights)
    responses = task.responses_of(tokens, weights)
    out = {
        "true reward": float(np.mean(preferences.rewards_of(repeated, tokens, weights))),
        "KL k1 (nats)": float(np.mean(kl["k1"])),
        "KL k3 (nats)": float(np.mean(kl["k3"])),
        "distinct responses per prompt": len(set(zip(repeated, responses, strict=True)))
        / len(prompts),
        "greedy accuracy": task.accuracy(policy, prompts),
    }
    if rm is not None:
        out["learned reward"] = float(
            np.mean(np.asarray(preferences.reward_B(rm, tokens, weights)))
        )
    return out
