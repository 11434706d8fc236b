"""Masked language modeling (BERT-style) on UTF-8 bytes, with the audits that make it honest.

Glossary: see core/lm/attention.py (B batch, T positions, V vocabulary, D width, H heads,
K head dim, F MLP width); S training steps.

Masking picks each real (non-padding) token with probability ``select_prob``; of the
selected positions, 80% show a [MASK] token, 10% show a random byte and 10% keep their
byte unchanged (the 80/10/10 rule, ``mask_prob``/``random_prob``/the rest). The model
predicts the original byte at the selected positions only:

    inputs_BT   what the model sees (MASK_ID, a random byte or the byte itself)
    labels_BT   the original byte at selected positions, IGNORE_LABEL (-100) elsewhere
    kind_BT     NOT_SELECTED, MASKED, RANDOM or KEPT per position (for the audits)

The loss is a mean over the selected positions only: its reduction count. The random byte
is drawn from the real bytes *other than* the original (BERT's draw may hit the original by
chance, 1 time in 255 here), which makes the leakage audit exact: the target is visible at
its own position exactly at the KEPT positions.

Random numbers: every uniform comes from ``core.lm.attention.normal_draws`` (fixed-size chunks
of ``jax.random.normal``) through the normal CDF, so the whole lesson compiles one
random-number program per process; a ``jax.random.uniform`` per shape would compile its
own (a pause at every shape change on a CPU).

The encoder is one bidirectional Transformer block written as a dict of arrays (attention
as in core.lm.attention) over a vocabulary of 257 (the 256 bytes + MASK_ID): each position
attends to its whole packed segment, in both directions. core.lm.transformer.TinyLM would do,
but its training step takes several times longer to compile.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import numerics
from core.lm import attention, tokenizer

MASK_ID = tokenizer.VOCAB_SIZE  # 256: one id past the bytes, never produced by encode()
MLM_VOCAB_SIZE = tokenizer.VOCAB_SIZE + 1
IGNORE_LABEL = -100  # the label at positions the loss must skip (PyTorch's convention)
FIRST_REAL_BYTE = 1  # random replacements come from bytes 1..255 (0 is PAD_ID)
REAL_BYTES = tokenizer.VOCAB_SIZE - FIRST_REAL_BYTE  # 255

NOT_SELECTED, MASKED, RANDOM, KEPT = 0, 1, 2, 3
KIND_NAMES = {NOT_SELECTED: "not selected", MASKED: "[MASK]", RANDOM: "random byte", KEPT: "kept"}
BINOMIAL_Z = 4.5  # a fair draw lands this many standard deviations out ~1 time in 150 000


def uniform_draws(key, shape, start: int = 0) -> np.ndarray:
    """float32 uniforms in (0, 1) of ``shape``: draws start.. of the N(0, 1) stream of
    ``key`` (core.lm.attention.normal_draws) through the normal CDF."""
    from scipy import special

    shape = tuple(int(s) for s in shape)
    normals = attention.normal_draws(key, math.prod(shape), start=start).astype(np.float64)
    uniforms = np.clip(special.ndtr(normals), 1e-7, 1 - 1e-7)  # float32 cannot hold 1 - 1e-9
    return uniforms.astype(np.float32).reshape(shape)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MaskedBatch:
    """One masked batch: all (B, T) int32."""

    inputs_BT: jax.Array
    labels_BT: jax.Array
    kind_BT: jax.Array


def masking_problem(select_prob: float, mask_prob: float, random_prob: float) -> str | None:
    """Why these probabilities cannot define a masking, or None when they can."""
    if not 0.0 < select_prob <= 1.0:
        return f"the selection probability must be in (0, 1], got {select_prob}"
    if mask_prob < 0 or random_prob < 0 or mask_prob + random_prob > 1.0 + 1e-9:
        return (
            f"the [MASK] share ({mask_prob:g}) and the random-byte share ({random_prob:g}) of the "
            f"selected positions add up to {mask_prob + random_prob:g} > 1: the kept share "
            "would be negative. Lower one of them (BERT uses 0.8 and 0.1, keeping 0.1)."
        )
    return None


def _check_rows(tokens_BT, segment_ids_BT):
    if np.shape(tokens_BT) != np.shape(segment_ids_BT) or np.ndim(tokens_BT) != 2:
        raise ValueError(
            f"tokens_BT {np.shape(tokens_BT)} and segment_ids_BT {np.shape(segment_ids_BT)} "
            "must be the same (B, T) shape"
        )


def mask_from_uniforms(
    uniforms_3BT, tokens_BT, segment_ids_BT, select_prob=0.15, mask_prob=0.8, random_prob=0.1
) -> MaskedBatch:
    """The 80/10/10 masking of (B, T) rows decided by three uniforms per position:
    [0] selected?  [1] which kind?  [2] which random byte. Padding is never selected."""
    if problem := masking_problem(select_prob, mask_prob, random_prob):
        raise ValueError(problem)
    _check_rows(tokens_BT, segment_ids_BT)
    if np.shape(uniforms_3BT) != (3, *np.shape(tokens_BT)):
        raise ValueError(
            f"uniforms_3BT must be (3, B, T) = {(3, *np.shape(tokens_BT))}, "
            f"got {np.shape(uniforms_3BT)}"
        )
    probs = tuple(np.float32(p) for p in (select_prob, mask_prob, random_prob))
    return _mask_from_uniforms(
        jnp.asarray(uniforms_3BT),
        jnp.asarray(tokens_BT, jnp.int32),
        jnp.asarray(segment_ids_BT, jnp.int32),
        *probs,
    )


@jax.jit
def _mask_from_uniforms(
    uniforms_3BT, tokens_BT, segment_ids_BT, select_prob, mask_prob, random_prob
):
    select_u, kind_u, byte_u = uniforms_3BT
    selected = (segment_ids_BT != tokenizer.PAD_SEGMENT) & (select_u < select_prob)
    kind = jnp.where(
        kind_u < mask_prob, MASKED, jnp.where(kind_u < mask_prob + random_prob, RANDOM, KEPT)
    )
    kind = jnp.where(selected, kind, NOT_SELECTED).astype(jnp.int32)
    # A random real byte other than the original: shift by 1..254 within the 255 real bytes.
    offset = jnp.clip(1 + jnp.floor(byte_u * (REAL_BYTES - 1)).astype(jnp.int32), 1, REAL_BYTES - 1)
    other = FIRST_REAL_BYTE + (tokens_BT - FIRST_REAL_BYTE + offset) % REAL_BYTES
    inputs = jnp.where(kind == MASKED, MASK_ID, jnp.where(kind == RANDOM, other, tokens_BT))
    labels = jnp.where(selected, tokens_BT, IGNORE_LABEL)
    return MaskedBatch(inputs.astype(jnp.int32), labels.astype(jnp.int32), kind)


def mask_tokens(
    key, tokens_BT, segment_ids_BT, select_prob=0.15, mask_prob=0.8, random_prob=0.1
) -> MaskedBatch:
    """``mask_from_uniforms`` with the first 3*B*T uniforms of ``key``: the same masking
    as step 0 of ``train`` with that key."""
    _check_rows(tokens_BT, segment_ids_BT)
    uniforms = uniform_draws(key, (3, *np.shape(tokens_BT)))
    return mask_from_uniforms(
        uniforms, tokens_BT, segment_ids_BT, select_prob, mask_prob, random_prob
    )


def mask_reference(uniforms_3BT, tokens_BT, segment_ids_BT, select_prob, mask_prob, random_prob):
    """The masking rule written out position by position in plain Python (the independent
    reference): (inputs, labels, kind) as numpy int arrays."""
    uniforms, tokens, segments = (
        np.asarray(uniforms_3BT),
        np.asarray(tokens_BT),
        np.asarray(segment_ids_BT),
    )
    inputs, labels = tokens.copy(), np.full(tokens.shape, IGNORE_LABEL)
    kind = np.full(tokens.shape, NOT_SELECTED)
    for b, t in np.ndindex(tokens.shape):
        if segments[b, t] == tokenizer.PAD_SEGMENT or not uniforms[0, b, t] < np.float32(
            select_prob
        ):
            continue
        labels[b, t] = tokens[b, t]
        u = uniforms[1, b, t]
        if u < np.float32(mask_prob):
            kind[b, t], inputs[b, t] = MASKED, MASK_ID
        elif u < np.float32(mask_prob) + np.float32(random_prob):
            shift = min(
                max(1 + int(np.floor(uniforms[2, b, t] * (REAL_BYTES - 1))), 1), REAL_BYTES - 1
            )
            kind[b, t] = RANDOM
            inputs[b, t] = FIRST_REAL_BYTE + (tokens[b, t] - FIRST_REAL_BYTE + shift) % REAL_BYTES
        else:
            kind[b, t] = KEPT
    return inputs, labels, kind


# --- the loss and its independent reference -------------------------------------------


@jax.jit
def mlm_loss(logits_BTV, labels_BT):
    """(mean cross-entropy over the positions whose label is not IGNORE_LABEL, their count).

    The mean divides by the number of selected positions, never by B*T.
    """
    logits = jnp.asarray(logits_BTV, jnp.float32)
    labels = jnp.asarray(labels_BT)
    selected = labels != IGNORE_LABEL
    safe_labels = jnp.where(selected, labels, 0)  # any valid index; masked out below
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(log_probs, safe_labels[..., None], axis=-1)[..., 0]
    count = jnp.sum(selected)
    return jnp.sum(jnp.where(selected, nll, 0.0)) / jnp.maximum(count, 1), count


def mlm_loss_reference(logits_BTV, tokens_BT, kind_BT) -> tuple[float, int]:
    """The same loss in numpy float64 by another path: the positions come from the kind
    array (not the labels), the targets from the original tokens."""
    logits = np.asarray(logits_BTV, np.float64)
    rows, cols = np.nonzero(np.asarray(kind_BT) != NOT_SELECTED)
    picked = logits[rows, cols]  # (N, V)
    shift = picked.max(axis=1, keepdims=True) if len(rows) else 0.0
    log_z = (shift + np.log(np.exp(picked - shift).sum(axis=1, keepdims=True)))[:, 0]
    targets = np.asarray(tokens_BT)[rows, cols]
    nll = log_z - picked[np.arange(len(rows)), targets]
    return (float(nll.mean()) if len(rows) else 0.0), len(rows)


# --- masking statistics -----------------------------------------------------------------


def binomial_tolerance(trials: int, prob: float, z: float = BINOMIAL_Z) -> float:
    """How far a Binomial(trials, prob) count may stray from trials * prob: z standard
    deviations, plus one count for the discreteness."""
    return z * math.sqrt(max(trials * prob * (1.0 - prob), 0.0)) + 1.0


def kind_counts(kind_BT) -> dict[int, int]:
    """How many positions of each kind (numpy count)."""
    kind = np.asarray(kind_BT)
    return {code: int(np.sum(kind == code)) for code in KIND_NAMES}


def masking_statistics(
    real_tokens: int, counts: dict[int, int], select_prob, mask_prob, random_prob
) -> list[dict]:
    """Observed counts of each kind against their binomial expectation.

    Selection is Binomial(real tokens, select_prob); given n selected, each of [MASK],
    random and kept is Binomial(n, its share). ``counts`` maps kind -> count (MASKED,
    RANDOM, KEPT at least); several batches may be added up.
    """
    selected = counts[MASKED] + counts[RANDOM] + counts[KEPT]
    kept_prob = max(0.0, 1.0 - mask_prob - random_prob)
    rows = [("selected", real_tokens, select_prob, selected)] + [
        (KIND_NAMES[code], selected, prob, counts[code])
        for code, prob in ((MASKED, mask_prob), (RANDOM, random_prob), (KEPT, kept_prob))
    ]
    table = []
    for name, trials, prob, observed in rows:
        tolerance = binomial_tolerance(trials, prob)
        table.append(
            {
                "what": name,
                "out of": trials,
                "observed": observed,
                "fraction": round(observed / trials, 4) if trials else 0.0,
                "expected fraction": round(prob, 4),
                "expected count": round(trials * prob, 1),
                "tolerance ±": round(tolerance, 1),
                "ok": bool(abs(observed - trials * prob) <= tolerance),
            }
        )
    return table


# --- leakage audit ----------------------------------------------------------------------


def leakage_audit(tokens_BT, segment_ids_BT, batch: MaskedBatch) -> list[dict]:
    """Numpy checks that no target reaches the input except where the rule says so.

    Each row: what is checked, how many positions violate it, whether it passed.
    """
    tokens, segments = np.asarray(tokens_BT), np.asarray(segment_ids_BT)
    inputs, labels, kind = (
        np.asarray(a) for a in (batch.inputs_BT, batch.labels_BT, batch.kind_BT)
    )
    selected, padding = kind != NOT_SELECTED, segments == tokenizer.PAD_SEGMENT
    target_visible = selected & (inputs == tokens)
    bad_random = (kind == RANDOM) & (
        (inputs == tokens) | (inputs < FIRST_REAL_BYTE) | (inputs >= tokenizer.VOCAB_SIZE)
    )

    def row(check, violations):
        return {"check": check, "violations": int(violations), "passed": int(violations) == 0}

    return [
        row(
            "labels are -100 at every unselected position",
            np.sum(~selected & (labels != IGNORE_LABEL)),
        ),
        row(
            "labels hold the original byte at every selected position",
            np.sum(selected & (labels != tokens)),
        ),
        row("padding is never selected", np.sum(padding & selected)),
        row("[MASK] positions show MASK_ID", np.sum((kind == MASKED) & (inputs != MASK_ID))),
        row("random positions show a real byte other than the target", np.sum(bad_random)),
        row(
            "the target is visible at its own position only where kept",
            np.sum(target_visible != (kind == KEPT)),
        ),
        row("unselected positions show their own byte", np.sum(~selected & (inputs != tokens))),
    ]


# --- the bidirectional encoder ----------------------------------------------------------


def init_encoder(key, width: int = 32, num_heads: int = 2, max_len: int = 64) -> dict:
    """Parameters of a one-block bidirectional encoder over MLM_VOCAB_SIZE tokens:

        x = token_embed[inputs] + pos_embed[positions]
        x = x + attention(LN(x))     (w_qkv: (3, D, H, K), w_o: (H, K, D))
        x = x + gelu(LN(x) @ w_in + b_in) @ w_out       (F = 2 D)
        logits_BTV = LN(x) @ head

    All weights are drawn from one key (core.lm.attention.normal_draws).
    """
    if width < 1 or num_heads < 1 or width % num_heads:
        raise ValueError(
            f"num_heads H={num_heads} must divide width D={width}: "
            "each head gets K = D / H channels"
        )
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    d, h, f = width, num_heads, 2 * width
    specs = {  # name: (shape, std)
        "token_embed": ((MLM_VOCAB_SIZE, d), 1.0),
        "pos_embed": ((max_len, d), 0.1),
        "w_qkv": ((3, d, h, d // h), 1 / math.sqrt(d)),
        "w_o": ((h, d // h, d), 1 / math.sqrt(d)),
        "w_in": ((d, f), 1 / math.sqrt(d)),
        "w_out": ((f, d), 1 / math.sqrt(f)),
        "head": ((d, MLM_VOCAB_SIZE), 1 / math.sqrt(d)),
    }
    draws = attention.normal_draws(key, sum(math.prod(shape) for shape, _ in specs.values()))
    params, used = {}, 0
    for name, (shape, std) in specs.items():
        size = math.prod(shape)
        params[name] = jnp.asarray(draws[used : used + size].reshape(shape) * np.float32(std))
        used += size
    params["b_in"] = jnp.zeros((f,), jnp.float32)
    return params


def _layer_norm(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)


def mlm_logits(params: dict, inputs_BT, segment_ids_BT, positions_BT):
    """logits_BTV (float32): every position sees every position of its own segment, in
    both directions (no causal mask), and nothing of the other segments in its row."""
    mask_B1TS = tokenizer.segment_mask_BTS(segment_ids_BT, causal=False)[:, None]
    x = params["token_embed"][inputs_BT] + params["pos_embed"][positions_BT]
    q, k, v = jnp.einsum("btd,cdhk->cbthk", _layer_norm(x), params["w_qkv"])
    scores = jnp.einsum("bthk,bshk->bhts", q, k) / np.float32(math.sqrt(q.shape[-1]))
    probs = jax.nn.softmax(jnp.where(mask_B1TS, scores, attention.MASK_VALUE), axis=-1)
    x = x + jnp.einsum("bhts,bshk,hkd->btd", probs, v, params["w_o"])
    x = x + jax.nn.gelu(_layer_norm(x) @ params["w_in"] + params["b_in"]) @ params["w_out"]
    return _layer_norm(x) @ params["head"]


# The only fields a forward pass may read from a batch dict: never the labels.
MODEL_INPUT_FIELDS = ("inputs_BT", "segment_ids_BT", "positions_BT")


@jax.jit
def forward_on_batch(params: dict, batch: dict):
    """logits_BTV from the MODEL_INPUT_FIELDS of a batch dict (which also carries labels,
    tokens and kinds: the forward pass must not touch them)."""
    return mlm_logits(params, *(batch[name] for name in MODEL_INPUT_FIELDS))


def batch_dict(packed: tokenizer.Packed, masked: MaskedBatch) -> dict:
    """Everything a training step gets: the model inputs plus labels, tokens and kinds."""
    return {
        "inputs_BT": jnp.asarray(masked.inputs_BT),
        "segment_ids_BT": jnp.asarray(packed.segment_ids_BT),
        "positions_BT": jnp.asarray(packed.positions_BT),
        "labels_BT": jnp.asarray(masked.labels_BT),
        "tokens_BT": jnp.asarray(packed.tokens_BT),
        "kind_BT": jnp.asarray(masked.kind_BT),
    }


def label_perturbation_gap(params: dict, batch: dict, seed: int = 0) -> float:
    """max |logits(batch) - logits(batch with labels, tokens and kinds replaced by noise)|.

    Exactly 0 when the forward pass reads nothing but the model inputs.
    """
    rng = np.random.default_rng(seed)
    scrambled = dict(batch)
    for name in ("labels_BT", "tokens_BT", "kind_BT"):
        scrambled[name] = jnp.asarray(
            rng.integers(0, tokenizer.VOCAB_SIZE, np.shape(batch[name])), jnp.int32
        )
    return float(
        jnp.max(jnp.abs(forward_on_batch(params, batch) - forward_on_batch(params, scrambled)))
    )


def neighbour_perturbation_gap(params: dict, batch: dict, seed: int = 0) -> tuple[float, int]:
    """(max |change of a position's logits| when every token of the *other* segments of its
    row (and the padding) is replaced by a random byte, how many positions were audited).

    Packing puts several documents in one row; a prediction may depend on its own document
    only, so the change must be exactly 0 (masked keys get exactly zero attention weight).
    """
    inputs, segments = np.asarray(batch["inputs_BT"]), np.asarray(batch["segment_ids_BT"])
    rng = np.random.default_rng(seed)
    base = np.asarray(forward_on_batch(params, batch))
    worst, audited = 0.0, 0
    for parity in (0, 1):  # perturb the neighbours of odd segments, then of even ones
        own = (segments != tokenizer.PAD_SEGMENT) & (segments % 2 == parity)
        others = ~own & np.any(own, axis=1, keepdims=True)
        audited_here = own & np.any(others, axis=1, keepdims=True)
        if not audited_here.any():
            continue
        noisy = np.where(
            others, rng.integers(FIRST_REAL_BYTE, tokenizer.VOCAB_SIZE, inputs.shape), inputs
        )
        changed = np.asarray(
            forward_on_batch(params, {**batch, "inputs_BT": jnp.asarray(noisy, jnp.int32)})
        )
        worst = max(worst, numerics.max_abs_error(changed[audited_here], base[audited_here]))
        audited += int(audited_here.sum())
    return worst, audited


# --- training ---------------------------------------------------------------------------


@jax.jit
def _train_scan(
    params, uniforms_S3BT, tokens_BT, segment_ids_BT, positions_BT, probs, leak, learning_rate
):
    """All steps in one lax.scan: one compile, no Python per step. ``leak`` and
    ``learning_rate`` are traced, so the honest and the leaky run, and every learning rate,
    share the compile."""
    tx = optax.adam(learning_rate)

    def loss_fn(params, inputs, labels):
        logits = mlm_logits(params, inputs, segment_ids_BT, positions_BT)
        loss, count = mlm_loss(logits, labels)
        return loss, (count, logits)

    def body(carry, uniforms_3BT):
        params, opt_state, _, _ = carry
        masked = _mask_from_uniforms(uniforms_3BT, tokens_BT, segment_ids_BT, *probs)
        inputs = jnp.where(
            leak, tokens_BT, masked.inputs_BT
        )  # the leaky pipeline shows the answers
        (loss, (count, logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, inputs, masked.labels_BT
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        counts = jnp.stack([jnp.sum(masked.kind_BT == k) for k in (MASKED, RANDOM, KEPT)])
        return (optax.apply_updates(params, updates), opt_state, masked, logits), (
            loss,
            count,
            counts,
        )

    empty = MaskedBatch(*(jnp.zeros_like(tokens_BT) for _ in range(3)))
    logits0 = jnp.zeros((*tokens_BT.shape, MLM_VOCAB_SIZE), jnp.float32)
    carry = (params, tx.init(params), empty, logits0)
    (params, _, last_batch, last_logits), per_step = jax.lax.scan(body, carry, uniforms_S3BT)
    return params, last_batch, last_logits, per_step


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What ``train`` returns: the trained params, the loss per step, and the evidence."""

    params: dict
    loss: np.ndarray  # (S,) the mean the optimizer differentiated, per step
    count: np.ndarray  # (S,) how many selected positions that mean divided by
    kind_counts: np.ndarray  # (S, 3) [MASK], random, kept positions per step
    last_batch: MaskedBatch  # the masking of the last step ...
    last_logits: np.ndarray  # ... and the logits its loss came from (B, T, V)

    def total_counts(self) -> dict[int, int]:
        """kind -> count, added up over all steps."""
        totals = self.kind_counts.sum(axis=0)
        return {MASKED: int(totals[0]), RANDOM: int(totals[1]), KEPT: int(totals[2])}


def train(
    params: dict,
    packed: tokenizer.Packed,
    key,
    steps: int,
    learning_rate: float,
    select_prob: float = 0.15,
    mask_prob: float = 0.8,
    random_prob: float = 0.1,
    leak: bool = False,
) -> TrainResult:
    """``steps`` Adam steps on all rows of ``packed``, a fresh masking per step (dynamic
    masking) from consecutive uniforms of ``key``: step 0 is ``mask_tokens(key, ...)``.

    ``leak=True`` feeds the original tokens instead of the masked inputs: the broken
    pipeline whose falling loss means nothing.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    if problem := masking_problem(select_prob, mask_prob, random_prob):
        raise ValueError(problem)
    _check_rows(packed.tokens_BT, packed.segment_ids_BT)
    uniforms = uniform_draws(key, (steps, 3, *packed.tokens_BT.shape))
    probs = tuple(np.float32(p) for p in (select_prob, mask_prob, random_prob))
    params, last_batch, last_logits, (losses, counts, per_kind) = _train_scan(
        params,
        uniforms,
        packed.tokens_BT,
        packed.segment_ids_BT,
        packed.positions_BT,
        probs,
        np.bool_(leak),
        np.float32(learning_rate),
    )
    return TrainResult(
        params,
        np.asarray(losses),
        np.asarray(counts),
        np.asarray(per_kind),
        last_batch,
        np.asarray(last_logits),
    )


# --- data and display -------------------------------------------------------------------


def line_documents(
    contents, min_bytes: int = 8, max_documents: int | None = None
) -> list[np.ndarray]:
    """The stripped lines of byte strings (e.g. corpus files) with at least ``min_bytes``
    bytes, as token arrays: short documents, so packing puts several in a row."""
    documents = []
    for content in contents:
        for line in bytes(content).splitlines():
            line = line.strip()
            if len(line) >= min_bytes and 0 not in line:  # byte 0 is PAD_ID
                documents.append(np.frombuffer(line, np.uint8).astype(np.int32))
    return documents[:max_documents]


def unigram_entropy(packed: tokenizer.Packed) -> float:
    """Entropy (nats) of the byte frequencies of the real tokens: about the loss of a model
    that ignores context and predicts the byte histogram."""
    tokens = np.asarray(packed.tokens_BT)[
        np.asarray(packed.segment_ids_BT) != tokenizer.PAD_SEGMENT
    ]
    counts = np.bincount(tokens, minlength=tokenizer.VOCAB_SIZE).astype(np.float64)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())


def readable_rows(rows: list[dict]) -> list[dict]:
    """Rows for a table a learner reads: True/False shown as "yes"/"no" (the audits and
    statistics keep their bools for the tests)."""
    return [
        {k: ("yes" if v else "no") if isinstance(v, (bool, np.bool_)) else v for k, v in r.items()}
        for r in rows
    ]


def show_token(token: int) -> str:
    """A byte as readable text ('a', '\\n', '\\xe2'), MASK_ID as [MASK]."""
    token = int(token)
    if token == MASK_ID:
        return "[MASK]"
    return repr(bytes([token]))[2:-1] if 0 <= token < tokenizer.VOCAB_SIZE else "?"


def example_rows(
    packed: tokenizer.Packed, batch: MaskedBatch, logits_BTV=None, row: int = 0, limit: int = 24
) -> list[dict]:
    """The selected positions of one row: original byte, what the model saw, the kind, and
    (given logits) the model's top prediction."""
    tokens, inputs, kind = (
        np.asarray(a)[row] for a in (packed.tokens_BT, batch.inputs_BT, batch.kind_BT)
    )
    segments = np.asarray(packed.segment_ids_BT)[row]
    predicted = None if logits_BTV is None else np.asarray(logits_BTV)[row].argmax(axis=-1)
    rows = []
    for t in np.flatnonzero(kind != NOT_SELECTED)[:limit]:
        entry = {
            "t": int(t),
            "segment": int(segments[t]),
            "original": show_token(tokens[t]),
            "input": show_token(inputs[t]),
            "kind": KIND_NAMES[int(kind[t])],
        }
        if predicted is not None:
            entry["predicted"] = show_token(predicted[t])
        rows.append(entry)
    return rows


def masked_text(packed: tokenizer.Packed, batch: MaskedBatch, row: int = 0) -> tuple[str, str]:
    """(the row's text, what the model sees): [MASK] shown as '█', padding as '·', bytes
    outside printable ASCII as '?'."""
    tokens, inputs = np.asarray(packed.tokens_BT)[row], np.asarray(batch.inputs_BT)[row]
    segments = np.asarray(packed.segment_ids_BT)[row]

    def text(values):
        out = []
        for value, segment in zip(values, segments, strict=True):
            if segment == tokenizer.PAD_SEGMENT:
                out.append("·")
            elif value == MASK_ID:
                out.append("█")
            else:
                out.append(bytes([int(value)]).decode("latin-1") if 32 <= value < 127 else "?")
        return "".join(out)

    return text(tokens), text(inputs)
