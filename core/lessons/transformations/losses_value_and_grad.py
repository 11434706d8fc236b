"""Losses and ``jax.value_and_grad(..., has_aux=True)``, for "Losses and value_and_grad".

The model is linear, ``logits_BK = x_BD @ w_DK + b_K``; the loss is mean squared error
against real targets (B, K) or softmax cross-entropy against integer labels (B,). The loss
function returns ``(loss, metrics)``: ``has_aux=True`` tells JAX to differentiate the first
and carry the second along. Two independent references: the gradients written out in
closed form (NumPy float64) and PyTorch autograd (losses_value_and_grad_torch.py: apart, so
what imports this module, a lesson's exercise too, never reaches for torch).

Dimension glossary: B batch, D input features, K outputs (regression targets or classes).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

LOSSES = ("mse", "cross_entropy")
TORCH_DTYPES = ("float64", "float32")


def problem(loss: str, classes: int) -> str | None:
    """Why this loss/outputs combination cannot work, or None."""
    if loss not in LOSSES:
        return f"loss must be one of {', '.join(LOSSES)}, got {loss!r}"
    if loss == "cross_entropy" and classes < 2:
        return (
            f"cross-entropy chooses between classes: it needs at least 2, got {classes} "
            "(with one class the softmax is always 1 and the loss is always 0)"
        )
    return None


def example_problem(key: jax.Array, loss: str, batch: int, features: int, outputs: int):
    """Random params {"w_DK", "b_K"}, inputs x_BD and targets: y_BK (mse) or labels_B (int32)."""
    if reason := problem(loss, outputs):
        raise ValueError(reason)
    if min(batch, features, outputs) < 1:
        raise ValueError(
            f"batch, features, outputs must be >= 1, got {batch}, {features}, {outputs}"
        )
    return _example_problem(key, loss, batch, features, outputs)


# One compiled program per shape, and one random draw sliced four ways: eager jax.random
# would compile each op separately, and every random op adds to the compile time.
@functools.partial(jax.jit, static_argnames=("loss", "batch", "features", "outputs"))
def _example_problem(key, loss, batch, features, outputs):
    sizes = (features * outputs, outputs, batch * features, batch * outputs)
    z = jax.random.normal(key, (sum(sizes),))
    w, b, x, t = jnp.split(z, np.cumsum(sizes)[:-1])
    params = {
        "w_DK": w.reshape(features, outputs) / np.sqrt(features),
        "b_K": 0.1 * b,
    }
    t_BK = t.reshape(batch, outputs)
    # Labels: the argmax of K i.i.d. normals is uniform over the K classes.
    y = t_BK if loss == "mse" else jnp.argmax(t_BK, axis=1).astype(jnp.int32)
    return params, x.reshape(batch, features), y


def predict(params, x_BD):
    """The linear model: x_BD @ w_DK + b_K -> (B, K)."""
    return x_BD @ params["w_DK"] + params["b_K"]


def mse(pred_BK, target_BK):
    """Mean over every element of (pred - target)^2: a scalar."""
    return jnp.mean((pred_BK - target_BK) ** 2)


def softmax_cross_entropy(logits_BK, labels_B):
    """Mean over the batch of -log softmax(logits)[label] = logsumexp(logits) - logits[label]."""
    true_logit_B = jnp.take_along_axis(logits_BK, labels_B[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits_BK, axis=1) - true_logit_B)


def loss_and_metrics(params, x_BD, y, loss: str):
    """(scalar loss, metrics dict): the shape ``value_and_grad(..., has_aux=True)`` expects."""
    out_BK = predict(params, x_BD)
    if loss == "mse":
        value = mse(out_BK, y)
        metrics = {
            "mean abs error": jnp.mean(jnp.abs(out_BK - y)),
            "max abs error": jnp.max(jnp.abs(out_BK - y)),
        }
    elif loss == "cross_entropy":
        value = softmax_cross_entropy(out_BK, y)
        probs_BK = jax.nn.softmax(out_BK, axis=1)
        metrics = {
            "accuracy": jnp.mean(jnp.argmax(out_BK, axis=1) == y),
            "mean p(true class)": jnp.mean(jnp.take_along_axis(probs_BK, y[:, None], axis=1)),
        }
    else:
        raise ValueError(problem(loss, 2))
    return value, metrics


@functools.partial(jax.jit, static_argnames="loss")
def value_and_grad(params, x_BD, y, loss: str):
    """((loss, metrics), grads): grads has the structure of params."""
    return jax.value_and_grad(loss_and_metrics, has_aux=True)(params, x_BD, y, loss)


def has_aux_error_message(params, x_BD, y, loss: str) -> str:
    """What JAX says when a (loss, metrics) function is differentiated without has_aux."""
    try:  # eval_shape traces without running or compiling: the error comes at trace time
        jax.eval_shape(functools.partial(jax.grad(loss_and_metrics), loss=loss), params, x_BD, y)
    except TypeError as error:
        return str(error).splitlines()[0]
    raise AssertionError("jax.grad accepted a tuple output")  # pragma: no cover


def _as_numpy(params, x_BD, y):
    params64 = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    return params64, np.asarray(x_BD, dtype=np.float64), np.asarray(y)


def numpy_value_and_grad(params, x_BD, y, loss: str):
    """(loss, grads) in NumPy float64 from the gradients written out by hand.

    mse:           L = mean((xW + b - y)^2)       dL/dout = 2 (out - y) / (B K)
    cross-entropy: L = mean(lse(out) - out[y])    dL/dout = (softmax(out) - onehot(y)) / B
    and for both   dL/dW = x^T dL/dout,   dL/db = sum over the batch of dL/dout.
    """
    p, x, y = _as_numpy(params, x_BD, y)
    out_BK = x @ p["w_DK"] + p["b_K"]
    batch, classes = out_BK.shape
    if loss == "mse":
        residual = out_BK - y.astype(np.float64)
        value = np.mean(residual**2)
        d_out = 2 * residual / residual.size
    elif loss == "cross_entropy":
        shifted = out_BK - out_BK.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        value = -np.mean(log_probs[np.arange(batch), y])
        d_out = (np.exp(log_probs) - np.eye(classes)[y]) / batch
    else:
        raise ValueError(problem(loss, 2))
    return float(value), {"w_DK": x.T @ d_out, "b_K": d_out.sum(axis=0)}


def loss_along_gradient(params, x_BD, y, loss: str, steps) -> list[dict]:
    """The loss at params - t * grad for each t, and its first-order prediction L - t |g|^2.

    The gradient is the direction of steepest ascent: stepping against it lowers the loss at
    rate |g|^2 per unit t, which is what the tangent line shows.
    """
    (value, _), grads = value_and_grad(params, x_BD, y, loss)
    squared_norm = sum(float(jnp.sum(g * g)) for g in jax.tree.leaves(grads))
    rows = []
    for t in steps:
        moved = jax.tree.map(lambda p, g, t=t: p - t * g, params, grads)
        (moved_value, _), _ = value_and_grad(moved, x_BD, y, loss)
        rows.append({"t": float(t), "curve": "loss(params - t·grad)", "loss": float(moved_value)})
        rows.append(
            {
                "t": float(t),
                "curve": "tangent: loss - t·|grad|²",
                "loss": float(value) - t * squared_norm,
            }
        )
    return rows


# ---------------------------------------------------------------- the lesson's claim
#
# "A small step against the gradient lowers the loss": how small depends on the curvature.
# A fixed t = 0.1 overshoots a sharp problem (mse with one example of 64 features has
# curvature ~130: any t > 2/130 raises the loss). The descent lemma makes the claim exact:
# for a loss whose curvature is at most lam, the step t = 1/lam lowers it by at least
# t |g|^2 / 2.


def smoothness(x_BD, loss: str, outputs: int) -> float:
    """An upper bound on the Hessian's largest eigenvalue in (W, b), NumPy float64.

    With X~ = [x, 1] (B, D + 1) and s = its largest singular value: mse (mean over B K
    squares) has Hessian 2 X~^T X~ / (B K) for every output, so exactly 2 s^2 / (B K);
    cross-entropy's is X~^T X~ / B times softmax's Jacobian diag(p) - p p^T, whose
    eigenvalues are at most 1/2: s^2 / (2 B).
    """
    if reason := problem(loss, outputs):
        raise ValueError(reason)
    x = np.asarray(x_BD, dtype=np.float64)
    batch = x.shape[0]
    augmented = np.concatenate([x, np.ones((batch, 1))], axis=1)
    top = float(np.linalg.norm(augmented, ord=2)) ** 2
    return 2 * top / (batch * outputs) if loss == "mse" else top / (2 * batch)


@dataclasses.dataclass(frozen=True)
class Descent:
    """One step t = 1 / smoothness against the gradient: the loss fell by ``decrease``
    (JAX float32); the descent lemma guarantees at least ``guaranteed`` = t |g|^2 / 2."""

    step: float
    decrease: float
    guaranteed: float

    @property
    def ratio(self) -> float:
        """decrease / guaranteed: >= 1 in exact arithmetic."""
        return self.decrease / self.guaranteed


def descent_at_safe_step(params, x_BD, y, loss: str) -> Descent:
    """Step against the gradient by 1 / smoothness and measure what the loss did."""
    outputs = np.shape(params["b_K"])[0]
    step = 1.0 / smoothness(x_BD, loss, outputs)
    (value, _), grads = value_and_grad(params, x_BD, y, loss)
    moved = jax.tree.map(lambda p, g: p - step * g, params, grads)
    (moved_value, _), _ = value_and_grad(moved, x_BD, y, loss)
    squared_norm = sum(
        float(np.sum(np.square(np.asarray(g, np.float64)))) for g in jax.tree.leaves(grads)
    )
    return Descent(step, float(value) - float(moved_value), step * squared_norm / 2)
