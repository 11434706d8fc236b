"""Exercises of the lesson "Your first gradient": jax.grad(f) at a point by hand, and a
float64 central difference good to 1e-8."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.transformations._shared import PHASE, _as_float64


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# name: (f in words, f' in words, f, f', {mistake: wrong f'}), written out here in plain
# Python floats: the independent closed form for the lesson's jax.grad.
_DERIVATIVES: dict[str, tuple[str, str, Callable, Callable, dict[str, Callable]]] = {
    "x**3 - 2x": (
        "x³ − 2x",
        "3x² − 2",
        lambda x: x**3 - 2 * x,
        lambda x: 3 * x**2 - 2,
        {"the power rule without its factor: x² − 2": lambda x: x**2 - 2},
    ),
    "sin(x)*exp(-x/4)": (
        "sin(x)·exp(−x/4)",
        "exp(−x/4)·(cos x − sin(x)/4)",
        lambda x: math.sin(x) * math.exp(-x / 4),
        lambda x: math.exp(-x / 4) * (math.cos(x) - math.sin(x) / 4),
        {
            "the product rule's second term left out: cos(x)·exp(−x/4)": lambda x: (
                math.cos(x) * math.exp(-x / 4)
            ),
            "the chain rule's −1/4 left out: exp(−x/4)·(cos x + sin x)": lambda x: (
                math.exp(-x / 4) * (math.cos(x) + math.sin(x))
            ),
        },
    ),
    "log(1+x**2)": (
        "log(1 + x²)",
        "2x / (1 + x²)",
        lambda x: math.log1p(x * x),
        lambda x: 2 * x / (1 + x * x),
        {"the chain rule's 2x left out: 1 / (1 + x²)": lambda x: 1 / (1 + x * x)},
    ),
    "softplus": (
        "softplus(x) = log(1 + eˣ)",
        "σ(x) = 1 / (1 + e⁻ˣ)",
        lambda x: math.log1p(math.exp(-abs(x))) + max(x, 0.0),
        _sigmoid,
        {
            "the sign of the exponent flipped: 1 / (1 + eˣ)": lambda x: _sigmoid(-x),
            "the chain rule's 1/(1 + eˣ) left out: eˣ": math.exp,
        },
    ),
    "tanh": (
        "tanh(x)",
        "1 − tanh²(x)",
        math.tanh,
        lambda x: 1 - math.tanh(x) ** 2,
        {"the square left out: 1 − tanh(x)": lambda x: 1 - math.tanh(x)},
    ),
}


class DerivativeAtPoint(PredictItem):
    """jax.grad(f) is f': predict it at one point by the rules of calculus."""

    id = "transformations.first_gradient.derivative_at_point"
    phase = PHASE
    lesson = "first_gradient"
    title = "jax.grad(f) at one point, by hand"
    units = ""
    rel_tol = 0.01
    hints = (
        "jax.grad(f) is the function x -> f'(x): differentiate f by the rules of calculus, "
        "then put x0 in. jax.grad does the same, rule by rule (the chain rule on each "
        "operation).",
        "The rules you need: (u·v)' = u'v + uv', (g(h(x)))' = g'(h(x))·h'(x), "
        "(log u)' = u'/u, (eᵘ)' = u'eᵘ, tanh' = 1 − tanh², sin' = cos. The lesson's title "
        "cell shows f' for the function it plots.",
        "The lesson's chart writes f' for each function: x³ − 2x → 3x² − 2; sin(x)·e^(−x/4) → "
        "e^(−x/4)(cos x − sin(x)/4); log(1 + x²) → 2x/(1 + x²); softplus → 1/(1 + e⁻ˣ); "
        "tanh → 1 − tanh². Evaluate it at x0 (in radians).",
    )
    MIN_SLOPE = 0.2  # |f'(x0)| at least this: a 1% tolerance stays a meaningful target
    MISTAKE_GAP = 0.05  # every planted mistake lies at least 5% away from f'(x0)

    @classmethod
    def _wrong_values(cls, name: str, x0: float) -> dict[str, float]:
        _words, _dwords, f, _df, mistakes = _DERIVATIVES[name]
        return {"f(x0), not f'(x0)": f(x0)} | {m: g(x0) for m, g in mistakes.items()}

    def params(self, generator):
        names = tuple(_DERIVATIVES)
        while True:  # points where f' is clearly nonzero and no mistake lands near it
            name = names[int(generator.integers(len(names)))]
            # odd multiples of 1/8 in [-2.4, 2.4]: exact in float32, off the x0 slider's grid
            x0 = (2 * int(generator.integers(-10, 10)) + 1) / 8
            slope = _DERIVATIVES[name][3](x0)
            wrongs = self._wrong_values(name, x0).values()
            if abs(slope) >= self.MIN_SLOPE and all(
                abs(w - slope) > self.MISTAKE_GAP * abs(slope) for w in wrongs
            ):
                return {"function": name, "x0": x0}

    def prompt(self, params) -> str:
        words = _DERIVATIVES[params["function"]][0]
        radians = " (in radians)" if "sin" in words else ""
        return (
            f"The lesson differentiates **f(x) = {words}** (its function `{params['function']}`)"
            f" with `df = jax.grad(f)`. **Predict `df({params['x0']:g})`**, the derivative at "
            f"x0 = {params['x0']:g}{radians}, worked out by hand; the lesson's library then runs "
            "`jax.grad` on it in float32."
        )

    def live(self, params) -> float:
        from core.lessons.transformations import first_gradient

        return first_gradient.jax_grad_at(params["function"], params["x0"])

    def derive(self, params):
        name, x0 = params["function"], params["x0"]
        words, dwords, _f, df, _mistakes = _DERIVATIVES[name]
        value = df(x0)
        return value, (
            f"f(x) = {words}, so by the rules of calculus f'(x) = {dwords}, and at "
            f"x0 = {x0:g}: **f'({x0:g}) = {value:.6g}**. `jax.grad` gets the same number without "
            "the algebra: it records the operations of f on x0 and applies the chain rule to "
            "each, so it is exact up to float32 rounding (about 1e-7 relative), with no step "
            "size to choose."
        )

    def wrong(self, params, expected):
        return self._wrong_values(params["function"], params["x0"])


_FD_STUB = '''\
import numpy as np


def f(x):
    """The lesson's f(x) = sin(x) * exp(-x / 4); the tests differentiate this one."""
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    """f'(x) at each point of x_N by a central difference (f(x + h) - f(x - h)) / (2 h).

    x_N: (N,) points, as float64, float32 or int. Returns (N,) float64 estimates, each
    within 1e-8 of the exact derivative (relative to max(1, |f'(x)|)). You pick the step h.
    """
    raise NotImplementedError
'''

_FD_TINY_STEP = """\
import numpy as np


def f(x):
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    x = np.asarray(x_N, dtype=np.float64)
    h = 1e-12
    return (f(x + h) - f(x - h)) / (2 * h)
"""

_FD_LARGE_STEP = """\
import numpy as np


def f(x):
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    x = np.asarray(x_N, dtype=np.float64)
    h = 1e-2
    return (f(x + h) - f(x - h)) / (2 * h)
"""

_FD_FORWARD = """\
import numpy as np


def f(x):
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    x = np.asarray(x_N, dtype=np.float64)
    h = 1e-6
    return (f(x + h) - f(x)) / h
"""

_FD_OVER_H = """\
import numpy as np


def f(x):
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    x = np.asarray(x_N, dtype=np.float64)
    h = 1e-5
    return (f(x + h) - f(x - h)) / h
"""

_FD_OWN_DTYPE = """\
import numpy as np


def f(x):
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    x = np.asarray(x_N)
    h = 1e-5 if x.dtype == np.float64 else 1e-3  # float32 needs a larger h
    return ((f(x + h) - f(x - h)) / (2 * h)).astype(np.float64)
"""

# A well-chosen h (about 1e-5 = eps^(1/3) for float64) reaches ~1e-10 on these points; any h
# from about 1e-7 to 1e-4 stays within 1e-8. h = 1e-3 already misses by ~1e-6 (truncation,
# h² f'''/6), h = 1e-9 by ~1e-6 (roundoff, eps |f| / h), and float32 arithmetic by ~1e-4.
FD_TOLERANCE = 1e-8


def lesson_f_derivative(x: np.ndarray) -> np.ndarray:
    """f'(x) for f(x) = sin(x) exp(-x/4), written out by hand, float64."""
    x = np.asarray(x, np.float64)
    return np.exp(-x / 4) * (np.cos(x) - np.sin(x) / 4)


class CentralDifference(CodeItem):
    id = "transformations.first_gradient.central_difference"
    phase = PHASE
    lesson = "first_gradient"
    title = "A central difference good to 1e-8"
    function_name = "central_difference"
    stub = _FD_STUB
    solution_module = "core.exercises.solutions.central_difference"
    hints = (
        "Two errors pull h in opposite directions: the formula's own error shrinks like h², "
        "roundoff in f(x + h) − f(x − h) grows like eps·|f|/h. The lesson's step-size chart "
        "draws both as a V.",
        "The bottom of the float64 central V sits near h = eps^(1/3) ≈ 6e-6 (eps ≈ 2.2e-16). "
        "And the points may come as float32: then x + h is rounded to float32 (eps ≈ 1.2e-7) "
        "and no h is good enough.",
        "x = np.asarray(x_N, dtype=np.float64); h = 1e-5; return (f(x + h) - f(x - h)) / (2 * h).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `central_difference(x_N)`: the finite-difference reference of the lesson, "
            "for f(x) = sin(x)·exp(−x/4), with a step h of your choice. The hidden tests call "
            "it on points in float64, in float32, as integers and far out (|x| up to 8), and "
            "compare with f' written out by hand in float64: every estimate within "
            f"{FD_TOLERANCE:g} relative to max(1, |f'(x)|)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "h = 1e-12: roundoff wins": _FD_TINY_STEP,
            "h = 1e-2: the formula's h² error wins": _FD_LARGE_STEP,
            "a forward difference (error of order h, not h²)": _FD_FORWARD,
            "divided by h, not 2h": _FD_OVER_H,
            "float32 points differenced in float32": _FD_OWN_DTYPE,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        near = generator.uniform(-3.0, 3.0, int(generator.integers(7, 13)))
        far = generator.uniform(5.0, 8.0, 6) * generator.choice([-1.0, 1.0], 6)
        cases = [
            ("float64 points in [-3, 3]", near),
            ("float32 points in [-3, 3]", generator.uniform(-3.0, 3.0, 9).astype(np.float32)),
            ("integer points -4..4", np.arange(-4, 5, dtype=np.int64)),
            ("points far out, 5 <= |x| <= 8", far),
        ]
        return [self._compare(function, x, name) for name, x in cases]

    def _compare(self, function, x, name) -> HiddenTest:
        expected = lesson_f_derivative(np.asarray(x, np.float64))  # the points as given
        got, why = _as_float64(function(x), "the result")
        if got is None:
            return HiddenTest(name, False, why)
        if got.shape != expected.shape:
            return HiddenTest(name, False, f"returned shape {got.shape}; expected {x.shape}")
        if not np.isfinite(got).all():
            return HiddenTest(name, False, "returned a value that is not finite")
        error = np.abs(got - expected) / np.maximum(1.0, np.abs(expected))
        worst = int(np.argmax(error))
        return HiddenTest(
            name,
            float(error.max()) <= FD_TOLERANCE,
            f"largest error {error.max():.1e} at x = {float(x[worst]):.4g} (tolerance "
            f"{FD_TOLERANCE:g}, relative to max(1, |f'(x)|))",
        )
