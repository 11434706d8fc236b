"""Contrastive learning (SimCLR) on scikit-learn's 8x8 digits: two views, NT-Xent, a probe.

Glossary: N images in a batch, Y/X pixel rows/columns (8), F feature width (the encoder's
output, what the probe reads), E embedding width (the projection head's output, what the
loss reads), H hidden units, S training steps, C classes.

Each image gets two random views (a random resized crop with a shift, then Gaussian
noise). The 2N views are stacked as [view A of images 0..N-1, view B of images 0..N-1], so
the positive of row i is row ``positive_index(N)[i] = (i + N) mod 2N``: the other view of
the same image. The NT-Xent loss of SimCLR, with cosine similarity sim and temperature t:

    loss_i = -log( exp(sim(z_i, z_pos(i)) / t) / sum_{k != i} exp(sim(z_i, z_k) / t) )
    loss   = mean over all 2N anchors i

Each anchor's softmax runs over 2N - 1 candidates (its positive and 2N - 2 negatives); the
self-similarity sim(z_i, z_i) = 1 never enters. Uniform similarities give log(2N - 1).

A linear probe (logistic regression, scikit-learn) on frozen encoder features measures what
the labels-free training learned: it is fit on the training images' features and scored on
held-out test images, for the trained encoder and for the same encoder at its random init.
Random numbers: uniforms from core.lm.ssl_masking.uniform_draws, normals from
core.lm.attention.normal_draws (one random-number program per process).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.lm import attention, ssl_masking

IMAGE_SIZE = 8
PIXELS = IMAGE_SIZE * IMAGE_SIZE
CENTER = (IMAGE_SIZE - 1) / 2  # pixel centres sit at 0..7; the image centre at 3.5


@dataclasses.dataclass(frozen=True)
class Augment:
    """How different two views may be. All zero / one: the identity (both views = image)."""

    min_crop: float = 0.7  # the crop side is a uniform fraction in [min_crop, 1] of the image
    max_shift: float = (
        1.0  # the crop centre moves by a uniform amount in [-max_shift, max_shift] pixels
    )
    noise_std: float = 0.1  # Gaussian noise added to every pixel (pixels are in [0, 1])

    def __post_init__(self):
        if not 0.25 <= self.min_crop <= 1.0:
            raise ValueError(f"min_crop must be in [0.25, 1], got {self.min_crop}")
        if not 0.0 <= self.max_shift <= 3.0:
            raise ValueError(f"max_shift must be in [0, 3] pixels, got {self.max_shift}")
        if self.noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {self.noise_std}")


# --- augmentation -----------------------------------------------------------------------


def _bilinear_zero(image_YX, y, x):
    """image sampled at real coordinates (y, x) (same shape), 0 outside the image."""
    y0, x0 = jnp.floor(y), jnp.floor(x)
    out = jnp.zeros_like(y)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - jnp.abs(y - yy)) * (1 - jnp.abs(x - xx))
            inside = (yy >= 0) & (yy < IMAGE_SIZE) & (xx >= 0) & (xx < IMAGE_SIZE)
            yi = jnp.clip(yy, 0, IMAGE_SIZE - 1).astype(jnp.int32)
            xi = jnp.clip(xx, 0, IMAGE_SIZE - 1).astype(jnp.int32)
            out = out + jnp.where(inside, weight * image_YX[yi, xi], 0.0)
    return out


def crop_resize(images_NYX, crop_N, shift_N2):
    """Random resized crops: output pixel (i, j) of image n reads the input at
    (3.5 + (i - 3.5) * crop_n + shift_n0, 3.5 + (j - 3.5) * crop_n + shift_n1), bilinear, 0
    outside. crop < 1 zooms in; crop = 1 and shift = 0 is the identity."""
    grid = jnp.arange(IMAGE_SIZE, dtype=jnp.float32) - CENTER
    crop = jnp.asarray(crop_N, jnp.float32)[:, None, None]
    shift = jnp.asarray(shift_N2, jnp.float32)
    y = (
        CENTER
        + grid[None, :, None] * crop
        + shift[:, 0, None, None]
        + jnp.zeros((1, 1, IMAGE_SIZE))
    )
    x = (
        CENTER
        + grid[None, None, :] * crop
        + shift[:, 1, None, None]
        + jnp.zeros((1, IMAGE_SIZE, 1))
    )
    return jax.vmap(_bilinear_zero)(jnp.asarray(images_NYX, jnp.float32), y, x)


def crop_resize_reference(images_NYX, crop_N, shift_N2) -> np.ndarray:
    """``crop_resize`` by loops over pixels in numpy float64."""
    images = np.asarray(images_NYX, np.float64)
    out = np.zeros_like(images)
    for n, image in enumerate(images):
        for i in range(IMAGE_SIZE):
            for j in range(IMAGE_SIZE):
                y = CENTER + (i - CENTER) * crop_N[n] + shift_N2[n][0]
                x = CENTER + (j - CENTER) * crop_N[n] + shift_N2[n][1]
                total = 0.0
                for yy in (math.floor(y), math.floor(y) + 1):
                    for xx in (math.floor(x), math.floor(x) + 1):
                        if 0 <= yy < IMAGE_SIZE and 0 <= xx < IMAGE_SIZE:
                            total += (1 - abs(y - yy)) * (1 - abs(x - xx)) * image[yy, xx]
                out[n, i, j] = total
    return out


def view_draws(key, count: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(uniforms_N3, normals_NYX): the random numbers of ``count`` views, drawn from the
    uniform and the normal streams of ``key`` at offset ``start`` views."""
    uniforms = ssl_masking.uniform_draws(key, (count, 3), start=3 * start)
    normals = attention.normal_draws(
        jax.random.fold_in(key, 1), count * PIXELS, start=start * PIXELS
    )
    return uniforms, normals.reshape(count, IMAGE_SIZE, IMAGE_SIZE)


@functools.partial(jax.jit, static_argnames="config")
def augment(images_NYX, uniforms_N3, normals_NYX, config: Augment):
    """One view per image: crop side = min_crop + u0 * (1 - min_crop), shift = (2 u - 1) *
    max_shift from u1, u2, then noise_std * normal added to every pixel."""
    u = jnp.asarray(uniforms_N3, jnp.float32)
    crop = config.min_crop + u[:, 0] * (1.0 - config.min_crop)
    shift = (2.0 * u[:, 1:] - 1.0) * config.max_shift
    return crop_resize(images_NYX, crop, shift) + config.noise_std * jnp.asarray(
        normals_NYX, jnp.float32
    )


def two_views(key, images_NYX, config: Augment):
    """(views_2NYX, source_2N): view A of every image, then view B; source[r] is the image
    row r was made from. Views A use draws 0..N-1 of ``key``, views B draws N..2N-1."""
    n = len(images_NYX)
    uniforms, normals = view_draws(key, 2 * n)
    stacked = jnp.concatenate([jnp.asarray(images_NYX, jnp.float32)] * 2)
    views = augment(stacked, uniforms, normals, config)
    return views, np.concatenate([np.arange(n), np.arange(n)])


# --- NT-Xent ----------------------------------------------------------------------------


def positive_index(n: int) -> np.ndarray:
    """positive_2N: the row holding the other view of row i's image, (i + N) mod 2N."""
    if n < 1:
        raise ValueError(f"need at least one image, got {n}")
    return (np.arange(2 * n) + n) % (2 * n)


def nt_xent(z_2NE, temperature: float, positives_2N=None):
    """(mean NT-Xent loss over the 2N anchors, the anchor count). ``positives_2N`` defaults
    to positive_index(N); pass another mapping to see what a wrong pairing does."""
    z = jnp.asarray(z_2NE, jnp.float32)
    if z.ndim != 2 or z.shape[0] % 2:
        raise ValueError(f"z_2NE must be (2N, E) with views A then views B, got {z.shape}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    positives = positive_index(z.shape[0] // 2) if positives_2N is None else positives_2N
    return _nt_xent(z, jnp.float32(temperature), jnp.asarray(positives))


@jax.jit
def _nt_xent(z_2NE, temperature, positives_2N):
    z = z_2NE / jnp.linalg.norm(z_2NE, axis=1, keepdims=True).clip(1e-12)
    logits = z @ z.T / temperature
    rows = jnp.arange(z.shape[0])
    logits = jnp.where(rows[:, None] == rows[None, :], -jnp.inf, logits)  # no self-pairs
    loss = jax.nn.logsumexp(logits, axis=1) - logits[rows, positives_2N]
    return jnp.mean(loss), z.shape[0]


def nt_xent_reference(z_2NE, temperature: float) -> tuple[float, int]:
    """NT-Xent in numpy float64, anchor by anchor, the positive found by *source identity*
    (the other row made from the same image), not by the index formula."""
    z = np.asarray(z_2NE, np.float64)
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n = len(z) // 2
    source = np.concatenate([np.arange(n), np.arange(n)])
    losses = []
    for i in range(len(z)):
        (positive,) = [k for k in range(len(z)) if k != i and source[k] == source[i]]
        sims = np.array([z[i] @ z[k] / temperature for k in range(len(z)) if k != i])
        top = sims.max()
        log_denominator = top + math.log(np.exp(sims - top).sum())
        losses.append(log_denominator - z[i] @ z[positive] / temperature)
    return float(np.mean(losses)), len(losses)


def positive_retrieval(z_2NE, positives_2N=None) -> float:
    """Fraction of anchors whose most similar other row is their positive (chance:
    1 / (2N - 1))."""
    z = np.asarray(z_2NE, np.float64)
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    sims = z @ z.T
    np.fill_diagonal(sims, -np.inf)
    positives = positive_index(len(z) // 2) if positives_2N is None else positives_2N
    return float(np.mean(sims.argmax(axis=1) == positives))


def pair_identity_audit(views_2NYX, source_2N, images_NYX) -> list[dict]:
    """Checks that the positive of each row is the other view of its own image: the index
    map is a fixed-point-free involution, it pairs rows of equal source, and with the
    identity augmentation each row's view *is* its source image (so the map is about the
    data, not only about indices)."""
    n = len(images_NYX)
    positives = positive_index(n)
    source = np.asarray(source_2N)
    rows = np.arange(2 * n)
    identity_views, _ = two_views(
        jax.random.key(0), images_NYX, Augment(min_crop=1.0, max_shift=0.0, noise_std=0.0)
    )
    identity_views = np.asarray(identity_views)
    images = np.asarray(images_NYX, np.float32)
    differ = (
        np.abs(np.asarray(views_2NYX) - np.asarray(views_2NYX)[positives])
        .reshape(2 * n, -1)
        .max(axis=1)
    )

    def row(check, measured, passed):
        return {"check": check, "measured": measured, "passed": bool(passed)}

    return [
        row(
            "positive(positive(i)) = i and positive(i) != i",
            f"{int(np.sum(positives[positives] != rows) + np.sum(positives == rows))} violations",
            np.array_equal(positives[positives], rows) and np.all(positives != rows),
        ),
        row(
            "source(positive(i)) = source(i)",
            f"{int(np.sum(source[positives] != source))} violations",
            np.array_equal(source[positives], source),
        ),
        row(
            "each image appears exactly twice",
            f"counts {np.bincount(source).min()}..{np.bincount(source).max()}",
            np.all(np.bincount(source, minlength=n) == 2),
        ),
        row(
            "identity augmentation: row i is image source(i)",
            f"max |Δ| = {np.max(np.abs(identity_views - images[source])):.2g}",
            np.allclose(identity_views, images[source], atol=1e-6),
        ),
        row(
            "the two views of an image differ (the task is not trivial)",
            f"{int(np.sum(differ == 0))} identical pairs",
            np.all(differ > 0),
        ),
    ]


# --- encoder and projection head --------------------------------------------------------


def init_model(
    key, hidden_units: int = 128, feature_width: int = 32, embed_width: int = 32
) -> dict:
    """Encoder 64 -> H -> F (ReLU, ReLU) and projection head F -> E (ReLU, linear), He
    init from one key. The probe reads the F features; the loss reads the E embeddings."""
    for name, value in (
        ("hidden_units", hidden_units),
        ("feature_width", feature_width),
        ("embed_width", embed_width),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    sizes = {
        "enc0": (PIXELS, hidden_units),
        "enc1": (hidden_units, feature_width),
        "head0": (feature_width, feature_width),
        "head1": (feature_width, embed_width),
    }
    draws = attention.normal_draws(key, sum(a * b for a, b in sizes.values()))
    params, used = {}, 0
    for name, (fan_in, fan_out) in sizes.items():
        w = draws[used : used + fan_in * fan_out].reshape(fan_in, fan_out) * np.float32(
            math.sqrt(2 / fan_in)
        )
        params[f"{name}_w"], params[f"{name}_b"] = (
            jnp.asarray(w),
            jnp.zeros((fan_out,), jnp.float32),
        )
        used += fan_in * fan_out
    return params


def features(params: dict, images_NYX):
    """Encoder output h_NF (what the probe reads)."""
    x = jnp.asarray(images_NYX, jnp.float32).reshape(-1, PIXELS)
    h = jax.nn.relu(x @ params["enc0_w"] + params["enc0_b"])
    return jax.nn.relu(h @ params["enc1_w"] + params["enc1_b"])


def embed(params: dict, images_NYX):
    """Projection head output z_NE (what the loss reads)."""
    h = features(params, images_NYX)
    return (
        jax.nn.relu(h @ params["head0_w"] + params["head0_b"]) @ params["head1_w"]
        + params["head1_b"]
    )


features_jit = jax.jit(features)
embed_jit = jax.jit(embed)


# --- training ---------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("config", "learning_rate"))
def _train_scan(
    params, images_NYX, index_SN, uniforms_S2N3, normals_S2NYX, temperature, config, learning_rate
):
    tx = optax.adam(learning_rate)
    n = index_SN.shape[1]
    positives = jnp.asarray(positive_index(n))

    def loss_fn(params, views):
        return _nt_xent(embed(params, views), temperature, positives)[0]

    def body(carry, step):
        params, opt_state = carry
        index_N, uniforms, normals = step
        batch = images_NYX[index_N]
        views = augment(jnp.concatenate([batch, batch]), uniforms, normals, config)
        loss, grads = jax.value_and_grad(loss_fn)(params, views)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    (params, _), losses = jax.lax.scan(
        body, (params, tx.init(params)), (index_SN, uniforms_S2N3, normals_S2NYX)
    )
    return params, losses


@dataclasses.dataclass(frozen=True)
class TrainResult:
    params: dict
    loss: np.ndarray  # (S,) NT-Xent of each step's 2N views
    anchors: int  # 2N: how many anchors each step's mean divides by


def train(
    params: dict,
    images_NYX,
    key,
    config: Augment,
    temperature: float,
    steps: int,
    batch_size: int,
    learning_rate: float,
) -> TrainResult:
    """``steps`` Adam steps of NT-Xent on ``batch_size`` images (without replacement within
    a step), two fresh views each. Takes images only: no labels reach the encoder."""
    if (
        steps < 1
        or not 2 <= batch_size <= len(images_NYX)
        or not learning_rate > 0
        or not temperature > 0
    ):
        raise ValueError(
            f"need steps >= 1, 2 <= batch_size <= {len(images_NYX)} images, learning_rate > 0 and "
            f"temperature > 0; got {steps}, {batch_size}, {learning_rate}, {temperature}"
        )
    images = np.asarray(images_NYX, np.float32)
    order = ssl_masking.uniform_draws(jax.random.fold_in(key, 2), (steps, len(images)))
    index = np.argsort(order, axis=1)[:, :batch_size].astype(np.int32)  # a random subset per step
    uniforms, normals = view_draws(key, steps * 2 * batch_size)
    params, losses = _train_scan(
        params,
        images,
        index,
        uniforms.reshape(steps, 2 * batch_size, 3),
        normals.reshape(steps, 2 * batch_size, IMAGE_SIZE, IMAGE_SIZE),
        np.float32(temperature),
        config,
        float(learning_rate),
    )
    return TrainResult(params, np.asarray(losses), 2 * batch_size)


# --- linear probe -----------------------------------------------------------------------


def linear_probe(
    train_features_NF, train_labels_N, test_features_MF, test_labels_M, seed: int = 0
) -> dict:
    """Logistic regression (scikit-learn, L2, standardized features) fit on the training
    features, scored on both splits: {"train accuracy", "test accuracy"}."""
    from sklearn import linear_model, pipeline, preprocessing

    probe = pipeline.make_pipeline(
        preprocessing.StandardScaler(),
        linear_model.LogisticRegression(max_iter=2000, random_state=seed),
    )
    probe.fit(np.asarray(train_features_NF, np.float64), np.asarray(train_labels_N))
    return {
        "train accuracy": float(
            probe.score(np.asarray(train_features_NF, np.float64), train_labels_N)
        ),
        "test accuracy": float(
            probe.score(np.asarray(test_features_MF, np.float64), test_labels_M)
        ),
    }


def augmentation_rows(images_NYX, views_2NYX, limit: int = 6) -> list[dict]:
    """Long-format rows (panel, image, row, col, ink) of images and their two views."""
    n = len(images_NYX)
    panels = {
        "image": np.asarray(images_NYX)[:limit],
        "view A": np.asarray(views_2NYX)[:limit],
        "view B": np.asarray(views_2NYX)[n : n + limit],
    }
    return [
        {"panel": panel, "image": k, "row": r, "col": c, "ink": float(ink)}
        for panel, stack in panels.items()
        for k, image in enumerate(stack)
        for (r, c), ink in np.ndenumerate(image)
    ]
