"""Assessment items of the model phases: checkpoint recovery, Transformers, masked-LM
pretraining, reinforcement learning and post-training.

- data_checkpoints.resume_defect (diagnose): what a checkpoint must hold so that a resumed
  run continues exactly as the uninterrupted one.
- transformers.causal_attention (code): causal scaled dot-product attention in jax.numpy.
- self_supervised.masked_loss_count (predict): what the masked-LM mean loss is averaged over.
- reinforcement_learning.gae_truncation (code): GAE that bootstraps at a truncation only.
- post_training.dpo_loss (predict): the mean DPO loss of a few preference pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from core.assessment.items import (
    CodeItem,
    DiagnoseItem,
    Evidence,
    HiddenTest,
    Item,
    PredictItem,
    rng,
)

# --- data_checkpoints.resume_defect -----------------------------------------------------

_RESUME_PROGRAM = """\
import jax, jax.numpy as jnp, numpy as np, optax

SEED, N, B, STOP, TOTAL = {seed}, {examples}, {batch}, {stop}, {total}  # preempted after STOP
X = np.random.default_rng(SEED).normal(size=(N, 3)).astype(np.float32)
Y = X @ np.float32({true_w})
tx = optax.adam({lr})

def fresh():
    return {{"w": jnp.zeros(3), "adam": tx.init(jnp.zeros(3)), "key": jax.random.key(SEED),
            "batches_read": 0}}

def loss_fn(w, x, y, key):  # dropout-like noise: each input kept with probability 0.8
    return jnp.mean(jnp.square((x * jax.random.bernoulli(key, 0.8, x.shape) / 0.8) @ w - y))

def train(state, steps, losses):
    for _ in range(steps):
        epoch, i = divmod(state["batches_read"], N // B)  # reshuffled every epoch, seeded
        rows = np.random.default_rng([SEED, epoch]).permutation(N)[i * B : (i + 1) * B]
        key, sub = jax.random.split(state["key"])
        loss, grad = jax.value_and_grad(loss_fn)(state["w"], X[rows], Y[rows], sub)
        updates, adam = tx.update(grad, state["adam"])
        state = {{"w": state["w"] + updates, "adam": adam, "key": key,
                 "batches_read": state["batches_read"] + 1}}
        losses.append(float(loss))
    return state

state = train(fresh(), STOP, before := [])
ckpt = {{{saved}}}
# preempted here: a new process restores the checkpoint over a fresh state and goes on
resumed = train({{**fresh(), **ckpt}}, TOTAL - STOP, after := [])
"""

_STATE_FIELDS = ("w", "adam", "key", "batches_read")
_LEFT_OUT = {"no_data_position": "batches_read", "no_optimizer_state": "adam", "no_rng_key": "key"}


def _state_leaves(value) -> list[np.ndarray]:
    """A state field as numpy arrays (a PRNG key through its key data) for exact compares."""
    import jax

    leaves = []
    for leaf in jax.tree_util.tree_leaves(value):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        leaves.append(np.asarray(leaf))
    return leaves


def _same(a, b) -> bool:
    left, right = _state_leaves(a), _state_leaves(b)
    return len(left) == len(right) and all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(left, right, strict=True)
    )


class ResumeDefect(DiagnoseItem):
    id = "data_checkpoints.resume_defect"
    phase = "Data & checkpoint recovery"
    lesson = "save_full_state"
    title = "What a resumable checkpoint must hold"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "no_data_position": (
            "The checkpoint leaves out the data position",
            "Without `batches_read` the resumed run starts the data stream again at batch 0: "
            "it re-reads the first batches of epoch 0 (and will skip others), so from the "
            "first resumed step it trains on different examples than the uninterrupted run. "
            "Save the iterator position (here the batch counter; with Grain, the iterator "
            "state) with the model.",
        ),
        "no_optimizer_state": (
            "The checkpoint leaves out the optimizer state",
            "Without `adam` the resumed run starts Adam again: both moment estimates are zero "
            "and the step count is 0, so bias correction treats the next update as the first "
            "one (a full-size step of about the learning rate per weight). The first resumed "
            "loss still matches (it is computed before the update); every later one differs. "
            "Save the optimizer state with the parameters.",
        ),
        "no_rng_key": (
            "The checkpoint leaves out the PRNG key",
            "Without `key` the resumed run re-makes the key from the seed, so its dropout "
            "noise repeats the noise of the first steps instead of continuing the stream: "
            "the loss differs from the first resumed step. Save the key (or derive each "
            "step's key from the seed and the step number, e.g. jax.random.fold_in).",
        ),
    }

    def params(self, generator: np.random.Generator) -> dict[str, Any]:
        examples = int(generator.choice([16, 24]))
        batch = 4
        per_epoch = examples // batch
        stop = int(generator.integers(3, per_epoch + 3))  # sometimes past an epoch end
        return {
            "seed": int(generator.integers(0, 1000)),
            "examples": examples,
            "batch": batch,
            "stop": stop,
            "total": stop + int(generator.integers(3, 5)),
            "lr": float(generator.choice([0.05, 0.1, 0.2])),
            "true_w": [float(x) for x in np.round(generator.uniform(-2, 2, 3), 1)],
        }

    def prompt(self, params: dict[str, Any]) -> str:
        return (
            "This program trains a linear model with Adam on shuffled batches, with "
            "dropout-like noise drawn from a JAX key. It is preempted after "
            f"STOP = {params['stop']} steps; a new process restores the checkpoint `ckpt` "
            f"and trains on to TOTAL = {params['total']} steps in all. It runs without an "
            "error and its losses look plausible, but one defect makes the resumed losses "
            "(`after`) differ from those of the uninterrupted run `train(fresh(), TOTAL, [])`. "
            "Which one?"
        )

    def program(self, defect: str, params: dict[str, Any]) -> str:
        """The program with ``defect`` planted; "fixed" saves every field of the state."""
        left_out = _LEFT_OUT.get(defect)
        saved = ", ".join(f'"{f}": state["{f}"]' for f in _STATE_FIELDS if f != left_out)
        return _RESUME_PROGRAM.format(saved=saved, **params)

    def _execute(self, source: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__name__": "resume_program"}
        exec(compile(source, "<resume program>", "exec"), namespace)  # noqa: S102 (our source)
        return namespace

    def evidence(self, defect: str, params: dict[str, Any]) -> Evidence:
        shown, fixed = (
            self._execute(self.program(defect, params)),
            self._execute(self.program("fixed", params)),
        )
        full: list[float] = []
        fixed["train"](fixed["fresh"](), params["total"], full)
        stop = params["stop"]
        fixed_losses = fixed["before"] + fixed["after"]
        shown_after = shown["after"]
        differing_steps = [
            stop + i
            for i, (a, b) in enumerate(zip(shown_after, full[stop:], strict=True))
            if a != b
        ]
        restored = {**shown["fresh"](), **shown["ckpt"]}
        differs = [f for f in _STATE_FIELDS if not _same(restored[f], shown["state"][f])]
        rows = "\n".join(
            f"| {stop + i} | {full[stop + i]:.6f} | {fixed['after'][i]:.6f} | {loss:.6f}"
            f"{' ≠' if loss != full[stop + i] else ''} |"
            for i, loss in enumerate(shown_after)
        )
        first = differing_steps[0] if differing_steps else None
        when = (
            "no resumed step"
            if first is None
            else "the first resumed step"
            if first == stop
            else f"{first - stop} step(s) after the first resumed one"
        )
        markdown = (
            "Both programs were run (the one shown and one that saves every field of the "
            "state), and the uninterrupted run `train(fresh(), TOTAL, [])` beside them. "
            f"Losses of the steps after the preemption (steps counted from 0, so step {stop} "
            "is the first resumed one):\n\n"
            "| step | uninterrupted | fixed, resumed | shown, resumed |\n|---|---|---|---|\n"
            f"{rows}\n\n"
            f"- fixed: resumed losses equal the uninterrupted ones bit for bit: "
            f"{fixed_losses == full}\n"
            f"- shown: the first loss that differs is at step {first} "
            f"({when})\n"
            f"- the restored state `{{**fresh(), **ckpt}}` differs from the state at the "
            f"preemption in: {', '.join(f'`{f}`' for f in differs) or 'nothing'}"
        )
        facts = {
            "the fixed program's losses equal the uninterrupted run's, bit for bit": (
                fixed_losses == full
            ),
            "the shown program's resumed losses differ from the uninterrupted run's": bool(
                differing_steps
            ),
            "the defect changes the final weights": not _same(
                shown["resumed"]["w"], fixed["resumed"]["w"]
            ),
            "exactly the field the defect leaves out differs after restoring": (
                differs == [_LEFT_OUT[defect]]
            ),
        }
        return Evidence(markdown, facts)


# --- transformers.causal_attention ------------------------------------------------------

_ATTENTION_STUB = '''\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    """Causal scaled dot-product attention.

    q_BTHD, k_BTHD, v_BTHD: (B, T, H, D) float32 (batch, positions, heads, head dim).
    Returns out_BTHD, (B, T, H, D): for query position t and head h, the weighted average
    of v[:, s, h] over key positions s <= t, with weights softmax over s of
    q[:, t, h] . k[:, s, h] / sqrt(D). Position t never sees a later position s > t.
    """
    raise NotImplementedError
'''

_ATTENTION_NO_MASK = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

_ATTENTION_WRONG_AXIS = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-2), v_BTHD)
"""

_ATTENTION_NO_SCALE = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

_ATTENTION_STRICT_MASK = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool), k=-1), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

ATTENTION_TOLERANCE = 1e-5  # max |out - float64 reference|, float32 inputs of size ~1


def causal_attention_reference(q_BTHD, k_BTHD, v_BTHD) -> np.ndarray:
    """The definition in float64 NumPy, one query position at a time (no mask needed: the
    keys s <= t are sliced)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q_BTHD, k_BTHD, v_BTHD))
    out = np.zeros_like(q)
    for t in range(q.shape[1]):
        scores_BHS = np.einsum("bhd,bshd->bhs", q[:, t], k[:, : t + 1]) / math.sqrt(q.shape[-1])
        weights = np.exp(scores_BHS - scores_BHS.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out[:, t] = np.einsum("bhs,bshd->bhd", weights, v[:, : t + 1])
    return out


def _attention_shapes(seed: int, item_id: str) -> list[tuple[int, int, int, int]]:
    """(B, T, H, D) of the hidden tests: T = 1, a short odd T and a longer T that is not a
    power of two. Few shapes over all seeds: each new shape compiles the learner's ops."""
    generator = rng(item_id, seed)
    return [
        (2, 1, 2, 4),
        (2, int(generator.choice([5, 7])), 2, 8),
        (1, int(generator.choice([11, 13])), 3, 8),
    ]


class CausalAttention(CodeItem):
    id = "transformers.causal_attention"
    phase = "Transformers & language models"
    lesson = "attention"
    title = "Causal scaled dot-product attention"
    function_name = "causal_attention"
    stub = _ATTENTION_STUB
    solution_module = "core.assessment.solutions.causal_attention"

    def prompt(self, seed: int) -> str:
        shapes = ", ".join(str(s) for s in _attention_shapes(seed, self.id))
        return (
            "Complete `causal_attention(q_BTHD, k_BTHD, v_BTHD)` in jax.numpy: scaled "
            "dot-product attention in which position t attends to positions 0..t only. The "
            f"hidden tests call it on float32 (B, T, H, D) inputs of shapes {shapes}, compare "
            f"with a float64 NumPy reference (max error {ATTENTION_TOLERANCE:g}), and check "
            "that changing the keys and values of later positions leaves the earlier outputs "
            "unchanged."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no causal mask": _ATTENTION_NO_MASK,
            "softmax over the query axis": _ATTENTION_WRONG_AXIS,
            "no 1/sqrt(D) scale": _ATTENTION_NO_SCALE,
            "the mask hides the diagonal (s < t)": _ATTENTION_STRICT_MASK,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []
        last_inputs = None
        for shape in _attention_shapes(seed, self.id):
            q, k, v = (generator.normal(size=shape).astype(np.float32) for _ in range(3))
            name = f"matches the float64 reference at (B, T, H, D) = {shape}"
            tests.append(self._compare(function, (q, k, v), name))
            last_inputs = (q, k, v)
        tests.append(self._causality(function, last_inputs, generator))
        return tests

    def _compare(self, function, inputs, name) -> HiddenTest:
        out = np.asarray(function(*inputs))
        expected = causal_attention_reference(*inputs)
        if out.shape != expected.shape:
            return HiddenTest(name, False, f"returned shape {out.shape}, expected {expected.shape}")
        error = float(np.max(np.abs(out.astype(np.float64) - expected)))
        if not math.isfinite(error):
            return HiddenTest(name, False, "the output holds NaN or inf")
        worst = np.unravel_index(np.argmax(np.abs(out - expected)), out.shape)
        where = (
            f" (worst at query position t={int(worst[1])})" if error > ATTENTION_TOLERANCE else ""
        )
        return HiddenTest(
            name,
            error <= ATTENTION_TOLERANCE,
            f"max |out - reference| = {error:.2e}{where}; tolerance {ATTENTION_TOLERANCE:g}",
        )

    def _causality(self, function, inputs, generator) -> HiddenTest:
        q, k, v = inputs
        seq_len = q.shape[1]
        cut = int(generator.integers(1, seq_len))  # positions cut.. change, 0..cut-1 must not
        k2, v2 = k.copy(), v.copy()
        k2[:, cut:] = generator.normal(size=k2[:, cut:].shape)
        v2[:, cut:] = generator.normal(size=v2[:, cut:].shape)
        before = np.asarray(function(q, k, v))[:, :cut]
        after = np.asarray(function(q, k2, v2))[:, :cut]
        change = float(np.max(np.abs(after.astype(np.float64) - before)))
        name = (
            f"changing keys and values at positions {cut}..{seq_len - 1} leaves outputs "
            f"0..{cut - 1} unchanged (T={seq_len})"
        )
        passed = change <= 1e-6
        return HiddenTest(
            name,
            passed,
            f"max change of an earlier output = {change:.2e}"
            + ("" if passed else ": earlier positions see the future"),
        )


# --- self_supervised.masked_loss_count --------------------------------------------------

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


# --- reinforcement_learning.gae_truncation ----------------------------------------------

_GAE_STUB = '''\
import jax
import jax.numpy as jnp
import numpy as np


def gae(rewards_T, values_T, next_values_T, terminated_T, truncated_T, gamma, lam):
    """Generalized advantage estimation over one rollout of T steps of one environment.

    rewards_T, values_T, next_values_T: (T,) float32. values_T[t] is V(obs_t);
        next_values_T[t] is V of the observation step t led to: at an episode end that is
        the episode's final observation (before the reset), elsewhere it equals values_T[t+1].
    terminated_T, truncated_T: (T,) bool. terminated: the episode truly ended (no future
        reward). truncated: it was cut by a time limit (it had a future). Never both.
    gamma, lam: floats in [0, 1].

    Returns advantages_T, (T,): A_t = sum over l >= 0 of (gamma * lam)^l * delta_{t+l}, where
    delta_t = r_t + gamma * V(next obs of t) - V(obs_t), with no bootstrap term at a
    terminated step (a truncated step bootstraps from next_values_T[t]); the sum stops at
    the step that ends the episode (terminated or truncated) and at the end of the rollout.
    """
    raise NotImplementedError
'''

_GAE_LOOP = """\
import numpy as np


def gae(rewards_T, values_T, next_values_T, terminated_T, truncated_T, gamma, lam):
    advantages = np.zeros(len(rewards_T))
    running = 0.0
    for t in reversed(range(len(rewards_T))):
        {bootstrap}
        delta = rewards_T[t] + gamma * bootstrap - values_T[t]
        running = delta + gamma * {lam} * {keep} * running
        advantages[t] = running
    return advantages
"""
_GAE_RIGHT = {
    "bootstrap": "bootstrap = 0.0 if terminated_T[t] else next_values_T[t]",
    "lam": "lam",
    "keep": "(not (terminated_T[t] or truncated_T[t]))",
}

GAE_TOLERANCE = 1e-5  # max |A - reference| / max(1, max |reference|)


def _gae_source(**mistake: str) -> str:
    return _GAE_LOOP.format(**{**_GAE_RIGHT, **mistake})


def _gae_trajectory(generator: np.random.Generator, steps: int, end_at_last: bool) -> dict:
    """One rollout with 1-3 terminations and 1-3 truncations at seeded steps (never both on
    one step): next_values equals the next step's value except at an episode end."""
    ends = int(generator.integers(1, 4)), int(generator.integers(1, 4))
    places = generator.choice(steps - 1, size=sum(ends), replace=False)
    if end_at_last:
        places[0] = steps - 1
    terminated, truncated = np.zeros(steps, bool), np.zeros(steps, bool)
    terminated[places[: ends[0]]] = True
    truncated[places[ends[0] :]] = True
    values = generator.uniform(-1, 3, steps).astype(np.float32)
    final_values = generator.uniform(-1, 3, steps).astype(np.float32)  # V(final obs) at ends
    next_values = np.append(values[1:], final_values[-1])
    next_values = np.where(terminated | truncated, final_values, next_values).astype(np.float32)
    return {
        "rewards_T": generator.uniform(0, 2, steps).astype(np.float32),
        "values_T": values,
        "next_values_T": next_values,
        "terminated_T": terminated,
        "truncated_T": truncated,
        "gamma": float(generator.choice([0.9, 0.95, 0.99])),
        "lam": float(generator.choice([0.8, 0.9, 0.95])),
    }


def _gae_cases(seed: int, item_id: str) -> list[dict]:
    generator = rng(item_id, seed)
    # Fixed lengths (the ends, values and rewards are seeded): a new T would compile a JAX
    # solution's ops again for every learner seed.
    return [
        _gae_trajectory(generator, 24, end_at_last=True),
        _gae_trajectory(generator, 40, end_at_last=False),
        _gae_trajectory(generator, 64, end_at_last=False),
    ]


class GaeTruncation(CodeItem):
    id = "reinforcement_learning.gae_truncation"
    phase = "Reinforcement learning"
    lesson = "policy_gradients_ppo"
    title = "GAE with terminations and truncations"
    function_name = "gae"
    stub = _GAE_STUB
    solution_module = "core.assessment.solutions.gae"

    def prompt(self, seed: int) -> str:
        lengths = ", ".join(str(len(c["rewards_T"])) for c in _gae_cases(seed, self.id))
        return (
            "Complete `gae(...)`: generalized advantage estimation that tells a terminated "
            "step (no future: no bootstrap) from a truncated one (cut by a time limit: "
            "bootstrap from the value of the real next observation), and stops the sum at "
            "either. JAX (a reverse `jax.lax.scan`) or NumPy. The hidden tests run "
            f"rollouts of T = {lengths} steps with terminations and truncations at seeded "
            "steps and compare with a float64 NumPy reference (max error "
            f"{GAE_TOLERANCE:g} of the advantages' scale)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "truncation treated as termination (no bootstrap)": _gae_source(
                bootstrap=(
                    "bootstrap = 0.0 if terminated_T[t] or truncated_T[t] else next_values_T[t]"
                )
            ),
            "the sum not stopped at episode ends": _gae_source(keep="1.0"),
            "lambda omitted": _gae_source(lam="1.0"),
            "bootstrap from values_T[t + 1] (the next episode's first state)": _gae_source(
                bootstrap=(
                    "bootstrap = 0.0 if terminated_T[t] else "
                    "(values_T[t + 1] if t + 1 < len(values_T) else next_values_T[t])"
                )
            ),
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        from core.rl import references

        tests = []
        for case in _gae_cases(seed, self.id):
            steps = len(case["rewards_T"])
            name = (
                f"T={steps}, gamma={case['gamma']:g}, lam={case['lam']:g}, "
                f"{int(case['terminated_T'].sum())} terminations, "
                f"{int(case['truncated_T'].sum())} truncations"
            )
            inputs = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}
            out = np.asarray(function(**inputs), np.float64)
            # The course's float64 reference, a forward sum per step (an N=1 batch axis).
            expected = references.gae_reference(
                *(case[k][:, None] for k in ("rewards_T", "values_T", "next_values_T")),
                case["terminated_T"][:, None],
                case["truncated_T"][:, None],
                case["gamma"],
                case["lam"],
            )[0][:, 0]
            if out.shape != expected.shape:
                tests.append(
                    HiddenTest(
                        name, False, f"returned shape {out.shape}, expected {expected.shape}"
                    )
                )
                continue
            gap = np.abs(out - expected)
            scale = max(1.0, float(np.max(np.abs(expected))))
            error = float(np.max(gap)) / scale
            if not math.isfinite(error):
                tests.append(HiddenTest(name, False, "the advantages hold NaN or inf"))
                continue
            passed = error <= GAE_TOLERANCE
            detail = f"max |A - reference| / {scale:.3g} = {error:.2e}; tolerance {GAE_TOLERANCE:g}"
            if not passed:
                t = int(np.flatnonzero(gap > GAE_TOLERANCE * scale)[-1])
                kind = (
                    "a terminated step"
                    if case["terminated_T"][t]
                    else "a truncated step"
                    if case["truncated_T"][t]
                    else "a step that does not end its episode"
                )
                detail += (
                    f"; the last wrong step is t={t} ({kind}): A={out[t]:.4f}, "
                    f"reference {expected[t]:.4f}"
                )
            tests.append(HiddenTest(name, passed, detail))
        return tests


# --- post_training.dpo_loss -------------------------------------------------------------


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


ITEMS: tuple[Item, ...] = (
    ResumeDefect(),
    CausalAttention(),
    MaskedLossCount(),
    GaeTruncation(),
    DpoLoss(),
)
