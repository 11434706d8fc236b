"""Exercises of the lesson "Batch a function with vmap": the shape vmap returns for given
in_axes/out_axes, and pairwise distances batched with vmap."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.transformations._shared import PHASE, _as_float64, _scaled_error


def _insert(shape: tuple[int, ...], axis: int | None, size: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(shape)
    return (*shape[:axis], size, *shape[axis:])


class OutputShape(PredictItem):
    """vmap drops the mapped axis of each argument, runs f, and puts the batch at out_axes."""

    id = "transformations.vmap.output_shape"
    phase = PHASE
    lesson = "vmap"
    title = "The shape vmap returns"
    answer_type = "shape"
    hints = (
        "Find the batch size first: it is the size of the axis in_axes names in any mapped "
        "argument (None: shared, no batch axis). Then look at one example: which shapes does "
        "f see?",
        "Each example of M is M with its mapped axis removed, (R, C); f returns M @ v + b, one "
        "vector of R entries. vmap stacks the B results along the axis out_axes names.",
        "One example's output is (R,); out_axes=0 gives (B, R), out_axes=1 gives (R, B).",
    )

    def params(self, generator):
        # three different sizes (a wrong axis shows), none of them the app's defaults (4, 3, 5)
        batch, rows, cols = (int(s) for s in generator.choice(np.arange(6, 13), 3, replace=False))
        return {
            "batch": batch,
            "rows": rows,
            "cols": cols,
            "in_axes": (
                int(generator.integers(3)),
                int(generator.integers(2)),
                (None, 0, 1)[int(generator.integers(3))],
            ),
            "out_axes": int(generator.integers(2)),
        }

    @staticmethod
    def shapes(params) -> tuple[tuple[int, ...], ...]:
        """The data shapes of M, v and b: the batch inserted where in_axes says."""
        a_m, a_v, a_b = params["in_axes"]
        batch, rows, cols = params["batch"], params["rows"], params["cols"]
        return (
            _insert((rows, cols), a_m, batch),
            _insert((cols,), a_v, batch),
            _insert((rows,), a_b, batch),
        )

    def prompt(self, params) -> str:
        m, v, b = self.shapes(params)
        return (
            "The lesson's per-example function, written for one matrix and one vector:\n\n"
            "```python\n"
            "def f(M, v, b):  # M (rows, cols), v (cols,), b (rows,)\n"
            "    return M @ v + b\n\n"
            f"M = jnp.zeros({m}); v = jnp.zeros({v}); b = jnp.zeros({b})\n"
            f"jax.vmap(f, in_axes={params['in_axes']}, out_axes={params['out_axes']})"
            "(M, v, b).shape  # ?\n"
            "```\n\n"
            "**Predict the shape**; the lesson's library then runs this vmap."
        )

    def live(self, params):
        import jax
        import jax.numpy as jnp

        from core.lessons.transformations import vmap

        shapes = self.shapes(params)
        in_axes, out_axes = params["in_axes"], params["out_axes"]
        if reason := vmap.problem("affine", shapes, in_axes, out_axes):
            raise ValueError(f"a seed drew a vmap that cannot work: {reason}")
        structs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
        return tuple(jax.eval_shape(vmap.batched("affine", in_axes, out_axes), *structs).shape)

    def derive(self, params):
        batch, rows, out_axes = params["batch"], params["rows"], params["out_axes"]
        m, _v, _b = self.shapes(params)
        a_m, a_v, a_b = params["in_axes"]
        value = _insert((rows,), out_axes, batch)
        shared = "b is shared by every example" if a_b is None else f"b loses axis {a_b}"
        return value, (
            f"in_axes={params['in_axes']}: the batch is axis {a_m} of M, of size {m[a_m]} = B. "
            f"Each example sees M without that axis, ({rows}, {params['cols']}); v loses axis "
            f"{a_v}; {shared}. So f returns M @ v + b of shape ({rows},), "
            f"and out_axes={out_axes} puts the batch of {batch} at position {out_axes}: "
            f"**{value}**. vmap checks only the sizes: had B equalled another size, a wrong "
            "in_axes would have run and returned the wrong numbers."
        )

    def wrong(self, params, expected):
        batch, rows, out_axes = params["batch"], params["rows"], params["out_axes"]
        m, _v, _b = self.shapes(params)
        found = {
            "one example's output (the batch axis forgotten)": (rows,),
            "out_axes the other way round": tuple(reversed(expected)),
        }
        if out_axes != 0:
            found["out_axes ignored: the batch first"] = (batch, rows)
        if params["in_axes"][0] != 0:
            found["in_axes ignored: the batch read from M's axis 0"] = _insert(
                (rows,), out_axes, m[0]
            )
        return found


_DISTANCE_STUB = '''\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    """Euclidean distances from every point of every batch to every shared point.

    x_BNK: (B, N, K) float32, B batches of N points in K dimensions; y_MK: (M, K) float32,
    M points shared by every batch. Returns (B, N, M): out[b, i, j] = |x[b, i] - y[j]|.
    Write the distance of ONE pair of points and batch it with jax.vmap (no Python loops).
    """
    raise NotImplementedError
'''

_DISTANCE_TRANSPOSED = """\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    def dist(a_K, b_K):
        return jnp.sqrt(jnp.sum((a_K - b_K) ** 2))

    over_x = jax.vmap(dist, in_axes=(0, None))  # (N,) for one y
    table = jax.vmap(over_x, in_axes=(None, 0))  # (M, N): the y loop outside
    return jax.vmap(table, in_axes=(0, None))(x_BNK, y_MK)
"""

_DISTANCE_SQUARED = """\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    def dist(a_K, b_K):
        return jnp.sum((a_K - b_K) ** 2)

    row = jax.vmap(dist, in_axes=(None, 0))
    table = jax.vmap(row, in_axes=(0, None))
    return jax.vmap(table, in_axes=(0, None))(x_BNK, y_MK)
"""

_DISTANCE_EXPANDED = """\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    def table(x_NK, y_MK):  # |a - b|² = |a|² + |b|² - 2 a.b, one matmul
        squared = (
            jnp.sum(x_NK**2, axis=1)[:, None] + jnp.sum(y_MK**2, axis=1)[None, :]
            - 2 * x_NK @ y_MK.T
        )
        return jnp.sqrt(jnp.maximum(squared, 0.0))

    return jax.vmap(table, in_axes=(0, None))(x_BNK, y_MK)
"""

_DISTANCE_Y_BATCHED = """\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    def dist(a_K, b_K):
        return jnp.sqrt(jnp.sum((a_K - b_K) ** 2))

    row = jax.vmap(dist, in_axes=(None, 0))
    table = jax.vmap(row, in_axes=(0, None))
    return jax.vmap(table, in_axes=(0, 0))(x_BNK, y_MK)
"""

_DISTANCE_L1 = """\
import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    def dist(a_K, b_K):
        return jnp.sum(jnp.abs(a_K - b_K))

    row = jax.vmap(dist, in_axes=(None, 0))
    table = jax.vmap(row, in_axes=(0, None))
    return jax.vmap(table, in_axes=(0, None))(x_BNK, y_MK)
"""

# float32 differences of float32 inputs, squared and summed over K <= 8: a few ulps of each
# distance. Far from the origin x - y stays exact (Sterbenz), |x|² + |y|² - 2x.y does not.
DISTANCE_TOLERANCE = 1e-5


def pairwise_distances_reference(x_BNK, y_MK) -> np.ndarray:
    """The loop vmap stands for, in float64: every batch, every x point, every y point."""
    x, y = np.asarray(x_BNK, np.float64), np.asarray(y_MK, np.float64)
    out = np.empty((x.shape[0], x.shape[1], y.shape[0]))
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            for j in range(y.shape[0]):
                out[b, i, j] = math.sqrt(
                    sum((x[b, i, k] - y[j, k]) ** 2 for k in range(x.shape[2]))
                )
    return out


class PairwiseDistances(CodeItem):
    id = "transformations.vmap.pairwise_distances"
    phase = PHASE
    lesson = "vmap"
    title = "Pairwise distances, batched with vmap"
    function_name = "pairwise_distances"
    stub = _DISTANCE_STUB
    solution_module = "core.exercises.solutions.pairwise_distances"
    hints = (
        "Start from dist(a_K, b_K) for one pair. Three loops are hiding in the output "
        "(b, i, j): each becomes one jax.vmap, and in_axes says which argument each loop "
        "walks over.",
        "Innermost: over the points of y, a fixed: jax.vmap(dist, in_axes=(None, 0)) -> (M,). "
        "Then over the points of x, y fixed: in_axes=(0, None) -> (N, M). Outermost: over the "
        "batch of x; y is shared, so its entry is None.",
        "Keep the difference inside: jnp.sqrt(jnp.sum((a_K - b_K) ** 2)). The expansion "
        "|a|² + |b|² − 2a·b cancels in float32 when the points are far from the origin.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `pairwise_distances(x_BNK, y_MK)` with `jax.vmap`. The hidden tests call "
            "it on four sets of float32 points (N ≠ M), one of them far from the origin "
            "(coordinates around ±1000, distances of a few units) and one where a point of y "
            "is also a point of x (distance exactly 0), and compare every distance with a "
            f"float64 triple loop (error at most {DISTANCE_TOLERANCE:g} of the largest distance, "
            "or absolute below 1)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "the loops nested the other way: (B, M, N)": _DISTANCE_TRANSPOSED,
            "squared distances (no square root)": _DISTANCE_SQUARED,
            "|x|² + |y|² − 2 x·y in float32 (cancels far from the origin)": _DISTANCE_EXPANDED,
            "y mapped with the batch (in_axes 0, not None)": _DISTANCE_Y_BATCHED,
            "the sum of |differences| (L1), not the Euclidean length": _DISTANCE_L1,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)

        def points(*shape, centre=0.0):
            return (centre + generator.normal(size=shape)).astype(np.float32)

        b, n = int(generator.integers(2, 4)), int(generator.integers(3, 6))
        small = (points(b, n, 2), points(n + int(generator.integers(1, 3)), 2))
        typical = (points(4, 8, 5), points(6, 5))
        centre = generator.choice([-1.0, 1.0], 3) * generator.uniform(800.0, 1200.0, 3)
        far = (points(2, 5, 3, centre=centre), points(7, 3, centre=centre))
        x_shared, y_shared = points(3, 4, 8), points(5, 8)
        y_shared[int(generator.integers(5))] = x_shared[1, 2]
        cases = [
            ("small", *small),
            ("typical", *typical),
            ("far from the origin", *far),
            ("a point in both (distance 0)", x_shared, y_shared),
        ]
        return [self._compare(function, x, y, name) for name, x, y in cases]

    def _compare(self, function, x, y, name) -> HiddenTest:
        label = f"{name}: B={x.shape[0]}, N={x.shape[1]}, M={y.shape[0]}, K={x.shape[2]}"
        expected = pairwise_distances_reference(x, y)
        got, why = _as_float64(function(x, y), "the result")
        if got is None:
            return HiddenTest(label, False, why)
        if got.shape != expected.shape:
            return HiddenTest(
                label, False, f"returned shape {got.shape}; expected {expected.shape}"
            )
        if not np.isfinite(got).all():
            return HiddenTest(label, False, "returned a value that is not finite")
        error = _scaled_error(got, expected)
        return HiddenTest(
            label,
            error <= DISTANCE_TOLERANCE,
            f"largest error {error:.1e} of the largest distance {expected.max():.4g} "
            f"(tolerance {DISTANCE_TOLERANCE:g})",
        )
