"""Scalar functions and their derivatives, for the lesson "Your first gradient".

Each function comes three ways: JAX (what ``jax.grad`` differentiates), NumPy float64 (for
finite differences), and its derivative in closed form (NumPy float64). The closed form and
the finite differences never touch JAX, so they are independent references for ``jax.grad``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics


@dataclasses.dataclass(frozen=True)
class ScalarFunction:
    """f: R -> R in JAX, f in NumPy float64, and f' written out by hand."""

    name: str
    formula: str  # f(x), LaTeX
    derivative_formula: str  # f'(x), LaTeX
    jax_f: Callable[[jax.Array], jax.Array]
    numpy_f: Callable[[np.ndarray], np.ndarray]
    numpy_df: Callable[[np.ndarray], np.ndarray]


def _softplus_np(x):
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid_np(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + e^-x), stable for large |x|


FUNCTIONS: dict[str, ScalarFunction] = {
    f.name: f
    for f in (
        ScalarFunction(
            "x**3 - 2x",
            r"x^3 - 2x",
            r"3x^2 - 2",
            lambda x: x**3 - 2 * x,
            lambda x: x**3 - 2 * x,
            lambda x: 3 * x**2 - 2,
        ),
        ScalarFunction(
            "sin(x)*exp(-x/4)",
            r"\sin(x)\,e^{-x/4}",
            r"e^{-x/4}\left(\cos x - \tfrac{1}{4}\sin x\right)",
            lambda x: jnp.sin(x) * jnp.exp(-x / 4),
            lambda x: np.sin(x) * np.exp(-x / 4),
            lambda x: np.exp(-x / 4) * (np.cos(x) - np.sin(x) / 4),
        ),
        ScalarFunction(
            "log(1+x**2)",
            r"\log(1 + x^2)",
            r"\frac{2x}{1 + x^2}",
            lambda x: jnp.log1p(x**2),
            lambda x: np.log1p(x**2),
            lambda x: 2 * x / (1 + x**2),
        ),
        ScalarFunction(
            "softplus",
            r"\log(1 + e^{x})",
            r"\sigma(x) = \frac{1}{1 + e^{-x}}",
            jax.nn.softplus,
            _softplus_np,
            _sigmoid_np,
        ),
        ScalarFunction(
            "tanh",
            r"\tanh x",
            r"1 - \tanh^2 x",
            jnp.tanh,
            np.tanh,
            lambda x: 1 - np.tanh(x) ** 2,
        ),
    )
}
NAMES = tuple(FUNCTIONS)


def get(name: str) -> ScalarFunction:
    if name not in FUNCTIONS:
        raise ValueError(f"unknown function {name!r}: choose one of {', '.join(NAMES)}")
    return FUNCTIONS[name]


def grid(lo: float, hi: float, points: int) -> np.ndarray:
    """``points`` evenly spaced x values in [lo, hi], float64: (points,)."""
    if not lo < hi:
        raise ValueError(f"the range needs lo < hi, got lo={lo}, hi={hi}")
    if points < 2:
        raise ValueError(f"need at least 2 points, got {points}")
    return np.linspace(lo, hi, points)


@functools.cache
def _compiled(name: str):
    """jit(f) and jit(vmap(grad(f))), built once per function (jit caches per call signature)."""
    f = get(name).jax_f
    return jax.jit(f), jax.jit(jax.vmap(jax.grad(f)))


def jax_grad_on(name: str, x_N) -> np.ndarray:
    """jax.grad(f) at every point of x (float32, one gradient per point via vmap): (N,)."""
    return np.asarray(_compiled(name)[1](jnp.asarray(x_N, dtype=jnp.float32)))


def jax_value_on(name: str, x_N) -> np.ndarray:
    """f(x) in JAX float32: (N,)."""
    return np.asarray(_compiled(name)[0](jnp.asarray(x_N, dtype=jnp.float32)))


def closed_form_derivative(name: str, x_N) -> np.ndarray:
    """f'(x) from the hand-written formula, NumPy float64: (N,)."""
    return get(name).numpy_df(np.asarray(x_N, dtype=np.float64))


def central_difference(
    f: Callable[[np.ndarray], np.ndarray], x_N, step: float, dtype=np.float64
) -> np.ndarray:
    """(f(x + h) - f(x - h)) / 2h in ``dtype``: truncation error O(h^2), roundoff O(eps / h)."""
    if step <= 0:
        raise ValueError(f"the step h must be positive, got {step}")
    x = np.asarray(x_N, dtype=dtype)
    h = dtype(step)
    return (f(x + h) - f(x - h)) / (2 * h)


def forward_difference(
    f: Callable[[np.ndarray], np.ndarray], x_N, step: float, dtype=np.float64
) -> np.ndarray:
    """(f(x + h) - f(x)) / h in ``dtype``: truncation error O(h), roundoff O(eps / h)."""
    if step <= 0:
        raise ValueError(f"the step h must be positive, got {step}")
    x = np.asarray(x_N, dtype=dtype)
    h = dtype(step)
    return (f(x + h) - f(x)) / h


# Central differences in float64: h ~ eps^(1/3) ~ 6e-6 balances truncation and roundoff.
DEFAULT_STEP = 1e-5


@dataclasses.dataclass(frozen=True)
class DerivativeComparison:
    """f and three derivatives of it on the same grid."""

    x: np.ndarray  # (N,) float64
    f: np.ndarray  # (N,) JAX float32
    jax_grad: np.ndarray  # (N,) float32
    closed_form: np.ndarray  # (N,) float64
    finite_difference: np.ndarray  # (N,) float64, central, step DEFAULT_STEP

    @property
    def error_vs_closed_form(self) -> float:
        return numerics.scaled_max_error(self.jax_grad, self.closed_form)

    @property
    def error_vs_finite_difference(self) -> float:
        return numerics.scaled_max_error(self.jax_grad, self.finite_difference)

    def long_rows(self) -> list[dict]:
        """One row per (x, curve), for a line chart with one line per curve."""
        curves = {
            "f(x)": self.f,
            "jax.grad(f)": self.jax_grad,
            "closed-form f'": self.closed_form,
        }
        return [
            {"x": float(x), "curve": curve, "value": float(values[i])}
            for curve, values in curves.items()
            for i, x in enumerate(self.x)
        ]


def compare(name: str, x_N, step: float = DEFAULT_STEP) -> DerivativeComparison:
    """jax.grad vs the closed form vs central differences (NumPy float64) at x."""
    function = get(name)
    x = np.asarray(x_N, dtype=np.float64)
    return DerivativeComparison(
        x=x,
        f=jax_value_on(name, x),
        jax_grad=jax_grad_on(name, x),
        closed_form=closed_form_derivative(name, x),
        finite_difference=central_difference(function.numpy_f, x, step),
    )


def step_size_sweep(name: str, x0: float, steps) -> list[dict]:
    """|finite difference - closed form| at x0 for each step h: forward and central, f64 and f32.

    Errors shrink with h (truncation) until roundoff, ~eps * |f| / h, takes over: the V shape
    that makes finite differences a poor substitute for autodiff, especially in float32.
    """
    function = get(name)
    exact = float(closed_form_derivative(name, np.array([x0]))[0])
    rows = []
    for h in steps:
        for dtype in (np.float64, np.float32):
            for scheme, difference in (
                ("central", central_difference),
                ("forward", forward_difference),
            ):
                estimate = float(difference(function.numpy_f, np.array([x0]), h, dtype)[0])
                rows.append(
                    {
                        "step h": float(h),
                        "scheme": f"{scheme} {np.dtype(dtype).name}",
                        "abs error": max(abs(estimate - exact), 1e-18),  # a log axis needs > 0
                    }
                )
    return rows


def jax_grad_at(name: str, x0: float) -> float:
    """jax.grad(f)(x0) for one float32 scalar."""
    return float(jax.grad(get(name).jax_f)(jnp.float32(x0)))


# ---------------------------------------------------------------- the lesson's claims
#
# "float64 central differences beat float32, and central beats forward": true in general,
# false at special points. A best-over-h error can be 0 by luck (float32 rounding that
# lands exactly on f'), and at an inflection point (f''(x0) = 0) the forward difference's
# h·f''/2 error term vanishes, so forward is as accurate as central there. The claims below
# say where they apply and measure a robust best error.

# The step sizes the lesson sweeps (and the claims below are proven over, autodiff_test.py).
SWEEP_STEPS = np.logspace(-13, -1, 25)
# The robust best error looks at this many neighbouring step sizes: a lucky exact hit at
# one h does not count, an error kept over a few neighbouring h does.
BEST_ERROR_WINDOW = 3
# "central beats forward" applies where |f''(x0)| is at least this (away from inflections).
INFLECTION_TOLERANCE = 1e-2
# Errors at or below this (relative to max(1, |f'(x0)|)) are exact: nothing left to beat.
EXACT_ERROR = 1e-15
# A claim holds when the better scheme's best error is at most this fraction of the other's.
FLOAT64_BEATS_FLOAT32 = 1e-3
CENTRAL_BEATS_FORWARD = 0.5


def best_error(rows: list[dict], scheme: str, window: int = BEST_ERROR_WINDOW) -> float:
    """min over h of the largest error over ``window`` neighbouring step sizes, for one
    scheme of ``step_size_sweep`` rows: the error the scheme reliably reaches near its best h.
    """
    ordered = sorted(rows, key=lambda r: r["step h"])
    errors = [r["abs error"] for r in ordered if r["scheme"] == scheme]
    if len(errors) < window:
        raise ValueError(f"need at least {window} step sizes of {scheme!r}, got {len(errors)}")
    return min(max(errors[i : i + window]) for i in range(len(errors) - window + 1))


def second_derivative(name: str, x0: float, step: float = 1e-4) -> float:
    """f''(x0) by a central second difference in NumPy float64 (error ~1e-8 at h = 1e-4)."""
    f = get(name).numpy_f
    x = np.array([x0], dtype=np.float64)
    return float(((f(x + step) - 2 * f(x) + f(x - step)) / step**2)[0])


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim at one point: ``ratio`` = better scheme's best error / the other's.

    ``applies`` False says why the claim is not made here (``reason``); where it applies it
    holds when ``ratio <= limit``; ``margin`` = limit / ratio (> 1: holds, bigger is safer).
    """

    name: str
    applies: bool
    ratio: float
    limit: float
    reason: str = ""

    @property
    def holds(self) -> bool:
        return (not self.applies) or self.ratio <= self.limit

    @property
    def margin(self) -> float:
        return self.limit / max(self.ratio, 1e-300)


def difference_claims(name: str, x0: float, rows: list[dict]) -> list[Claim]:
    """The lesson's two claims about ``step_size_sweep(name, x0, ...)`` rows.

    1. float64 central differences beat float32 ones by FLOAT64_BEATS_FLOAT32 (unless the
       float32 best is already exact); 2. central beats forward in float64 by
       CENTRAL_BEATS_FORWARD where |f''(x0)| >= INFLECTION_TOLERANCE.
    """
    scale = max(1.0, abs(float(closed_form_derivative(name, [x0])[0])))
    central64, central32 = best_error(rows, "central float64"), best_error(rows, "central float32")
    forward64 = best_error(rows, "forward float64")
    curvature = second_derivative(name, x0)
    return [
        Claim(
            "central float64 beats central float32",
            central32 > EXACT_ERROR * scale,
            central64 / central32,
            FLOAT64_BEATS_FLOAT32,
            "" if central32 > EXACT_ERROR * scale else "float32 is exact here: nothing to beat",
        ),
        Claim(
            "central beats forward (float64)",
            abs(curvature) >= INFLECTION_TOLERANCE,
            central64 / max(forward64, 1e-300),
            CENTRAL_BEATS_FORWARD,
            ""
            if abs(curvature) >= INFLECTION_TOLERANCE
            else f"f''(x0) = {curvature:.2g}: at an inflection point forward is as good as central",
        ),
    ]
