"""Exercises of the lesson "Losses and value_and_grad": the cross-entropy's bias gradient at
zero parameters, and the MSE's loss, metric and gradients in one value_and_grad call."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.transformations._shared import PHASE, _as_float64, _scaled_error


class BiasGradient(PredictItem):
    """At W = 0, b = 0 the softmax is uniform: dL/db_k = 1/K - (share of labels k)."""

    id = "transformations.losses_value_and_grad.bias_gradient"
    phase = PHASE
    lesson = "losses_value_and_grad"
    title = "The bias gradient of cross-entropy at zero"
    units = ""
    rel_tol = 0.01
    hints = (
        "With W = 0 and b = 0 every logit is 0, whatever x. What probability does the softmax "
        "give each of the K classes?",
        "For softmax cross-entropy averaged over B examples, dL/dlogits = "
        "(softmax − onehot(label)) / B, one row per example, and dL/db sums those rows over "
        "the batch.",
        "dL/db_k = (1/B)·Σ_examples (1/K − [label = k]) = 1/K − (number of labels equal to k)/B.",
    )
    MIN_GRADIENT = 0.04  # |dL/db_k| at least this: the 1% tolerance is a real target

    def params(self, generator):
        while True:  # a class that appears, and a gradient clearly away from 0
            classes = int(generator.integers(3, 7))
            batch = int(generator.integers(6, 13))
            labels = [int(v) for v in generator.integers(0, classes, batch)]
            k = int(generator.integers(classes))
            count = labels.count(k)
            if count >= 1 and abs(1 / classes - count / batch) >= self.MIN_GRADIENT:
                return {
                    "classes": classes,
                    "labels": labels,
                    "k": k,
                    "features": int(generator.integers(2, 6)),
                    "seed": int(generator.integers(0, 2**16)),
                }

    def prompt(self, params) -> str:
        batch, classes, k = len(params["labels"]), params["classes"], params["k"]
        labels = ", ".join(map(str, params["labels"]))
        return (
            f"The lesson's linear classifier `logits = x @ W + b` over **K = {classes} classes** "
            f"starts at **W = 0, b = 0**. A batch of **B = {batch}** random inputs "
            f"({params['features']} features each) has the labels **[{labels}]**. "
            "`(loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)` "
            f"with the mean softmax cross-entropy. **Predict `grads['b_K'][{k}]`**, the "
            f"gradient with respect to the bias of class {k}; the lesson's library then "
            "computes it."
        )

    def live(self, params) -> float:
        import jax.numpy as jnp

        from core.lessons.transformations import losses_value_and_grad

        classes, features = params["classes"], params["features"]
        labels = jnp.asarray(params["labels"], jnp.int32)
        x_BD = np.random.default_rng(params["seed"]).normal(size=(len(labels), features))
        weights = {
            "w_DK": jnp.zeros((features, classes), jnp.float32),
            "b_K": jnp.zeros((classes,), jnp.float32),
        }
        _value, grads = losses_value_and_grad.value_and_grad(
            weights, jnp.asarray(x_BD, jnp.float32), labels, "cross_entropy"
        )
        return float(grads["b_K"][params["k"]])

    def derive(self, params):
        batch, classes, k = len(params["labels"]), params["classes"], params["k"]
        count = params["labels"].count(k)
        value = 1 / classes - count / batch
        return value, (
            f"W = 0 and b = 0 make every logit 0, so the softmax gives each class 1/{classes}, "
            "whatever x. The loss's gradient with respect to the logits is "
            "(softmax − onehot(label)) / B per example, and b is added to every example's "
            f"logits, so dL/db_{k} sums that over the batch: "
            f"(1/{batch})·({batch}·1/{classes} − {count}) = 1/{classes} − {count}/{batch} = "
            f"**{value:.6g}**. {count} of the {batch} labels are {k}: "
            + (
                "more than the model's 1/K share, so the gradient is negative and a step "
                f"against it raises b_{k}."
                if value < 0
                else "fewer than the model's 1/K share, so the gradient is positive and a step "
                f"against it lowers b_{k}."
            )
            + " The entries of grads['b_K'] always sum to 0 (each example's probabilities and "
            "its one-hot both sum to 1)."
        )

    def wrong(self, params, expected):
        batch, k = len(params["labels"]), params["k"]
        return {
            "onehot − softmax (the sign flipped)": -expected,
            "the sum over the batch, not the mean": batch * expected,
            "the softmax term left out: −(labels k)/B": -params["labels"].count(k) / batch,
        }


_MSE_STUB = '''\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    """The lesson's linear model pred = x_BD @ w_DK + b_K, scored by mean squared error.

    params: {"w_DK": (D, K), "b_K": (K,)} float32; x_BD: (B, D) inputs; y_BK: (B, K) targets.
    Returns ((loss, metrics), grads), as jax.value_and_grad(..., has_aux=True) does:
      loss:    the mean over all B*K entries of (pred - y)**2, a scalar;
      metrics: {"max abs error": the largest |pred - y|};
      grads:   {"w_DK": dloss/dw_DK, "b_K": dloss/db_K}, shaped like params.
    """
    raise NotImplementedError
'''

_MSE_NO_AUX = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    def loss_fn(p):
        pred = x_BD @ p["w_DK"] + p["b_K"]
        return jnp.mean((pred - y_BK) ** 2), {"max abs error": jnp.max(jnp.abs(pred - y_BK))}

    return jax.value_and_grad(loss_fn)(params)
"""

_MSE_SUM = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    def loss_fn(p):
        pred = x_BD @ p["w_DK"] + p["b_K"]
        return jnp.sum((pred - y_BK) ** 2), {"max abs error": jnp.max(jnp.abs(pred - y_BK))}

    return jax.value_and_grad(loss_fn, has_aux=True)(params)
"""

_MSE_PER_EXAMPLE_SUM = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    def loss_fn(p):
        pred = x_BD @ p["w_DK"] + p["b_K"]
        loss = jnp.mean(jnp.sum((pred - y_BK) ** 2, axis=1))
        return loss, {"max abs error": jnp.max(jnp.abs(pred - y_BK))}

    return jax.value_and_grad(loss_fn, has_aux=True)(params)
"""

_MSE_WRT_INPUTS = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    def loss_fn(p, x):
        pred = x @ p["w_DK"] + p["b_K"]
        return jnp.mean((pred - y_BK) ** 2), {"max abs error": jnp.max(jnp.abs(pred - y_BK))}

    return jax.value_and_grad(loss_fn, argnums=1, has_aux=True)(params, x_BD)
"""

_MSE_BY_HAND_NO_TWO = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    residual = x_BD @ params["w_DK"] + params["b_K"] - y_BK
    d_out = residual / residual.size
    grads = {"w_DK": x_BD.T @ d_out, "b_K": jnp.sum(d_out, axis=0)}
    metrics = {"max abs error": jnp.max(jnp.abs(residual))}
    return (jnp.mean(residual**2), metrics), grads
"""

_MSE_MEAN_METRIC = """\
import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    def loss_fn(p):
        pred = x_BD @ p["w_DK"] + p["b_K"]
        return jnp.mean((pred - y_BK) ** 2), {"max abs error": jnp.mean(jnp.abs(pred - y_BK))}

    return jax.value_and_grad(loss_fn, has_aux=True)(params)
"""

# float32 matmuls and means over at most a few hundred terms: ~1e-6 of the largest entry;
# every planted mistake is off by a factor (2, B, K, B·K) or a structure.
MSE_TOLERANCE = 1e-5


def mse_reference(params, x_BD, y_BK) -> tuple[float, float, dict[str, np.ndarray]]:
    """(loss, max abs error, grads) in float64 NumPy, the gradients written out by hand:
    dL/dpred = 2 (pred - y) / (B K); dL/dW = x^T dL/dpred; dL/db = its sum over the batch."""
    w, b = (np.asarray(params[k], np.float64) for k in ("w_DK", "b_K"))
    x, y = np.asarray(x_BD, np.float64), np.asarray(y_BK, np.float64)
    residual = x @ w + b - y
    d_pred = 2 * residual / residual.size
    grads = {"w_DK": x.T @ d_pred, "b_K": d_pred.sum(axis=0)}
    return float(np.mean(residual**2)), float(np.max(np.abs(residual))), grads


class MseValueAndGrad(CodeItem):
    id = "transformations.losses_value_and_grad.mse_value_and_grad"
    phase = PHASE
    lesson = "losses_value_and_grad"
    title = "Loss, metric and gradients in one call"
    function_name = "mse_value_and_grad"
    stub = _MSE_STUB
    solution_module = "core.exercises.solutions.mse_value_and_grad"
    hints = (
        "Write loss_fn(params) that returns (loss, metrics) for the x and y given, then let "
        "JAX do the rest: jax.value_and_grad differentiates with respect to the first "
        "argument.",
        "A loss_fn that returns a tuple needs has_aux=True (without it JAX refuses: the "
        "function must return a scalar). The mean is over every entry, B*K of them: "
        "jnp.mean((pred - y)**2).",
        "return jax.value_and_grad(loss_fn, has_aux=True)(params), with loss_fn returning "
        "(jnp.mean((pred - y_BK) ** 2), {'max abs error': jnp.max(jnp.abs(pred - y_BK))}).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `mse_value_and_grad(params, x_BD, y_BK)`: the lesson's one call that "
            "returns the loss, a metric and the gradients. The hidden tests call it on float32 "
            "problems of four sizes, one of them a single example with one output and one with "
            "targets in the thousands, and compare the loss, the metric and both gradients "
            f"with float64 NumPy (error at most {MSE_TOLERANCE:g} of each result's largest "
            "entry, or absolute below 1)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "has_aux left out (JAX refuses the tuple)": _MSE_NO_AUX,
            "the sum of squares, not the mean": _MSE_SUM,
            "summed over the K outputs, averaged over the batch only": _MSE_PER_EXAMPLE_SUM,
            "differentiated with respect to x, not the parameters": _MSE_WRT_INPUTS,
            "by hand, the 2 of d(r²)/dr left out": _MSE_BY_HAND_NO_TWO,
            "the mean abs error for the max": _MSE_MEAN_METRIC,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            ("small", int(generator.integers(3, 7)), int(generator.integers(2, 5)), 2, 1.0),
            ("typical", 32, 8, int(generator.integers(3, 6)), 1.0),
            ("one example, one output", 1, int(generator.integers(2, 5)), 1, 1.0),
            ("targets in the thousands", 16, 4, 3, 1000.0),
        ]
        tests = []
        for name, batch, features, outputs, scale in cases:
            params = {
                "w_DK": generator.normal(size=(features, outputs)).astype(np.float32),
                "b_K": generator.normal(size=outputs).astype(np.float32),
            }
            x = (generator.normal(size=(batch, features)) * math.sqrt(scale)).astype(np.float32)
            y = (generator.normal(size=(batch, outputs)) * scale).astype(np.float32)
            label = f"{name}: B={batch}, D={features}, K={outputs}"
            tests.append(self._compare(function, params, x, y, label))
        return tests

    def _compare(self, function, params, x, y, name) -> HiddenTest:
        loss, max_error, grads = mse_reference(params, x, y)
        result = function(dict(params), x, y)
        try:
            (got_loss, metrics), got_grads = result
        except (TypeError, ValueError):
            return HiddenTest(
                name, False, f"returned {type(result).__name__}; expected ((loss, metrics), grads)"
            )
        if not isinstance(metrics, dict) or "max abs error" not in metrics:
            return HiddenTest(name, False, "metrics is not a dict with the key 'max abs error'")
        if not isinstance(got_grads, dict) or set(got_grads) != set(grads):
            return HiddenTest(
                name, False, f"grads is not a dict with the keys {sorted(grads)} (like params)"
            )
        errors = {}
        for what, value, expected in (
            ("loss", got_loss, np.asarray(loss)),
            ("metrics['max abs error']", metrics["max abs error"], np.asarray(max_error)),
            *((f"grads[{k!r}]", got_grads[k], grads[k]) for k in sorted(grads)),
        ):
            array, why = _as_float64(value, what)
            if array is None:
                return HiddenTest(name, False, why)
            if array.shape != expected.shape:
                return HiddenTest(
                    name, False, f"{what} has shape {array.shape}; expected {expected.shape}"
                )
            if not np.isfinite(array).all():
                return HiddenTest(name, False, f"{what} is not finite")
            errors[what] = _scaled_error(array, expected)
        worst = max(errors, key=errors.get)
        return HiddenTest(
            name,
            errors[worst] <= MSE_TOLERANCE,
            f"largest error in {worst}: {errors[worst]:.1e} of its scale (tolerance "
            f"{MSE_TOLERANCE:g}); reference loss {loss:.6g}",
        )
