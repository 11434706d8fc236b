"""The synthetic task of the post-training lessons, its data sets, and the base model.

A prompt is PROMPT_LETTERS letters of ALPHABET and "=", a response is 1..MAX_LETTERS letters
ended by ".":  ``"cab=" -> "bac."``. The task is to answer with the prompt reversed.

The **base model** is a tiny TinyLM pretrained (next-token loss on every token) on prompts
followed by RANDOM responses of random length: it learns the format (letters, then a ".")
but not the task, so it answers a prompt correctly about 1 time in 6^3 * 4 (its samples are
diverse: what preference learning and RL need). ``base_params(seed)`` trains it
deterministically from a seed, cached in-process and on disk (core.post_training.cache: a
content-addressed, verified entry that later processes load instead of training again).

Sequences are PROMPT_TOKENS + RESPONSE_TOKENS = SEQ_LEN byte tokens, PAD (0) after the ".".
``weights_BT`` is 1 at position t when token t+1 is a response token (the positions whose
loss and log-probability belong to the response), 0 on prompt and padding.

The ground-truth reward (``true_reward``) scores a response: one point per letter that
matches the reversed prompt at its place, one more for exactly PROMPT_LETTERS letters and a
"." (a perfect answer scores PROMPT_LETTERS + 1).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.lm import tokenizer
from core.post_training import cache, losses, model

ALPHABET = "abcdef"
PROMPT_LETTERS = 3
MAX_LETTERS = 4
SEP, END = "=", "."
PROMPT_TOKENS = PROMPT_LETTERS + 1
RESPONSE_TOKENS = MAX_LETTERS + 1
SEQ_LEN = PROMPT_TOKENS + RESPONSE_TOKENS
PAD_ID = tokenizer.PAD_ID
END_ID = ord(END)
MODEL = model.ModelConfig(width=32, num_heads=2, num_layers=2, max_len=SEQ_LEN)
MAX_REWARD = PROMPT_LETTERS + 1
HELDOUT_FRACTION = 0.25
BASE_STEPS = 150
BASE_BATCH = 64
BASE_LEARNING_RATE = 3e-3


def all_prompts() -> list[str]:
    """Every prompt, in lexicographic order (6^3 = 216)."""
    return ["".join(p) + SEP for p in itertools.product(ALPHABET, repeat=PROMPT_LETTERS)]


def split_prompts(seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, held-out) prompts: a seeded permutation, HELDOUT_FRACTION held out."""
    prompts = all_prompts()
    order = np.random.default_rng(seed).permutation(len(prompts))
    cut = round(len(prompts) * (1 - HELDOUT_FRACTION))
    return [prompts[i] for i in order[:cut]], [prompts[i] for i in order[cut:]]


def reverse_response(prompt: str) -> str:
    """The correct response: the prompt's letters reversed, then "."."""
    return prompt[:PROMPT_LETTERS][::-1] + END


def random_responses(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` responses of 1..MAX_LETTERS uniformly random letters, each ended by "."."""
    lengths = rng.integers(1, MAX_LETTERS + 1, count)
    letters = rng.integers(0, len(ALPHABET), (count, MAX_LETTERS))
    return [
        "".join(ALPHABET[i] for i in row[:n]) + END for row, n in zip(letters, lengths, strict=True)
    ]


def encode(prompts: Sequence[str], responses: Sequence[str]) -> dict[str, np.ndarray]:
    """tokens_BT (int32, PAD after the response), weights_BT (1 where the next token is a
    response token), all_weights_BT (1 where the next token is any real token)."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    tokens = np.full((len(prompts), SEQ_LEN), PAD_ID, np.int32)
    weights = np.zeros((len(prompts), SEQ_LEN), np.float32)
    all_weights = np.zeros((len(prompts), SEQ_LEN), np.float32)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if len(prompt) != PROMPT_TOKENS or not 1 <= len(response) <= RESPONSE_TOKENS:
            raise ValueError(
                f"a prompt has {PROMPT_TOKENS} characters and a response 1..{RESPONSE_TOKENS}, "
                f"got {prompt!r} and {response!r}"
            )
        text = tokenizer.encode(prompt + response)
        tokens[row, : len(text)] = text
        weights[row, PROMPT_TOKENS - 1 : len(text) - 1] = 1.0
        all_weights[row, : len(text) - 1] = 1.0
    return {"tokens_BT": tokens, "weights_BT": weights, "all_weights_BT": all_weights}


def responses_of(tokens_BT, weights_BT) -> list[str]:
    """The response text of each row (the tokens whose weights_BT entry before them is 1)."""
    tokens, weights = np.asarray(tokens_BT), np.asarray(weights_BT)
    out = []
    for row, w in zip(tokens, weights, strict=True):
        picked = row[1:][w[:-1] > 0]
        out.append(tokenizer.decode(picked, errors="replace"))
    return out


def true_reward(prompt: str, response: str) -> float:
    """Ground truth: letters matching the reversed prompt at their place, +1 for exactly
    PROMPT_LETTERS letters followed by "." and nothing else."""
    target = reverse_response(prompt)[:PROMPT_LETTERS]
    matches = sum(a == b for a, b in zip(response[:PROMPT_LETTERS], target, strict=False))
    well_formed = len(response) == PROMPT_LETTERS + 1 and response.endswith(END)
    return float(matches + well_formed)


def dataset_hash(arrays: dict) -> str:
    """The content hash of a data set (its encoded arrays)."""
    return model.short_hash(arrays)


# --- the base model --------------------------------------------------------------------------


def pretraining_data(seed: int, steps: int, batch: int) -> dict[str, np.ndarray]:
    """steps x batch random prompts with random responses (the base model's corpus), with
    the loss on every real token (weights_BT = all_weights_BT)."""
    rng = np.random.default_rng(seed)
    prompts = all_prompts()
    picks = rng.integers(0, len(prompts), steps * batch)
    data = encode([prompts[i] for i in picks], random_responses(rng, steps * batch))
    data["weights_BT"] = data["all_weights_BT"]
    return {k: v.reshape(steps, batch, SEQ_LEN) for k, v in data.items()}


def sft_data(prompts: Sequence[str], seed: int, steps: int, batch: int) -> dict[str, np.ndarray]:
    """steps x batch (prompt, reversed prompt) pairs drawn from ``prompts``, loss on the
    response tokens only (weights_BT)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(prompts), steps * batch)
    data = encode([prompts[i] for i in picks], [reverse_response(prompts[i]) for i in picks])
    return {k: v.reshape(steps, batch, SEQ_LEN) for k, v in data.items()}


def base_params(seed: int = 0, steps: int = BASE_STEPS) -> dict:
    """The base model, pretrained deterministically from ``seed`` (cached in-process, and on
    disk by core.post_training.cache: a later process loads the verified weights)."""
    return _base(int(seed), int(steps))[0]


def base_origin(seed: int = 0, steps: int = BASE_STEPS) -> str:
    """Where this process got base_params(seed, steps): cache.ORIGIN_CACHE (the on-disk
    cache) or cache.ORIGIN_TRAINED."""
    return _base(int(seed), int(steps))[1]


@functools.lru_cache(maxsize=4)
def _base(seed: int, steps: int) -> tuple[dict, str]:
    params = model.init_params(MODEL, jax.random.key(seed))
    data = pretraining_data(seed, steps, BASE_BATCH)
    trained, _, origin = cache.train(
        losses.masked_token_loss, params, None, data, BASE_LEARNING_RATE
    )
    return trained, origin


# --- sampling --------------------------------------------------------------------------------


def prompt_tokens(prompts: Sequence[str]) -> np.ndarray:
    return np.stack([tokenizer.encode(p) for p in prompts]).astype(np.int32)


SAMPLE_CHUNK = 64  # prompts per sampling call (padded): every call reuses one compiled program


@jax.jit
def _sample_chunk(params, prompt_BP, key, temperature, greedy, lora, lora_scale):
    b = prompt_BP.shape[0]
    tokens = jnp.zeros((b, SEQ_LEN), jnp.int32).at[:, :PROMPT_TOKENS].set(prompt_BP)
    weights = jnp.zeros((b, SEQ_LEN), jnp.float32)

    def body(i, carry):
        tokens, weights, logp, done = carry
        pos = PROMPT_TOKENS - 1 + i
        logits = model.logits_BTV(params, tokens, lora, lora_scale)[:, pos] / temperature
        drawn = jax.random.categorical(jax.random.fold_in(key, i), logits)
        token = jnp.where(greedy, jnp.argmax(logits, -1), drawn)
        token = jnp.where(done, PAD_ID, token).astype(jnp.int32)
        taken = model.gather_logprobs(logits, token)
        tokens = tokens.at[:, pos + 1].set(token)
        weights = weights.at[:, pos].set(jnp.where(done, 0.0, 1.0))
        logp = logp.at[:, pos].set(jnp.where(done, 0.0, taken))
        return tokens, weights, logp, done | (token == END_ID)

    tokens, weights, logp, _ = jax.lax.fori_loop(
        0, RESPONSE_TOKENS, body, (tokens, weights, weights, jnp.zeros((b,), bool))
    )
    return tokens, weights, logp


def sample_tokens(params, prompt_BP, key, temperature: float = 1.0):
    """Sampled responses to prompt_BP (int32 prompt tokens) as jax arrays: (tokens_BT,
    weights_BT, logp_BT), logp_BT the sampler's log-probability of each response token at the
    position before it (as model.token_logprobs_BT, 0 elsewhere). SAMPLE_CHUNK prompts reuse
    the program ``sample`` compiled."""
    return _sample_chunk(
        params, prompt_BP, key, jnp.float32(temperature), jnp.asarray(False), None, jnp.float32(0)
    )


def _sample(params, prompts, key, temperature, greedy, lora, lora_scale):
    """Sample in chunks of SAMPLE_CHUNK prompts (the last one padded), chunk c with key
    fold_in(key, c)."""
    prompt_BP = prompt_tokens(prompts)
    tokens, weights = [], []
    for c, start in enumerate(range(0, len(prompt_BP), SAMPLE_CHUNK)):
        chunk = prompt_BP[start : start + SAMPLE_CHUNK]
        padded = np.concatenate([chunk, np.repeat(chunk[:1], SAMPLE_CHUNK - len(chunk), 0)])
        out = _sample_chunk(
            params,
            padded,
            jax.random.fold_in(key, c),
            jnp.float32(temperature),
            jnp.asarray(greedy),
            lora,
            jnp.float32(lora_scale),
        )
        tokens.append(np.asarray(out[0])[: len(chunk)])
        weights.append(np.asarray(out[1])[: len(chunk)])
    return np.concatenate(tokens), np.concatenate(weights)


def sample(params, prompts, key, temperature: float = 1.0, lora=None, lora_scale=0.0):
    """Sampled responses: (tokens_BT, weights_BT) as numpy, at most RESPONSE_TOKENS new
    tokens each, stopped at the first "." (PAD after it)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy for argmax), got {temperature}")
    return _sample(params, prompts, key, temperature, False, lora, lora_scale)


def greedy(params, prompts, lora=None, lora_scale=0.0) -> list[str]:
    """The argmax response to each prompt."""
    tokens, weights = _sample(params, prompts, jax.random.key(0), 1.0, True, lora, lora_scale)
    return responses_of(tokens, weights)


def accuracy(params, prompts, lora=None, lora_scale=0.0) -> float:
    """Fraction of prompts whose greedy response is exactly the reversed prompt and "."."""
    answers = greedy(params, prompts, lora, lora_scale)
    return float(np.mean([a == reverse_response(p) for p, a in zip(prompts, answers, strict=True)]))
