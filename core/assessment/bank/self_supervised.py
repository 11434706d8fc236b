"""The assessment item of the phase "Self-supervised pretraining: masked and contrastive learning".

- ``self_supervised.masked_loss_count`` (predict): what the masked-LM mean loss is averaged over.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.assessment.items import Item, PredictItem

_KIND_LABEL = {0: "·", 1: "[M]", 2: "rnd", 3: "kept"}
_PAD_LABEL = "pad"
# The model's cross-entropy at each kind of position, nats: low where it sees the byte.
_NLL_RANGE = {0: (0.02, 0.3), 1: (1.0, 4.0), 2: (2.0, 5.0), 3: (0.1, 0.9), "pad": (4.6, 6.0)}
_WORDS = ("jax", "tpu", "mesh", "shard", "grad", "scan", "vmap", "jit", "key", "bert", "mask")


def _show_input(token: int) -> str:
    """A byte as a Markdown table cell: [M] for MASK_ID, ␣ for a space, \\xNN outside
    printable ASCII, table syntax escaped."""
    from core.lm import ssl_masking

    token = int(token)
    if token == ssl_masking.MASK_ID:
        return "[M]"
    if token == 32:
        return "␣"
    if 33 <= token < 127:
        char = chr(token)
        return "\\" + char if char in "|`*_\\<>[]" else char
    return f"\\x{token:02x}"


def _mlm_means(nll_BT, kind_BT, real_BT) -> dict[str, float]:
    """The mean loss over several sets of positions (float64), from the shown values."""
    selected = real_BT & (kind_BT != 0)
    return {
        "selected": float(nll_BT[selected].mean()),
        "real": float(nll_BT[real_BT].mean()),
        "all": float(nll_BT.mean()),
        "masked only": float(nll_BT[real_BT & (kind_BT == 1)].mean()),
        "sum over B*T": float(nll_BT[selected].sum() / nll_BT.size),
    }


class MaskedLossCount(PredictItem):
    id = "self_supervised.masked_loss_count"
    phase = "Self-supervised pretraining: masked and contrastive learning"
    lesson = "masked_lm"
    title = "What the masked-LM loss averages over"
    units = "nats"
    rel_tol = 0.02
    rows, positions = 2, 12

    def params(self, generator: np.random.Generator) -> dict[str, Any]:
        from core.lm import ssl_masking, tokenizer

        for _attempt in range(200):  # rejection: every planted mistake lands far away
            tokens = np.zeros((self.rows, self.positions), np.int32)
            segments = np.zeros((self.rows, self.positions), np.int32)
            for b in range(self.rows):
                text = b" ".join(
                    w.encode() for w in generator.choice(_WORDS, size=4, replace=False)
                )[: int(generator.integers(7, self.positions))]
                tokens[b, : len(text)] = np.frombuffer(text, np.uint8)
                segments[b, : len(text)] = 1
            select_prob = float(generator.choice([0.2, 0.25, 0.3]))
            uniforms = generator.uniform(1e-6, 1 - 1e-6, (3, *tokens.shape)).astype(np.float32)
            masked = ssl_masking.mask_from_uniforms(uniforms, tokens, segments, select_prob)
            kind = np.asarray(masked.kind_BT)
            real = segments != tokenizer.PAD_SEGMENT
            nll = np.zeros(tokens.shape)
            for code in (0, 1, 2, 3):
                low, high = _NLL_RANGE[code]
                nll[real & (kind == code)] = generator.uniform(
                    low, high, (real & (kind == code)).sum()
                )
            low, high = _NLL_RANGE["pad"]
            nll[~real] = generator.uniform(low, high, (~real).sum())
            nll = np.round(nll, 2)
            counts = {code: int(np.sum(real & (kind == code))) for code in (1, 2, 3)}
            if counts[1] < 1 or counts[2] + counts[3] < 1 or counts[1] + counts[2] + counts[3] < 3:
                continue
            means = _mlm_means(nll, kind, real)
            expected = means["selected"]
            if all(
                abs(v - expected) > 0.06 * expected for k, v in means.items() if k != "selected"
            ):
                return {
                    "tokens": tokens,
                    "segments": segments,
                    "inputs": np.asarray(masked.inputs_BT),
                    "labels": np.asarray(masked.labels_BT),
                    "kind": kind,
                    "nll": nll,
                    "select_prob": select_prob,
                }
        raise RuntimeError("no masking with distinct planted answers in 200 draws")

    def prompt(self, params: dict[str, Any]) -> str:

        real = params["segments"] != 0
        header = "| | " + " | ".join(str(t) for t in range(self.positions)) + " |"
        lines = [header, "|---" * (self.positions + 1) + "|"]
        for b in range(self.rows):
            sees = [
                _show_input(x) if real[b, t] else _PAD_LABEL
                for t, x in enumerate(params["inputs"][b])
            ]
            kinds = [
                _KIND_LABEL[int(c)] if real[b, t] else _PAD_LABEL
                for t, c in enumerate(params["kind"][b])
            ]
            lines.append(f"| row {b} sees | " + " | ".join(sees) + " |")
            lines.append(f"| row {b} kind | " + " | ".join(kinds) + " |")
            lines.append(
                f"| row {b} −log p | " + " | ".join(f"{x:.2f}" for x in params["nll"][b]) + " |"
            )
        table = "\n".join(lines)
        return (
            "A masked-LM batch of 2 rows × 12 byte positions, masked by the course's 80/10/10 "
            f"rule (selection probability {params['select_prob']:g}). Kinds: `·` not selected, "
            "`[M]` selected and shown as [MASK], `rnd` selected and shown as a random byte, "
            "`kept` selected and shown unchanged, `pad` padding. The model outputs logits at "
            "every position; the third line of each row is its cross-entropy −log p(original "
            "byte) there, in nats.\n\n"
            f"{table}\n\n"
            "What is this batch's masked-LM loss, as the lesson's `mlm_loss` computes it?"
        )

    def _logits(self, params: dict[str, Any]) -> np.ndarray:
        """(B, T, V) float32 logits whose cross-entropy at each position's original byte is
        the shown value: 0 everywhere but a = log((V - 1) p / (1 - p)) at the byte."""
        from core.lm import ssl_masking

        vocab = ssl_masking.MLM_VOCAB_SIZE
        p = np.exp(-params["nll"])
        logits = np.zeros((*params["tokens"].shape, vocab))
        target = np.log((vocab - 1) * p / (1 - p))
        np.put_along_axis(logits, params["tokens"][..., None], target[..., None], axis=-1)
        return logits.astype(np.float32)

    def live(self, params: dict[str, Any]) -> float:
        from core.lm import ssl_masking

        loss, _count = ssl_masking.mlm_loss(self._logits(params), params["labels"])
        return float(loss)

    def derive(self, params: dict[str, Any]) -> tuple[float, str]:
        kind, nll, real = params["kind"], params["nll"], params["segments"] != 0
        selected = real & (kind != 0)
        picked = nll[selected]
        value = float(picked.sum() / len(picked))
        counts = {
            name: int(np.sum(real & (kind == c)))
            for c, name in ((1, "[M]"), (2, "rnd"), (3, "kept"))
        }
        means = _mlm_means(nll, kind, real)
        terms = " + ".join(f"{x:.2f}" for x in picked)
        derivation = (
            "The masked-LM loss is the mean cross-entropy over the **selected** positions: "
            f"all three kinds ({counts['[M]']} `[M]` + {counts['rnd']} `rnd` + "
            f"{counts['kept']} `kept` = {len(picked)} positions). Unselected positions carry "
            "the label −100 and padding is never selected, so neither enters the sum or the "
            "count.\n\n"
            f"loss = ({terms}) / {len(picked)} = {picked.sum():.2f} / {len(picked)} = "
            f"**{value:.4f} nats**\n\n"
            "The classic mistakes give: "
            f"mean over every real token {means['real']:.4f}; over all "
            f"{nll.size} positions, padding included, {means['all']:.4f}; over the `[M]` "
            f"positions only {means['masked only']:.4f}; the selected sum divided by "
            f"B·T = {nll.size}: {means['sum over B*T']:.4f}.\n\n"
            "Lesson: the denominator is the number of positions the model is asked to "
            "predict (labels ≠ −100): the kept and random-byte positions count, the visible "
            "unselected tokens and the padding do not."
        )
        return value, derivation

    def wrong(self, params: dict[str, Any], expected) -> dict[str, float]:
        means = _mlm_means(params["nll"], params["kind"], params["segments"] != 0)
        return {
            "mean over every real token (unselected ones too)": means["real"],
            "mean over all positions, padding included": means["all"],
            "mean over the [MASK] positions only (80/10/10 forgotten)": means["masked only"],
            "selected sum divided by B*T": means["sum over B*T"],
        }


ITEMS: tuple[Item, ...] = (MaskedLossCount(),)
