"""The assessment item of the phase "Post-training: SFT, LoRA, reward models and RLHF".

- ``post_training.dpo_loss`` (predict): the mean DPO loss of a few preference pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.assessment.items import Item, PredictItem


def _dpo_mean(pc, rc, pr, rr, beta, sign=1.0, reference=True) -> float:
    """-log sigmoid(beta * margin) averaged over pairs, float64 (the variants for mistakes)."""
    pc, rc, pr, rr = (np.asarray(x, np.float64) for x in (pc, rc, pr, rr))
    inner = (pc - rc) - (pr - rr) if reference else pc - pr
    margins = sign * beta * inner
    return float(np.mean(np.log1p(np.exp(-margins))))


class DpoLoss(PredictItem):
    id = "post_training.dpo_loss"
    phase = "Post-training: SFT, LoRA, reward models and RLHF"
    lesson = "dpo"
    title = "The mean DPO loss of a few pairs"
    units = "nats"
    rel_tol = 0.02

    def params(self, generator: np.random.Generator) -> dict[str, Any]:
        for _attempt in range(200):  # rejection: every planted mistake lands far away
            pairs = int(generator.integers(3, 6))
            beta = float(generator.choice([0.1, 0.2, 0.5]))
            # Sequence log-probs in quarter nats (exact in float32): the reference's, and
            # the policy's a few nats away after some DPO steps.
            ref_chosen = np.round(generator.uniform(-60, -15, pairs) * 4) / 4
            ref_rejected = np.round(generator.uniform(-60, -15, pairs) * 4) / 4
            pol_chosen = ref_chosen + np.round(generator.uniform(-2, 4, pairs) * 4) / 4
            pol_rejected = ref_rejected + np.round(generator.uniform(-4, 2, pairs) * 4) / 4
            values = dict(pc=pol_chosen, rc=ref_chosen, pr=pol_rejected, rr=ref_rejected)
            expected = _dpo_mean(**values, beta=beta)
            candidates = self._mistakes(values, beta, pairs)
            if all(abs(v - expected) > 0.08 * expected for v in candidates.values()):
                return {**values, "beta": beta}
        raise RuntimeError("no DPO pairs with distinct planted answers in 200 draws")

    @staticmethod
    def _mistakes(values: dict, beta: float, pairs: int) -> dict[str, float]:
        return {
            "no reference correction (beta * (log pi(y_w) - log pi(y_l)))": _dpo_mean(
                **values, beta=beta, reference=False
            ),
            "sign flipped (rejected minus chosen)": _dpo_mean(**values, beta=beta, sign=-1.0),
            "beta omitted": _dpo_mean(**values, beta=1.0),
            "summed over pairs, not averaged": pairs * _dpo_mean(**values, beta=beta),
        }

    def prompt(self, params: dict[str, Any]) -> str:
        rows = "\n".join(
            f"| {i} | {params['pc'][i]:.2f} | {params['rc'][i]:.2f} | {params['pr'][i]:.2f} "
            f"| {params['rr'][i]:.2f} |"
            for i in range(len(params["pc"]))
        )
        return (
            "Sequence log-probabilities (nats, summed over each response's tokens) of the "
            "chosen response y_w and the rejected one y_l of each preference pair, under the "
            "policy π being trained and the frozen reference π_ref:\n\n"
            "| pair | log π(y_w) | log π_ref(y_w) | log π(y_l) | log π_ref(y_l) |\n"
            "|---|---|---|---|---|\n"
            f"{rows}\n\n"
            f"With β = {params['beta']:g}, what is the DPO loss of this batch (the mean over "
            "pairs, as the course's `dpo_loss` computes it)?"
        )

    def live(self, params: dict[str, Any]) -> float:
        import jax.numpy as jnp

        from core.post_training import losses

        as_f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        loss, _margins = losses.dpo_loss(
            as_f32(params["pc"]),
            as_f32(params["pr"]),
            as_f32(params["rc"]),
            as_f32(params["rr"]),
            jnp.float32(params["beta"]),
        )
        return float(loss)

    def derive(self, params: dict[str, Any]) -> tuple[float, str]:
        pc, rc, pr, rr, beta = (params[k] for k in ("pc", "rc", "pr", "rr", "beta"))
        margins = beta * ((pc - rc) - (pr - rr))
        per_pair = np.log1p(np.exp(-margins))  # -log sigmoid(m)
        value = float(per_pair.mean())
        lines = "\n".join(
            f"| {i} | ({pc[i]:.2f} − ({rc[i]:.2f})) − ({pr[i]:.2f} − ({rr[i]:.2f})) = "
            f"{(pc[i] - rc[i]) - (pr[i] - rr[i]):.2f} | {margins[i]:.4f} | {per_pair[i]:.4f} |"
            for i in range(len(pc))
        )
        mistakes = self._mistakes(dict(pc=pc, rc=rc, pr=pr, rr=rr), beta, len(pc))
        derivation = (
            "DPO's loss for a pair is −log σ(β·[(log π(y_w) − log π_ref(y_w)) − "
            "(log π(y_l) − log π_ref(y_l))]) = log(1 + e^(−m)), averaged over pairs:\n\n"
            "| pair | log-ratio difference | m = β × it | −log σ(m) |\n|---|---|---|---|\n"
            f"{lines}\n\n"
            f"mean = {per_pair.sum():.4f} / {len(pc)} = **{value:.4f} nats**\n\n"
            "The classic mistakes give: "
            + "; ".join(f"{name}: {v:.4f}" for name, v in mistakes.items())
            + ".\n\nLesson: the implicit reward is β times the policy's log-ratio to the "
            "reference; what DPO pushes up is the chosen response's implicit reward minus "
            "the rejected one's, so a response that is merely more likely under the "
            "reference earns nothing."
        )
        return value, derivation

    def wrong(self, params: dict[str, Any], expected) -> dict[str, float]:
        values = {k: params[k] for k in ("pc", "rc", "pr", "rr")}
        return self._mistakes(values, params["beta"], len(params["pc"]))


ITEMS: tuple[Item, ...] = (DpoLoss(),)
