"""Masked image modeling on scikit-learn's 8x8 digits: hide patches, reconstruct them.

Glossary: N images, Y/X pixel rows/columns (8), p patch side, P patches per image
((8 / p) ** 2), Q pixels per patch (p * p), H hidden units, S training steps.

An image is cut into a grid of p x p patches (row-major patch order). For each image,
exactly ``num_hidden(P, mask_ratio)`` patches are hidden (chosen by sorting uniforms, as
MAE does). The model sees the image with every hidden pixel set to 0 plus a 0/1 indicator
of which pixels are hidden (a 0 alone would be ambiguous: digits have black background),
and predicts all 64 pixels; the loss is the mean squared error over the hidden pixels only:

    loss = sum over hidden pixels (prediction - pixel)^2 / (hidden patches * Q)

The model is a two-hidden-layer MLP (a dict of arrays): small enough to train in a second.
Uniforms come from core.lm.ssl_masking.uniform_draws (one random-number program per process).
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


def patch_problem(patch: int) -> str | None:
    """Why ``patch`` cannot tile an 8x8 image, or None."""
    if patch < 1 or IMAGE_SIZE % patch:
        divisors = [d for d in range(1, IMAGE_SIZE + 1) if IMAGE_SIZE % d == 0]
        return (
            f"a patch of {patch}x{patch} pixels does not tile an {IMAGE_SIZE}x{IMAGE_SIZE} image "
            f"({IMAGE_SIZE} / {patch} is not a whole number of patches): pick one of {divisors}"
        )
    return None


def num_patches(patch: int) -> int:
    """P = (8 / p) ** 2."""
    if problem := patch_problem(patch):
        raise ValueError(problem)
    return (IMAGE_SIZE // patch) ** 2


def num_hidden(patches: int, mask_ratio: float) -> int:
    """How many of ``patches`` are hidden per image: round(mask_ratio * P)."""
    return int(round(mask_ratio * patches))


def mask_ratio_problem(patch: int, mask_ratio: float) -> str | None:
    """Why this patch size and mask ratio leave nothing to predict or nothing to see."""
    if problem := patch_problem(patch):
        return problem
    patches = num_patches(patch)
    hidden = num_hidden(patches, mask_ratio)
    if hidden < 1:
        return (
            f"mask ratio {mask_ratio:g} of {patches} patch{'es' if patches > 1 else ''} hides "
            f"round({mask_ratio * patches:g}) = 0 patches: nothing to predict. "
            "Raise the ratio or use smaller patches."
        )
    if hidden > patches - 1:
        return (
            f"mask ratio {mask_ratio:g} of {patches} patch{'es' if patches > 1 else ''} "
            f"hides all {hidden}: "
            "no visible pixel is left to reconstruct from. Lower the ratio or use smaller patches."
        )
    return None


def patchify(images_NYX, patch: int):
    """(N, 8, 8) -> patches_NPQ, patches in row-major grid order, pixels row-major inside."""
    images = jnp.asarray(images_NYX)
    grid = IMAGE_SIZE // patch
    if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE) or patch_problem(patch):
        raise ValueError(
            f"need (N, 8, 8) images and a patch dividing 8, got {images.shape}, {patch}"
        )
    x = images.reshape(images.shape[0], grid, patch, grid, patch)
    return x.transpose(0, 1, 3, 2, 4).reshape(images.shape[0], grid * grid, patch * patch)


def unpatchify(patches_NPQ, patch: int):
    """patches_NPQ -> (N, 8, 8), the inverse of ``patchify``."""
    patches = jnp.asarray(patches_NPQ)
    grid = IMAGE_SIZE // patch
    x = patches.reshape(patches.shape[0], grid, grid, patch, patch)
    return x.transpose(0, 1, 3, 2, 4).reshape(patches.shape[0], IMAGE_SIZE, IMAGE_SIZE)


def patchify_reference(images_NYX, patch: int) -> np.ndarray:
    """``patchify`` by explicit loops over patches and pixels (numpy float64)."""
    images = np.asarray(images_NYX, np.float64)
    grid = IMAGE_SIZE // patch
    out = np.zeros((images.shape[0], grid * grid, patch * patch))
    for n in range(images.shape[0]):
        for gy in range(grid):
            for gx in range(grid):
                for py in range(patch):
                    for px in range(patch):
                        out[n, gy * grid + gx, py * patch + px] = images[
                            n, gy * patch + py, gx * patch + px
                        ]
    return out


def hidden_from_uniforms(uniforms_NP, hidden: int) -> np.ndarray:
    """hidden_NP bool: in each image, the ``hidden`` patches with the smallest uniforms."""
    order = np.argsort(np.asarray(uniforms_NP), axis=1, kind="stable")
    mask = np.zeros(order.shape, bool)
    np.put_along_axis(mask, order[:, :hidden], True, axis=1)
    return mask


def hidden_patches(key, count: int, patch: int, mask_ratio: float, start: int = 0) -> np.ndarray:
    """hidden_NP for ``count`` images: exactly num_hidden(P, mask_ratio) per image."""
    if problem := mask_ratio_problem(patch, mask_ratio):
        raise ValueError(problem)
    patches = num_patches(patch)
    uniforms = ssl_masking.uniform_draws(key, (count, patches), start=start)
    return hidden_from_uniforms(uniforms, num_hidden(patches, mask_ratio))


def pixel_mask(hidden_NP, patch: int):
    """hidden_NYX float32: 1.0 at every pixel of a hidden patch."""
    hidden = jnp.asarray(hidden_NP, jnp.float32)
    return unpatchify(jnp.broadcast_to(hidden[..., None], (*hidden.shape, patch * patch)), patch)


@functools.partial(jax.jit, static_argnames="patch")
def model_inputs(images_NYX, hidden_NP, patch: int):
    """x_N(2*64): the image with hidden pixels set to 0, then the hidden-pixel indicator."""
    hidden = pixel_mask(hidden_NP, patch)
    images = jnp.asarray(images_NYX, jnp.float32)
    n = images.shape[0]
    return jnp.concatenate(
        [(images * (1.0 - hidden)).reshape(n, PIXELS), hidden.reshape(n, PIXELS)], axis=1
    )


# --- model ------------------------------------------------------------------------------


def init_model(key, hidden_units: int = 128) -> dict:
    """A 128 -> H -> H -> 64 ReLU MLP, He-initialized from one key (normal_draws)."""
    if hidden_units < 1:
        raise ValueError(f"hidden units must be >= 1, got {hidden_units}")
    sizes = [(2 * PIXELS, hidden_units), (hidden_units, hidden_units), (hidden_units, PIXELS)]
    draws = attention.normal_draws(key, sum(a * b for a, b in sizes))
    params, used = {}, 0
    for i, (fan_in, fan_out) in enumerate(sizes):
        w = draws[used : used + fan_in * fan_out].reshape(fan_in, fan_out) * np.float32(
            math.sqrt(2 / fan_in)
        )
        params[f"w{i}"], params[f"b{i}"] = jnp.asarray(w), jnp.zeros((fan_out,), jnp.float32)
        used += fan_in * fan_out
    return params


def predict(params: dict, x_NI):
    """Predicted pixels (N, 8, 8) from model inputs x_N(2*64)."""
    h = jax.nn.relu(x_NI @ params["w0"] + params["b0"])
    h = jax.nn.relu(h @ params["w1"] + params["b1"])
    return (h @ params["w2"] + params["b2"]).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)


def predict_reference(params: dict, x_NI) -> np.ndarray:
    """``predict`` in numpy float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    h = np.maximum(np.asarray(x_NI, np.float64) @ p["w0"] + p["b0"], 0)
    h = np.maximum(h @ p["w1"] + p["b1"], 0)
    return (h @ p["w2"] + p["b2"]).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)


def hidden_mse(predicted_NYX, images_NYX, hidden_NP, patch: int):
    """(mean squared error over the pixels of hidden patches, how many pixels that is)."""
    hidden = pixel_mask(hidden_NP, patch)
    diff = (jnp.asarray(predicted_NYX, jnp.float32) - jnp.asarray(images_NYX, jnp.float32)) * hidden
    count = jnp.sum(hidden)
    return jnp.sum(diff * diff) / jnp.maximum(count, 1.0), count


@functools.partial(jax.jit, static_argnames="patch")
def evaluate(params: dict, images_NYX, hidden_NP, patch: int):
    """(hidden-pixel MSE, hidden-pixel count, MSE over all 64 pixels, predictions)."""
    predicted = predict(params, model_inputs(images_NYX, hidden_NP, patch))
    loss, count = hidden_mse(predicted, images_NYX, hidden_NP, patch)
    everywhere = jnp.mean((predicted - jnp.asarray(images_NYX, jnp.float32)) ** 2)
    return loss, count, everywhere, predicted


def hidden_mse_reference(params: dict, images_NYX, hidden_NP, patch: int) -> tuple[float, int]:
    """The whole path in numpy float64: inputs built patch by patch, the MLP, and the mean
    over the hidden patches' pixels only (gathered with patchify_reference)."""
    images = np.asarray(images_NYX, np.float64)
    hidden = np.asarray(hidden_NP, bool)
    patches = patchify_reference(images, patch)
    visible_patches = np.where(hidden[..., None], 0.0, patches)
    indicator = np.broadcast_to(hidden[..., None], patches.shape).astype(np.float64)
    x = np.concatenate(
        [_unpatchify_np(visible_patches, patch), _unpatchify_np(indicator, patch)], axis=1
    )
    predicted = patchify_reference(predict_reference(params, x), patch)
    errors = (predicted - patches)[hidden]  # (hidden patches, Q)
    return float(np.mean(errors**2)), int(errors.size)


def _unpatchify_np(patches_NPQ, patch: int) -> np.ndarray:
    """(N, P, Q) -> (N, 64) by loops: the inverse of patchify_reference, flattened."""
    grid = IMAGE_SIZE // patch
    out = np.zeros((patches_NPQ.shape[0], IMAGE_SIZE, IMAGE_SIZE))
    for gy in range(grid):
        for gx in range(grid):
            block = patches_NPQ[:, gy * grid + gx].reshape(-1, patch, patch)
            out[:, gy * patch : (gy + 1) * patch, gx * patch : (gx + 1) * patch] = block
    return out.reshape(-1, PIXELS)


# --- training ---------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("patch", "hidden", "learning_rate"))
def _train_scan(params, images_NYX, batch_index_SB, uniforms_SBP, patch, hidden, learning_rate):
    tx = optax.adam(learning_rate)

    def loss_fn(params, images, hidden_BP):
        return hidden_mse(
            predict(params, model_inputs(images, hidden_BP, patch)), images, hidden_BP, patch
        )

    def body(carry, step_inputs):
        params, opt_state = carry
        index_B, uniforms_BP = step_inputs
        images = images_NYX[index_B]
        # The `hidden` smallest uniforms of each image (jnp version of hidden_from_uniforms).
        ranks = jnp.argsort(jnp.argsort(uniforms_BP, axis=1, stable=True), axis=1, stable=True)
        hidden_BP = ranks < hidden
        (loss, count), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, images, hidden_BP)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, count)

    (params, _), (losses, counts) = jax.lax.scan(
        body, (params, tx.init(params)), (batch_index_SB, uniforms_SBP)
    )
    return params, losses, counts


@dataclasses.dataclass(frozen=True)
class TrainResult:
    params: dict
    loss: np.ndarray  # (S,) hidden-pixel MSE of each step's batch
    count: np.ndarray  # (S,) hidden pixels each step's mean divided by


def train(
    params: dict,
    images_NYX,
    key,
    patch: int,
    mask_ratio: float,
    steps: int,
    batch_size: int,
    learning_rate: float,
) -> TrainResult:
    """``steps`` Adam steps on batches drawn with replacement, a fresh random set of hidden
    patches per image per step (all from uniforms of ``key``)."""
    if problem := mask_ratio_problem(patch, mask_ratio):
        raise ValueError(problem)
    if steps < 1 or batch_size < 1 or not learning_rate > 0:
        raise ValueError(
            "need steps >= 1, batch_size >= 1, learning_rate > 0; "
            f"got {steps}, {batch_size}, {learning_rate}"
        )
    images = np.asarray(images_NYX, np.float32)
    patches = num_patches(patch)
    uniforms = ssl_masking.uniform_draws(key, (steps, batch_size, 1 + patches))
    batch_index = np.minimum((uniforms[..., 0] * len(images)).astype(np.int32), len(images) - 1)
    params, losses, counts = _train_scan(
        params,
        images,
        batch_index,
        uniforms[..., 1:],
        patch,
        num_hidden(patches, mask_ratio),
        float(learning_rate),
    )
    return TrainResult(params, np.asarray(losses), np.asarray(counts))


# --- audits and baselines ---------------------------------------------------------------


def leakage_audit(params: dict, images_NYX, hidden_NP, patch: int, seed: int = 0) -> list[dict]:
    """Checks that the hidden pixels do not reach the model: the input is 0 there, the
    indicator marks exactly them, every image hides the same number of patches, and noise
    added to the hidden pixels of the originals changes neither the model input nor the
    prediction (exact equality)."""
    images = np.asarray(images_NYX, np.float32)
    hidden = np.asarray(hidden_NP, bool)
    x = np.asarray(model_inputs(images, hidden, patch))
    hidden_pixels = np.asarray(pixel_mask(hidden, patch)).reshape(len(images), PIXELS) > 0
    # Noise in (0.5, 1) added to the hidden pixels: every one of them surely changes.
    noise = np.random.default_rng(seed).uniform(0.5, 1.0, images.shape).astype(np.float32)
    scrambled = np.where(hidden_pixels.reshape(images.shape), images + noise, images)
    x_scrambled = np.asarray(model_inputs(scrambled, hidden, patch))
    prediction_gap = float(
        np.max(np.abs(np.asarray(predict(params, x)) - np.asarray(predict(params, x_scrambled))))
    )
    per_image = hidden.sum(axis=1)

    def row(check, measured, passed):
        return {"check": check, "measured": measured, "passed": bool(passed)}

    return [
        row(
            "hidden pixels are 0 in the model input",
            f"{int(np.sum(x[:, :PIXELS][hidden_pixels] != 0))} nonzero",
            np.all(x[:, :PIXELS][hidden_pixels] == 0),
        ),
        row(
            "the indicator is 1 exactly at the hidden pixels",
            f"{int(np.sum((x[:, PIXELS:] > 0) != hidden_pixels))} mismatches",
            np.array_equal(x[:, PIXELS:] > 0, hidden_pixels),
        ),
        row(
            "every image hides the same number of patches",
            f"{per_image.min()}..{per_image.max()} per image",
            per_image.min() == per_image.max(),
        ),
        row(
            "model input unchanged by noise in the hidden pixels",
            f"max |Δ input| = {np.max(np.abs(x - x_scrambled)):.3g}",
            np.array_equal(x, x_scrambled),
        ),
        row(
            "prediction unchanged by noise in the hidden pixels",
            f"max |Δ prediction| = {prediction_gap:.3g}",
            prediction_gap == 0.0,
        ),
    ]


def baselines(train_images_NYX, images_NYX, hidden_NP, patch: int) -> dict[str, float]:
    """Hidden-pixel MSE of predictions that need no learning: all zeros (background), the
    per-pixel mean of the training images, and the mean of each image's visible pixels."""
    images = np.asarray(images_NYX, np.float64)
    hidden = np.asarray(pixel_mask(hidden_NP, patch), np.float64)
    count = hidden.sum()
    mean_image = np.asarray(train_images_NYX, np.float64).mean(axis=0)
    visible_mean = (
        (images * (1 - hidden)).sum(axis=(1, 2)) / np.maximum((1 - hidden).sum(axis=(1, 2)), 1)
    )[:, None, None]

    def mse(prediction):
        return float((((prediction - images) * hidden) ** 2).sum() / count)

    return {
        "predict 0 (background)": mse(np.zeros_like(images)),
        "mean training image": mse(np.broadcast_to(mean_image, images.shape)),
        "mean of the visible pixels": mse(np.broadcast_to(visible_mean, images.shape)),
    }


def composite(images_NYX, predicted_NYX, hidden_NP, patch: int) -> np.ndarray:
    """What a reconstruction shows: visible pixels from the image, hidden ones predicted
    (clipped to the pixel range [0, 1])."""
    hidden = np.asarray(pixel_mask(hidden_NP, patch))
    return np.where(hidden > 0, np.clip(np.asarray(predicted_NYX), 0, 1), np.asarray(images_NYX))


def grid_rows(
    panels: dict[str, np.ndarray], hidden_NYX=None, mark_hidden_in=(), limit: int = 8
) -> list[dict]:
    """Long-format rows (panel, image, row, col, ink, hidden) for faceted heatmaps of the
    first ``limit`` images of each (N, 8, 8) panel; ``hidden`` is True at hidden pixels of
    the panels named in ``mark_hidden_in``."""
    rows = []
    for panel, images in panels.items():
        for n, image in enumerate(np.asarray(images)[:limit]):
            for (r, c), ink in np.ndenumerate(image):
                hidden = bool(panel in mark_hidden_in and np.asarray(hidden_NYX)[n, r, c] > 0)
                rows.append(
                    {
                        "panel": panel,
                        "image": n,
                        "row": r,
                        "col": c,
                        "ink": float(ink),
                        "hidden": hidden,
                    }
                )
    return rows
