"""The assessment item of the phase "Math & optimization".

- ``math_optimization.stable_learning_rate`` (predict): gradient descent's limit 2/lambda_max.
"""

from __future__ import annotations

import fractions

import jax
import jax.numpy as jnp
import numpy as np

from core import runtime
from core.assessment.items import Item, PredictItem

# Rotations with entries k/5 or k/25 (Pythagorean triples; unit quaternions (4,2,2,1)/5 in some
# order and signs): with eigenvalues that are multiples of 1/16, A = Q diag(lambda) Q^T has
# entries that are exact multiples of 1/10000, so the four decimals shown are A itself.
TRIPLES = ((3, 4, 5), (4, 3, 5), (7, 24, 25), (24, 7, 25))
EIGEN_STEP = fractions.Fraction(1, 16)


def _rotation(generator, n: int) -> list[list[fractions.Fraction]]:
    if n == 2:
        p, q, r = TRIPLES[int(generator.integers(len(TRIPLES)))]
        s = int(generator.choice([-1, 1]))
        c, s = fractions.Fraction(p, r), fractions.Fraction(s * q, r)
        return [[c, -s], [s, c]]
    w, x, y, z = (
        int(v) * int(generator.choice([-1, 1])) for v in generator.permutation([4, 2, 2, 1])
    )
    m = fractions.Fraction(1, 25)
    return [
        [m * (w * w + x * x - y * y - z * z), m * 2 * (x * y - w * z), m * 2 * (x * z + w * y)],
        [m * 2 * (x * y + w * z), m * (w * w - x * x + y * y - z * z), m * 2 * (y * z - w * x)],
        [m * 2 * (x * z - w * y), m * 2 * (y * z + w * x), m * (w * w - x * x - y * y + z * z)],
    ]


@jax.jit  # one compile per matrix size, instead of one per eager operation
def _hessian_eigenvalues(a_NN: jax.Array, b_N: jax.Array) -> jax.Array:
    """The eigenvalues (N,) of the Hessian of f(x) = 1/2 x^T A x + b^T x, by jax.hessian."""

    def f(x_N):
        return 0.5 * x_N @ a_NN @ x_N + b_N @ x_N

    return jnp.linalg.eigvalsh(jax.hessian(f)(jnp.zeros_like(b_N)))


class StableLearningRate(PredictItem):
    """The largest learning rate for which gradient descent on a quadratic converges."""

    id = "math_optimization.stable_learning_rate"
    phase = "Math & optimization"
    lesson = "curvature_hessians"
    title = "The largest stable learning rate"

    def params(self, generator):
        n = int(generator.integers(2, 4))
        # lambda_max in [4, 12], lambda_min in [0.5, 2] (so 2/lambda_min is far from the
        # answer), any middle one strictly between; all multiples of 1/16.
        top = int(generator.integers(64, 193))
        bottom = int(generator.integers(8, 33))
        middle = [int(generator.integers(bottom + 1, top))] if n == 3 else []
        eigen = [EIGEN_STEP * k for k in [top, *middle, bottom]]
        eigen = [eigen[i] for i in generator.permutation(n)]
        q = _rotation(generator, n)
        a = [
            [sum(q[i][k] * eigen[k] * q[j][k] for k in range(n)) for j in range(n)]
            for i in range(n)
        ]
        b = [round(float(v), 1) for v in generator.uniform(-3, 3, n)]
        return {
            "A": tuple(tuple(float(v) for v in row) for row in a),
            "A_exact": tuple(tuple(row) for row in a),
            "eigenvalues": tuple(float(v) for v in eigen),
            "b": tuple(b),
        }

    def prompt(self, params):
        rows = ",\n     ".join(
            "[" + ", ".join(f"{v:.4f}" for v in row) + "]" for row in params["A"]
        )
        return (
            "Gradient descent x ← x − η ∇f(x) runs on\n\n"
            "f(x) = ½ xᵀ A x + bᵀ x, with\n\n"
            f"```\nA = [{rows}]\nb = {list(params['b'])}\n```\n\n"
            "(A is symmetric positive definite; its entries are exact as shown.) What is the "
            "largest learning rate η for which gradient descent converges from every starting "
            "point (it converges for every η below your number, diverges above it)? You may "
            "use NumPy."
        )

    def live(self, params):
        with runtime.enable_float64():
            a = jnp.asarray(params["A"], dtype=jnp.float64)
            b = jnp.asarray(params["b"], dtype=jnp.float64)
            return float(2.0 / jnp.max(_hessian_eigenvalues(a, b)))

    def derive(self, params):
        eigen = np.asarray(params["eigenvalues"], dtype=np.float64)
        top = float(eigen.max())
        value = 2.0 / top
        shown = ", ".join(f"{v:g}" for v in sorted(eigen))
        derivation = (
            "The Hessian of f is A everywhere (b only moves the minimum). Along eigenvector i of "
            "A, gradient descent multiplies the error by (1 − η λᵢ) each step, so it converges "
            "when every |1 − η λᵢ| < 1, i.e. η < 2 / λ_max.\n\n"
            f"Eigenvalues of A: {shown}; λ_max = {top:g}.\n\n"
            f"η_max = 2 / λ_max = 2 / {top:g} = **{value:.6g}**.\n\n"
            "The steepest direction sets the limit; the flattest one (λ_min) only sets how "
            "slowly the rest converges."
        )
        return value, derivation

    def wrong(self, params, expected):
        eigen = np.asarray(params["eigenvalues"], dtype=np.float64)
        found = {
            "1 / lambda_max (the factor 2 forgotten)": 1.0 / eigen.max(),
            "2 / lambda_min (the flattest direction)": 2.0 / eigen.min(),
        }
        diagonal = 2.0 / max(params["A"][i][i] for i in range(len(eigen)))
        if abs(diagonal - expected) > 0.05 * expected:
            found["2 / the largest diagonal entry (not an eigenvalue)"] = diagonal
        return found


ITEMS: tuple[Item, ...] = (StableLearningRate(),)
