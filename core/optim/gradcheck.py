"""A gradient checker: ``jax.grad`` against central finite differences in float64.

    result = gradcheck.check_gradient(loss, params)      # params: an array or a pytree
    assert result.passed, result.summary()

The numeric gradient perturbs one element at a time, ``(f(x + h e_i) - f(x - h e_i)) / 2h``,
in float64: either by evaluating ``f`` itself inside ``runtime.enable_float64`` (jax.enable_x64, on
the host CPU when the default backend is a TPU, which has no float64) on float64 copies of
the inputs (``f`` must then compute in the input's dtype, not cast to float32), or by calling
``reference_f``, a NumPy float64 twin. The step is chosen from machine epsilon: central
differences have a truncation error ~ h^2 f''' / 6 and a rounding error ~ eps |f| / h, which
balance at h ~ eps^(1/3) (times the element's scale), leaving an error ~ eps^(2/3) ~ 4e-11.

The analytic gradient is ``jax.grad(f)`` in the inputs' own dtype (float32 usually); the error
of element i is |analytic_i - numeric_i| / max(max_j |numeric_j|, SCALE_FLOOR): one scale for
the whole gradient, so an element near zero is not judged on its own relative error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics, runtime

EPS64 = float(np.finfo(np.float64).eps)
# Central differences in float64 are accurate to ~eps^(2/3) ~ 4e-11 of the function's scale
# for smooth functions of unit-sized third derivatives; 1e-7 leaves a factor ~2,500 for
# larger curvature, and is far below any float32 gradient's tolerance (1e-5).
FD_TOLERANCE = 1e-7
# Below this the gradient is zero to the rounding of a float32 loss near 1: judge it
# absolutely (an exactly-zero gradient checked relatively would fail on float32 noise).
SCALE_FLOOR = 1e-6
CHUNK = 64  # perturbed inputs evaluated per batch: bounds memory at 2 * 64 copies of x


def central_step(x_N: np.ndarray, eps: float = EPS64) -> np.ndarray:
    """The central-difference step for each element: eps^(1/3) * max(1, |x_i|), made exact.

    ``(x + h) - x`` is the step the arithmetic really takes; using it in the denominator
    removes the rounding of x + h from the error.
    """
    x_N = np.asarray(x_N, dtype=np.float64)
    h_N = np.cbrt(eps) * np.maximum(1.0, np.abs(x_N))
    return (x_N + h_N) - x_N


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """jax.grad vs float64 central differences, flattened over every leaf (N elements).

    ``analytic_N``, ``numeric_N``, ``step_N``, ``error_N``: float64; ``names``: the leaf of
    each element ("['w'][2, 1]"); ``scale``: the error's denominator; ``tolerance``: the bound
    ``passed`` compares the worst error with.
    """

    analytic_N: np.ndarray
    numeric_N: np.ndarray
    step_N: np.ndarray
    error_N: np.ndarray
    names: tuple[str, ...]
    scale: float
    tolerance: float

    @property
    def worst(self) -> float:
        """The largest error (inf when the analytic gradient is not finite; 0 for no element)."""
        return float(np.max(self.error_N, initial=0.0))

    @property
    def worst_index(self) -> int:
        return int(np.argmax(self.error_N)) if self.error_N.size else -1

    @property
    def passed(self) -> bool:
        return bool(self.worst <= self.tolerance)  # NaN fails

    def summary(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        where = f" at {self.names[self.worst_index]}" if self.error_N.size else ""
        return (
            f"gradient check {verdict}: worst error {self.worst:.3g}{where} "
            f"(tolerance {self.tolerance:.1g}, scale {self.scale:.3g}, {self.error_N.size} "
            "elements)"
        )

    def rows(self, limit: int = 10) -> list[dict]:
        """The ``limit`` worst elements, worst first: name, analytic, numeric, error."""
        order = np.argsort(-self.error_N, kind="stable")[:limit]
        return [
            {
                "element": self.names[i],
                "jax.grad": float(self.analytic_N[i]),
                "finite difference (float64)": float(self.numeric_N[i]),
                "error": float(self.error_N[i]),
            }
            for i in order
        ]


def _leaf_names(tree) -> list[str]:
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        prefix = jax.tree_util.keystr(path)
        shape = np.shape(leaf)
        for index in np.ndindex(*shape):
            names.append(f"{prefix}[{', '.join(map(str, index))}]" if shape else prefix or "x")
    return names


def default_tolerance(x) -> float:
    """The bound for a gradient computed in the inputs' dtype: the least precise leaf's
    ``numerics.tolerance``, never tighter than the finite differences' own FD_TOLERANCE."""
    bounds = [FD_TOLERANCE]
    for leaf in jax.tree.leaves(x):
        # judged on the backend the leaf lives on: float64 lives on the host's CPU beside a TPU
        backend = next(iter(leaf.devices())).platform if isinstance(leaf, jax.Array) else None
        name = np.dtype(jnp.asarray(leaf).dtype).name
        bounds.append(numerics.tolerance(name, backend=backend))
    return max(bounds)


def numeric_gradient(
    f: Callable, x, reference_f: Callable | None = None, step_N: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(gradient_N, step_N): float64 central differences of ``f`` (or ``reference_f``) at x."""
    leaves, treedef = jax.tree.flatten(x)
    shapes = [np.shape(leaf) for leaf in leaves]
    sizes = [int(np.prod(s)) for s in shapes]
    x_N = np.concatenate([np.asarray(leaf, np.float64).ravel() for leaf in leaves] or [[]])
    h_N = central_step(x_N) if step_N is None else np.asarray(step_N, np.float64)
    if h_N.shape != x_N.shape or not np.all(h_N > 0):
        raise ValueError(f"steps must be positive, one per element ({x_N.size}), got {h_N.shape}")
    splits = np.cumsum(sizes)[:-1]

    def unflatten(flat, xp):
        parts = xp.split(flat, splits) if len(sizes) > 1 else [flat]
        return jax.tree.unflatten(
            treedef, [p.reshape(s) for p, s in zip(parts, shapes, strict=True)]
        )

    if reference_f is not None:
        gradient = np.empty_like(x_N)
        for i in range(x_N.size):
            up, down = x_N.copy(), x_N.copy()
            up[i] += h_N[i]
            down[i] -= h_N[i]
            f_up = float(np.asarray(reference_f(unflatten(up, np)), np.float64))
            f_down = float(np.asarray(reference_f(unflatten(down, np)), np.float64))
            gradient[i] = (f_up - f_down) / (2 * h_N[i])
        return gradient, h_N

    with runtime.enable_float64():
        x64_N, h64_N = jnp.asarray(x_N), jnp.asarray(h_N)

        def flat_f(flat):
            return f(unflatten(flat, jnp))

        out = jax.eval_shape(flat_f, x64_N)
        if out.shape != () or out.dtype != jnp.float64:
            raise ValueError(
                f"f returns {out.dtype}{list(out.shape)} for float64 inputs: the numeric "
                "gradient needs a scalar computed in float64 (f casts to a lower precision or "
                "returns more than one number); pass reference_f, a NumPy float64 twin of f"
            )

        def difference(i):
            e = jnp.zeros_like(x64_N).at[i].set(h64_N[i])
            return (flat_f(x64_N + e) - flat_f(x64_N - e)) / (2 * h64_N[i])

        indices = jnp.arange(x_N.size)
        gradient = jax.jit(lambda idx: jax.lax.map(difference, idx, batch_size=CHUNK))(indices)
        return np.asarray(gradient, np.float64), h_N


def check_gradient(
    f: Callable,
    x,
    *,
    tolerance: float | None = None,
    reference_f: Callable | None = None,
    step_N: np.ndarray | None = None,
) -> GradientCheck:
    """Compare ``jax.grad(f)(x)`` with float64 central differences of f at x.

    ``f`` maps x (an array or a pytree of float arrays) to a scalar; ``tolerance`` defaults
    to ``default_tolerance(x)``; ``reference_f`` (optional) is a NumPy float64 version of f
    used for the finite differences; ``step_N`` overrides the epsilon-based steps.
    """
    leaves = jax.tree.leaves(x)
    if not leaves:
        raise ValueError("check_gradient needs at least one array to differentiate")
    for leaf in leaves:
        if not jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating):
            raise ValueError(
                f"gradients need float inputs, got a {jnp.asarray(leaf).dtype} leaf: "
                "integers have no derivative"
            )
    analytic = jax.grad(f)(x)
    analytic_N = np.concatenate(
        [numerics.as_float64(leaf).ravel() for leaf in jax.tree.leaves(analytic)]
    )
    numeric_N, h_N = numeric_gradient(f, x, reference_f, step_N)
    scale = max(float(np.max(np.abs(numeric_N), initial=0.0)), SCALE_FLOOR)
    with np.errstate(invalid="ignore"):
        error_N = np.abs(analytic_N - numeric_N) / scale
    error_N = np.where(np.isfinite(error_N), error_N, np.inf)
    return GradientCheck(
        analytic_N=analytic_N,
        numeric_N=numeric_N,
        step_N=h_N,
        error_N=error_N,
        names=tuple(_leaf_names(x)),
        scale=scale,
        tolerance=default_tolerance(x) if tolerance is None else float(tolerance),
    )
