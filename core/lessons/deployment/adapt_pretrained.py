"""Adapt a pretrained digits classifier to a shifted task three ways, for the lesson "Adapt a
pretrained model and choose a post-training objective".

The pretrained model is an MLP (``core.nn.mlp`` parameters: a list of {"w", "b"} layers) trained
once on the scikit-learn digits as they are, and cached by content hash
(``core.post_training.cache``: the app and the tests pay for it once). The shifted task is
the same ten digits under a distribution shift (inverted ink, a 2-pixel translation, a
rotation) with only ``shots`` labelled images per class. The three post-training objectives
are the same cross-entropy on those images with different trainable sets:

    head only         the last layer (H*C + C numbers); the backbone is frozen
    full fine-tuning  every layer
    LoRA              rank-R adapters beside every backbone kernel, plus the head:
                      x @ (W + (alpha/R) A B) with A (d_in x R) random, B (R x d_out) zero
                      (core.post_training.lora's conventions and ``lora.delta``)

Each runs the same full-batch Adam steps from the same pretrained weights. ``choose`` picks the
method from the measured numbers with the learner's rule: the fewest trainable parameters
among the methods that reach the accuracy target within the parameter budget.

Dimension glossary: N images, D input features (64 pixels), H hidden width, C classes (10),
L layers (weight matrices), R LoRA rank, S steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.data import digits
from core.nn import chunked, mlp
from core.perf import timing
from core.post_training import cache, lora

SHIFTS = ("inverted ink", "shifted 2 px right", "rotated 90 degrees")
METHODS = ("head only", "full fine-tuning", "LoRA")

# The pretrained model: an MLP 64 -> 64 -> 64 -> 10 trained with full-batch Adam on the
# unshifted training split (about 98% test accuracy on unshifted digits). Fixed, so the
# cache holds one model per seed.
PRETRAIN = {"hidden": 64, "depth": 2, "steps": 300, "learning_rate": 0.01, "test_fraction": 0.2}
# The files whose bytes key the cached pretrained weights (a change to any retrains).
CACHE_SOURCES = (
    "core/lessons/deployment/adapt_pretrained.py",
    "core/nn/mlp.py",
    "core/data/digits.py",
    "core/post_training/cache.py",
)
CACHE_KIND = "deployment.adapt_pretrained.base"

# The app's defaults, and the one claim it makes (adapt_pretrained_test proves it over
# seeds 0-3, for the translated and the rotated digits): full fine-tuning beats head-only by
# at least CLAIM_MARGIN held-out accuracy. Measured there: 6 to 15 points, so 5 leaves a point
# of room on the closest seed (2 px shift, seed 2: 82.2% vs 75.8%). LoRA's place between them
# is not claimed: it changes with the seed and the shift (on inverted ink at seed 0, with the
# backbone's biases frozen, it fell below head-only).
LESSON = {
    "shift": "shifted 2 px right",
    "shots": 10,
    "rank": 4,
    "alpha": 8.0,
    "steps": 200,
    "learning_rate": 0.01,
    "accuracy_target": 0.8,
    "parameter_budget": 2000,
    "seed": 0,
}
CLAIM_SHIFTS = ("shifted 2 px right", "rotated 90 degrees")
CLAIM_MARGIN = 0.05


def shift_images(x_NYXK, shift: str) -> np.ndarray:
    """The images under ``shift`` (float32, same shape): 1 - x, a roll of 2 pixels to the
    right with zeros coming in, or a quarter turn counter-clockwise."""
    x = np.asarray(x_NYXK, np.float32)
    if x.ndim != 4 or x.shape[1:3] != (digits.IMAGE_SIZE, digits.IMAGE_SIZE):
        raise ValueError(f"images must be (N, 8, 8, K), got shape {x.shape}")
    if shift == "inverted ink":
        return (1.0 - x).astype(np.float32)
    if shift == "shifted 2 px right":
        out = np.zeros_like(x)
        out[:, :, 2:, :] = x[:, :, :-2, :]
        return out
    if shift == "rotated 90 degrees":
        return np.ascontiguousarray(np.rot90(x, k=1, axes=(1, 2)))
    raise ValueError(f"shift must be one of {SHIFTS}, got {shift!r}")


def flat(x_NYXK) -> np.ndarray:
    return np.asarray(x_NYXK, np.float32).reshape(len(x_NYXK), -1)


def sizes() -> tuple[int, ...]:
    inputs = digits.IMAGE_SIZE * digits.IMAGE_SIZE
    return mlp.layer_sizes(inputs, PRETRAIN["hidden"], PRETRAIN["depth"], digits.CLASSES)


# ---------------------------------------------------------------- the pretrained model


def _adam_steps(loss_fn, trainable, steps: int, learning_rate: float):
    """(trainable after ``steps`` full-batch Adam updates of ``loss_fn(trainable)``, loss_S)."""
    tx = optax.adam(learning_rate)

    def step(carry, _):
        params, state = carry
        value, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), value

    (trained, _), loss_S = jax.lax.scan(step, (trainable, tx.init(trainable)), length=steps)
    return trained, loss_S


@functools.partial(jax.jit, static_argnames=("steps",))
def _pretrain(key, x_ND, y_N, steps: int, learning_rate):
    params = mlp._init_params(key, sizes(), "he", 1.0)
    trained, _ = _adam_steps(
        lambda p: mlp.cross_entropy(mlp.forward(p, x_ND), y_N), params, steps, learning_rate
    )
    return trained


def pretrain(seed: int):
    """(params, origin): the MLP trained on the unshifted digits' training split, from the
    on-disk cache when it holds a verified copy (origin ``cache.ORIGIN_CACHE``)."""
    split = digits.load(PRETRAIN["test_fraction"], 0)
    spec = {**PRETRAIN, "seed": int(seed), "sizes": list(sizes())}

    def compute():
        params = _pretrain(
            jax.random.key(seed),
            flat(split.x_train),
            split.y_train,
            PRETRAIN["steps"],
            PRETRAIN["learning_rate"],
        )
        return {f"layer{i}": layer for i, layer in enumerate(params)}  # the cache keys by str

    tree, origin = cache.cached(CACHE_KIND, spec, compute, sources=CACHE_SOURCES)
    params = [tree[f"layer{i}"] for i in range(len(tree))]
    return [{"w": np.asarray(p["w"]), "b": np.asarray(p["b"])} for p in params], origin


# ---------------------------------------------------------------- the shifted task


@dataclasses.dataclass(frozen=True)
class Task:
    """The shifted task: ``shots`` training images per class (flattened, x_ND) and the whole
    held-out split, both under ``shift``."""

    shift: str
    shots: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def shifted_task(shift: str, shots: int, seed: int) -> Task:
    """``shots`` images of each class drawn (NumPy generator ``seed``) from the training split
    the model was pretrained on, shifted; the held-out split shifted (never seen by either)."""
    split = digits.load(PRETRAIN["test_fraction"], 0)
    smallest = int(np.bincount(split.y_train, minlength=digits.CLASSES).min())
    if not 1 <= shots <= smallest:
        raise ValueError(f"shots per class must be in [1, {smallest}], got {shots}")
    rng = np.random.default_rng(seed)
    picked = np.sort(
        np.concatenate(
            [
                rng.permutation(np.flatnonzero(split.y_train == c))[:shots]
                for c in range(digits.CLASSES)
            ]
        )
    )
    return Task(
        shift,
        shots,
        flat(shift_images(split.x_train[picked], shift)),
        split.y_train[picked],
        flat(shift_images(split.x_test, shift)),
        split.y_test,
    )


# ---------------------------------------------------------------- the three methods


def init_adapters(params, rank: int, key) -> list[dict]:
    """One {"a_IR", "b_RO"} per backbone kernel: A ~ N(0, 1/d_in), B = 0 (starts at the base)."""
    problem = rank_problem(rank)
    if problem:
        raise ValueError(problem)
    adapters = []
    for i, layer in enumerate(params[:-1]):
        d_in, d_out = np.shape(layer["w"])
        draw = jax.random.normal(jax.random.fold_in(key, i), (d_in, rank), jnp.float32)
        adapters.append(
            {
                "a_IR": np.asarray(draw / math.sqrt(d_in), np.float32),
                "b_RO": np.zeros((rank, d_out), np.float32),
            }
        )
    return adapters


def split_trainable(method: str, params, adapters=None) -> tuple[dict, dict]:
    """(trainable, frozen) pytrees of ``method``: what the optimizer updates and what it
    only reads."""
    params = [dict(p) for p in params]
    if method == "head only":
        return {"head": params[-1]}, {"backbone": params[:-1]}
    if method == "full fine-tuning":
        return {"layers": params}, {}
    if method == "LoRA":
        if adapters is None:
            raise ValueError("LoRA needs adapters (init_adapters)")
        return {"adapters": adapters, "head": params[-1]}, {"backbone": params[:-1]}
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def assemble(trainable: dict, frozen: dict) -> tuple[list, list | None]:
    """(the model's layers, the adapters or None) from split_trainable's halves."""
    if "layers" in trainable:
        return list(trainable["layers"]), None
    return [*frozen["backbone"], trainable["head"]], trainable.get("adapters")


def forward(layers, adapters, scale, x_ND) -> jax.Array:
    """logits_NC of the MLP, each backbone layer computing x W + scale (x A) B + b when it
    has an adapter (the un-merged LoRA forward)."""
    h = jnp.asarray(x_ND)
    for i, layer in enumerate(layers[:-1]):
        z = h @ layer["w"] + layer["b"]
        if adapters is not None:
            z = z + scale * ((h @ adapters[i]["a_IR"]) @ adapters[i]["b_RO"])
        h = jax.nn.relu(z)
    return h @ layers[-1]["w"] + layers[-1]["b"]


def merged_layers(layers, adapters, scale) -> list[dict]:
    """The layers with every adapter merged in: W + scale A B (``lora.delta``, float32)."""
    if adapters is None:
        return [dict(p) for p in layers]
    out = []
    for i, layer in enumerate(layers):
        w = np.asarray(layer["w"], np.float32)
        if i < len(adapters):
            w = (w + np.asarray(lora.delta(adapters[i], np.float32(scale), w.shape))).astype(
                np.float32
            )
        out.append({"w": w, "b": np.asarray(layer["b"], np.float32)})
    return out


def _adapt_step(carry, _index, frozen, scale, x_ND, y_N, learning_rate):
    """One full-batch Adam update of carry = (trainable, Adam state): (carry, loss before)."""
    trainable, state = carry

    def loss_fn(t):
        layers, adapters = assemble(t, frozen)
        return mlp.cross_entropy(forward(layers, adapters, scale, x_ND), y_N)

    value, grads = jax.value_and_grad(loss_fn)(trainable)
    updates, state = optax.adam(learning_rate).update(grads, state, trainable)
    return (optax.apply_updates(trainable, updates), state), value


# Steps per compiled chunk (core.nn.chunked): the steps control moves by 10, so every count it
# offers reuses one program per method; one scan of the run compiled again for every count.
ADAPT_CHUNK = 10
_adapt_chunks = chunked.ChunkedScan(_adapt_step, chunk=ADAPT_CHUNK)


@jax.jit
def _adam_init(trainable, learning_rate):
    return optax.adam(learning_rate).init(trainable)


_assemble = jax.jit(lambda trained, frozen: assemble(trained, frozen))


def _adapt(trainable, frozen, scale, x_ND, y_N, steps: int, learning_rate):
    """(trained, the whole model's layers and adapters after training, loss_S): the layers
    come out of a compiled program, so a frozen layer is checked as the program left it."""
    trainable = jax.device_put(trainable)  # host arrays, then the chunks' own: one cache entry
    (trained, _), loss_S = _adapt_chunks(
        (trainable, _adam_init(trainable, learning_rate)),
        frozen, scale, x_ND, y_N, learning_rate, steps=steps,
    )  # fmt: skip
    layers, adapters = _assemble(trained, frozen)
    return trained, layers, adapters, loss_S


def trainable_closed_form(method: str, layer_sizes, rank: int) -> int:
    """The trainable count from the layer sizes alone: head H*C + C; full sum of
    d_in d_out + d_out; LoRA sum over backbone kernels of R (d_in + d_out), plus the head."""
    pairs = list(zip(layer_sizes[:-1], layer_sizes[1:], strict=True))
    head = pairs[-1][0] * pairs[-1][1] + pairs[-1][1]
    if method == "head only":
        return head
    if method == "full fine-tuning":
        return sum(i * o + o for i, o in pairs)
    if method == "LoRA":
        return sum(rank * (i + o) for i, o in pairs[:-1]) + head
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def rank_problem(rank: int) -> str | None:
    """Why LoRA rank ``rank`` is refused (None when it is fine): below 1, or so large that LoRA
    trains as many numbers as full fine-tuning (then it is not a low-rank adaptation)."""
    if rank < 1:
        return f"LoRA rank must be >= 1, got {rank}"
    lora_count = trainable_closed_form("LoRA", sizes(), rank)
    full = trainable_closed_form("full fine-tuning", sizes(), rank)
    if lora_count >= full:
        return (
            f"rank {rank} gives LoRA {lora_count:,} trainable parameters, not fewer than full "
            f"fine-tuning's {full:,}: at that rank it is no longer a low-rank adaptation "
            f"(ranks up to {max_rank()} are)"
        )
    return None


def max_rank() -> int:
    rank = 1
    while trainable_closed_form("LoRA", sizes(), rank + 1) < trainable_closed_form(
        "full fine-tuning", sizes(), 1
    ):
        rank += 1
    return rank


@dataclasses.dataclass(frozen=True)
class Adapted:
    """One method's run: trainable and frozen trees, the layers and adapters after training,
    the loss curve, held-out accuracy, trainable count, and the first (compile + run) and
    second (run only) call's seconds on this machine."""

    method: str
    trainable: dict
    frozen: dict
    layers: list
    adapters: list | None
    loss_S: np.ndarray
    accuracy: float
    trainable_count: int
    first_s: float
    train_s: float


def training_args(method: str, params, task: Task, *, rank, alpha, steps, learning_rate, seed):
    """The arguments of the training call of ``method`` (``_adapt(*args)``):
    the benchmark times exactly what ``adapt`` runs."""
    if steps < 1 or learning_rate <= 0:
        raise ValueError(f"steps must be >= 1 and learning rate > 0, got {steps}, {learning_rate}")
    adapters = init_adapters(params, rank, jax.random.key(seed)) if method == "LoRA" else None
    trainable, frozen = split_trainable(method, params, adapters)
    scale = np.float32(alpha / rank)
    return (trainable, frozen, scale, task.x_train, task.y_train, steps, np.float32(learning_rate))


def train_call(args):
    """One full adaptation run (all steps, in compiled chunks), as ``_adapt`` returns it."""
    return _adapt(*args)


def adapt(method: str, params, task: Task, *, rank, alpha, steps, learning_rate, seed):
    """Train ``method``'s trainable set on ``task`` from ``params`` (full-batch Adam)."""
    args = training_args(
        method,
        params,
        task,
        rank=rank,
        alpha=alpha,
        steps=steps,
        learning_rate=learning_rate,
        seed=seed,
    )
    _, frozen, scale = args[:3]
    (trained, layers, trained_adapters, loss_S), first_s = timing.timed_call(_adapt, *args)
    _, train_s = timing.timed_call(_adapt, *args)  # the same work again, compiled
    logits = forward(layers, trained_adapters, scale, task.x_test)
    return Adapted(
        method,
        jax.device_get(trained),
        frozen,
        jax.device_get(layers),
        jax.device_get(trained_adapters),
        np.asarray(loss_S),
        mlp.accuracy(logits, task.y_test),
        lora.count(trained),
        first_s,
        train_s,
    )


def reference_logits(layers, adapters, scale, x_ND) -> np.ndarray:
    """The adapted model in NumPy float64 with every adapter *merged*, W + scale A B, then
    the plain MLP forward (``mlp.forward_reference``): an independent reference for the
    un-merged JAX ``forward``."""
    merged = []
    for i, layer in enumerate(layers):
        w = np.asarray(layer["w"], np.float64)
        if adapters is not None and i < len(adapters):
            a = np.asarray(adapters[i]["a_IR"], np.float64)
            b = np.asarray(adapters[i]["b_RO"], np.float64)
            w = w + float(scale) * (a @ b)
        merged.append({"w": w, "b": np.asarray(layer["b"], np.float64)})
    return mlp.forward_reference(merged, x_ND)


def base_accuracy(params, task: Task) -> float:
    """The pretrained model on the shifted held-out images, before any adaptation."""
    return mlp.accuracy(forward(params, None, 0.0, task.x_test), task.y_test)


def run_all(params, task: Task, *, rank, alpha, steps, learning_rate, seed) -> dict:
    """{method: Adapted} for the three methods, on the same task, steps and seed."""
    return {
        m: adapt(
            m,
            params,
            task,
            rank=rank,
            alpha=alpha,
            steps=steps,
            learning_rate=learning_rate,
            seed=seed,
        )
        for m in METHODS
    }


# ---------------------------------------------------------------- choosing


def choose(results: dict, accuracy_target: float, parameter_budget: int) -> tuple[str | None, str]:
    """(the chosen method or None, why): among the methods that reach ``accuracy_target``
    with at most ``parameter_budget`` trainable parameters, the one with the fewest (then
    the more accurate); None when no method meets both."""
    if not 0.0 < accuracy_target <= 1.0 or parameter_budget < 1:
        raise ValueError(
            f"accuracy target must be in (0, 1] and budget >= 1, got {accuracy_target}, "
            f"{parameter_budget}"
        )
    ok = [
        r
        for r in results.values()
        if r.accuracy >= accuracy_target and r.trainable_count <= parameter_budget
    ]
    if not ok:
        best = max(results.values(), key=lambda r: r.accuracy)
        cheap = [r for r in results.values() if r.trainable_count <= parameter_budget]
        within = max(cheap, key=lambda r: r.accuracy) if cheap else None
        why = (
            f"no method reaches {accuracy_target:.0%} within {parameter_budget:,} trainable "
            f"parameters; the most accurate is {best.method} ({best.accuracy:.1%}, "
            f"{best.trainable_count:,} parameters)"
        )
        if within is not None and within is not best:
            why += f", the best within budget {within.method} ({within.accuracy:.1%})"
        return None, why + ": raise the budget, lower the target, or add labelled images."
    winner = min(ok, key=lambda r: (r.trainable_count, -r.accuracy))
    others = [r.method for r in ok if r is not winner]
    why = (
        f"{winner.method} reaches {winner.accuracy:.1%} (target {accuracy_target:.0%}) with "
        f"{winner.trainable_count:,} trainable parameters (budget {parameter_budget:,})"
    )
    if others:
        why += f", fewer than {' and '.join(others)}, which also qualify"
    return winner.method, why + "."


def rows(results: dict, budget: int, target: float) -> list[dict]:
    """One table row per method."""
    return [
        {
            "method": r.method,
            "held-out accuracy": f"{r.accuracy:.1%}",
            "trainable parameters": r.trainable_count,
            "within budget": r.trainable_count <= budget,
            "reaches target": r.accuracy >= target,
            "compile + train (s, this CPU)": round(r.first_s, 3),
            "train (s, this CPU)": round(r.train_s, 4),
            "final training loss": float(r.loss_S[-1]),
        }
        for r in results.values()
    ]
