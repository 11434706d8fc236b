"""Finite differences and their step size, for the lesson "Gradient checking and numerical
accuracy".

Part 1, one scalar function: the forward difference (f(x+h) - f(x)) / h has a truncation
error ~ h |f''| / 2 and a rounding error ~ eps |f| / h; they balance near h ~ sqrt(eps), where
the error is ~ sqrt(eps). The central difference (f(x+h) - f(x-h)) / 2h has truncation
~ h^2 |f'''| / 6, balanced near h ~ eps^(1/3), error ~ eps^(2/3). Swept over h in float32 and
float64 (NumPy arithmetic in that dtype), the error against the closed-form derivative is a U
with its bottom where machine epsilon says.

Part 2, a gradient checker at work (``core.optim.gradcheck``): a one-hidden-layer tanh
network's loss, whose gradient either comes from ``jax.grad`` or through a ``custom_vjp``
tanh with a planted bug (the backward pass uses 1 - tanh instead of 1 - tanh^2). The
reference for the checker's own finite differences is a hand-written NumPy float64 backprop.

Dimension glossary: N examples, D input features, H hidden units, S steps in the sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core.optim import linalg

STEPS = np.logspace(-16, -1, 61)  # the sweep: 4 points a decade, up to h = 0.1
INPUTS, EXAMPLES = 3, 16  # the checker's network: D inputs, N examples
# At the rule-of-thumb step the error stays within this factor of the predicted minimum,
# sqrt(eps) (forward) or eps^(2/3) (central): the rule ignores |f|, |f''|, |f'''|, which for
# these functions (away from sqrt's singularity at 0) moves it by at most ~5x (measured over
# x0 in [-2, 2], both dtypes: worst 3.4 for sin exp and tanh, 5 for sqrt at x0 >= 0.5).
STEP_RULE_FACTOR = 10.0


@dataclasses.dataclass(frozen=True)
class Function:
    """f and its closed-form derivative, each written once for any array namespace xp."""

    name: str
    f: Callable  # (x, xp) -> f(x)
    df: Callable  # (x, xp) -> f'(x)
    formula: str
    derivative_formula: str
    domain_lo: float | None = None  # f is defined only for x > domain_lo


FUNCTIONS = {
    fn.name: fn
    for fn in (
        Function(
            "sin(x) exp(x)",
            lambda x, xp: xp.sin(x) * xp.exp(x),
            lambda x, xp: xp.exp(x) * (xp.sin(x) + xp.cos(x)),
            r"\sin(x)\, e^x",
            r"e^x (\sin x + \cos x)",
        ),
        Function(
            "tanh(3x)",
            lambda x, xp: xp.tanh(3 * x),
            lambda x, xp: 3 * (1 - xp.tanh(3 * x) ** 2),
            r"\tanh(3x)",
            r"3 (1 - \tanh^2 3x)",
        ),
        Function(
            "sqrt(x)",
            lambda x, xp: xp.sqrt(x),
            lambda x, xp: 0.5 / xp.sqrt(x),
            r"\sqrt{x}",
            r"\frac{1}{2\sqrt{x}}",
            domain_lo=0.0,
        ),
    )
}
NAMES = tuple(FUNCTIONS)
DTYPES = ("float32", "float64")
METHODS = ("forward", "central")


def get(name: str) -> Function:
    if name not in FUNCTIONS:
        raise ValueError(f"unknown function {name!r}: choose one of {', '.join(NAMES)}")
    return FUNCTIONS[name]


def point_problem(name: str, x0: float) -> str | None:
    """Why f has no derivative to check at x0, or None."""
    fn = get(name)
    if fn.domain_lo is not None and x0 <= fn.domain_lo:
        return (
            f"{name} is defined (and differentiable) only for x > {fn.domain_lo:g}: at x0 = "
            f"{x0:g} there is no derivative to approximate (pick x0 > 0)"
        )
    return None


def rule_of_thumb_step(method: str, dtype: str, x0: float) -> float:
    """The step machine epsilon predicts: sqrt(eps) (forward) or eps^(1/3) (central),
    times max(1, |x0|) so that x0 + h differs from x0 in float arithmetic."""
    eps = float(np.finfo(dtype).eps)
    power = {"forward": 1 / 2, "central": 1 / 3}[method]
    return eps**power * max(1.0, abs(x0))


def difference(name: str, x0: float, h_S: np.ndarray, method: str, dtype: str) -> np.ndarray:
    """The finite difference at x0 for every step, computed in NumPy ``dtype`` arithmetic."""
    fn = get(name)
    kind = np.dtype(dtype).type
    x, h = kind(x0), np.asarray(h_S).astype(dtype)
    with np.errstate(all="ignore"):
        if method == "forward":
            return (fn.f(x + h, np) - fn.f(x, np)) / h
        if method == "central":
            return (fn.f(x + h, np) - fn.f(x - h, np)) / (kind(2) * h)
    raise ValueError(f"method is one of {', '.join(METHODS)}, got {method!r}")


def exact_derivative(name: str, x0: float) -> float:
    """f'(x0) from the closed form, NumPy float64."""
    return float(get(name).df(np.float64(x0), np))


def sweep(name: str, x0: float, h_S: np.ndarray = STEPS) -> list[dict]:
    """Rows {dtype, method, h, error}: |difference - f'(x0)| / max(|f'(x0)|, 1), float64.

    Steps whose difference is not finite (x0 - h outside the domain) are left out.
    """
    exact = exact_derivative(name, x0)
    rows = []
    for dtype in DTYPES:
        for method in METHODS:
            values = difference(name, x0, h_S, method, dtype).astype(np.float64)
            errors = np.abs(values - exact) / max(abs(exact), 1.0)
            rows += [
                {"dtype": dtype, "method": method, "h": float(h), "error": float(e)}
                for h, e in zip(h_S, errors, strict=True)
                if np.isfinite(e)
            ]
    return rows


def predicted_error(method: str, dtype: str) -> float:
    """The smallest error machine epsilon allows: sqrt(eps) (forward), eps^(2/3) (central)."""
    eps = float(np.finfo(dtype).eps)
    return eps ** {"forward": 1 / 2, "central": 2 / 3}[method]


def step_summary(name: str, x0: float, rows: list[dict]) -> list[dict]:
    """Per dtype and method: the predicted step and error, what was measured there, and the
    sweep's best step. ``error at predicted h`` is measured at the rule-of-thumb step itself."""
    exact = exact_derivative(name, x0)
    summary = []
    for dtype in DTYPES:
        for method in METHODS:
            mine = [r for r in rows if r["dtype"] == dtype and r["method"] == method]
            best = min(mine, key=lambda r: r["error"])
            h_star = rule_of_thumb_step(method, dtype, x0)
            value = float(difference(name, x0, np.array([h_star]), method, dtype)[0])
            at_predicted = abs(value - exact) / max(abs(exact), 1.0)
            bound = STEP_RULE_FACTOR * predicted_error(method, dtype)
            summary.append(
                {
                    "dtype": dtype,
                    "method": method,
                    "predicted h": h_star,
                    "predicted error": predicted_error(method, dtype),
                    "error at predicted h": at_predicted,
                    "best h of the sweep": best["h"],
                    "within the factor": bool(at_predicted <= bound),
                }
            )
    return summary


def jax_derivative(name: str, x0: float) -> float:
    """jax.grad of f at x0, in float32."""
    fn = get(name)
    return float(jax.grad(lambda x: fn.f(x, jnp))(jnp.float32(x0)))


# --- Part 2: the gradient checker on a small network --------------------------------------


@jax.custom_vjp
def buggy_tanh(z):
    """tanh, whose backward pass has a planted bug: it multiplies by 1 - tanh(z), not
    1 - tanh(z)^2 (a classic slip). The forward value is right, so only a gradient check
    (or a training run that goes wrong) can tell."""
    return jnp.tanh(z)


def _buggy_tanh_fwd(z):
    y = jnp.tanh(z)
    return y, y


def _buggy_tanh_bwd(y, g):
    return (g * (1 - y),)


buggy_tanh.defvjp(_buggy_tanh_fwd, _buggy_tanh_bwd)


def network_data(key: jax.Array, hidden: int) -> tuple[dict, jax.Array, jax.Array]:
    """(params, x_ND, y_N): a random network with ``hidden`` tanh units and random data."""
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    w1, b1, w2, x_ND = linalg.normal_arrays(
        key, (hidden, INPUTS), (hidden,), (hidden,), (EXAMPLES, INPUTS)
    )
    params = {"w1": w1 / np.sqrt(INPUTS), "b1": 0.1 * b1, "w2": w2 / np.sqrt(hidden)}
    y_N = jnp.sin(x_ND[:, 0])
    return params, x_ND, y_N


def network_loss(params: dict, x_ND, y_N, bug: bool = False):
    """mean((tanh(x w1^T + b1) w2 - y)^2), with the buggy tanh when ``bug``."""
    act = buggy_tanh if bug else jnp.tanh
    h_NH = act(x_ND @ params["w1"].T + params["b1"])
    return jnp.mean((h_NH @ params["w2"] - y_N) ** 2)


def network_gradient_reference(params: dict, x_ND, y_N) -> np.ndarray:
    """The loss gradient by hand-written backprop in NumPy float64, flattened in the
    checker's order (sorted keys: b1, w1, w2)."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x, y = np.asarray(x_ND, np.float64), np.asarray(y_N, np.float64)
    h = np.tanh(x @ p["w1"].T + p["b1"])
    residual = h @ p["w2"] - y
    d_out = 2 * residual / y.size  # dL/d(prediction)
    d_w2 = h.T @ d_out
    d_pre = np.outer(d_out, p["w2"]) * (1 - h**2)
    d_w1 = d_pre.T @ x
    d_b1 = d_pre.sum(axis=0)
    return np.concatenate([d_b1.ravel(), d_w1.ravel(), d_w2.ravel()])
