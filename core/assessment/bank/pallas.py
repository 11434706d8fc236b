"""The assessment item of the phase "Pallas kernels".

- ``pallas.blocked_kernel`` (code): a blocked matmul on a 3-D Pallas grid (interpret mode).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item

_PALLAS_STUB = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def blocked_matmul(x_MK, y_KN, block_m, block_n, block_k):
    """out_MN (M, N) float32 = x_MK (M, K) @ y_KN (K, N), float32, as one pl.pallas_call on
    the grid (M / block_m, N / block_n, K / block_k): program (i, j, k) reads block (i, k) of
    x (block_m, block_k) and block (k, j) of y (block_k, block_n) and accumulates their
    product into block (i, j) of the output, over k. Use interpret=True (this runs on CPU).
    A block size that does not divide its dimension must raise ValueError.
    """
    raise NotImplementedError
'''


class BlockedKernel(CodeItem):
    id = "pallas.blocked_kernel"
    phase = "Pallas kernels"
    lesson = "pallas_grids"
    title = "A blocked matmul on a 3-D Pallas grid"
    function_name = "blocked_matmul"
    stub = _PALLAS_STUB
    solution_module = "core.assessment.solutions.pallas_kernel"

    def prompt(self, seed):
        return (
            "Complete `blocked_matmul`: a Pallas kernel and its `pallas_call` with a 3-D grid "
            "(i over row blocks, j over column blocks, k over the contraction), BlockSpecs whose "
            "index maps pick the right block of x, y and the output for each program, and an "
            "output block that accumulates over k (zeroed at the first k step). The hidden tests "
            "run two seeded shapes and block sizes against float64 NumPy, and one block size "
            "that does not divide its dimension (it must raise ValueError)."
        )

    def planted_wrong(self):
        solution = self.reference_source()
        return {
            "output index map with swapped grid indices (blocks land transposed)": (
                solution.replace("lambda i, j, kk: (i, j)", "lambda i, j, kk: (j, i)")
            ),
            "output overwritten on every k step instead of accumulated": solution.replace(
                "o_ref[...] += jnp.dot", "o_ref[...] = jnp.dot"
            ),
            "k blocks taken from the wrong operand axis (y block (j, k))": solution.replace(
                "lambda i, j, kk: (kk, j)", "lambda i, j, kk: (j, kk)"
            ),
        }

    @functools.cache  # noqa: B019 (module-level singleton)
    def cases(self, seed: int) -> list[dict]:
        from core.assessment.items import rng

        generator = rng(self.id, seed)
        block = int(generator.choice([8, 16]))
        square = {  # M = N and block_m = block_n: swapped output blocks still fit the array
            "grid": (2, 2, int(generator.integers(2, 4))),
            "blocks": (block, block, int(generator.choice([8, 16]))),
        }
        blocks = tuple(int(b) for b in generator.choice([8, 16], size=3))
        other = {
            "grid": (int(generator.integers(2, 4)), int(generator.integers(1, 3)), 2),
            "blocks": blocks,
        }
        cases = []
        for case in (square, other):
            (gm, gn, gk), (bm, bn, bk) = case["grid"], case["blocks"]
            m, n, k = gm * bm, gn * bn, gk * bk
            cases.append(
                {
                    "x": generator.normal(size=(m, k)).astype(np.float32),
                    "y": generator.normal(size=(k, n)).astype(np.float32),
                    "blocks": (bm, bn, bk),
                }
            )
        return cases

    def hidden_tests(self, function, seed):
        tests = []
        for case in self.cases(seed):
            x, y, (bm, bn, bk) = case["x"], case["y"], case["blocks"]
            (m, k), n = x.shape, y.shape[1]
            name = f"x ({m}, {k}) @ y ({k}, {n}), blocks {bm}x{bn}, k block {bk}"
            out = np.asarray(function(jax.numpy.asarray(x), jax.numpy.asarray(y), bm, bn, bk))
            expected = x.astype(np.float64) @ y.astype(np.float64)
            if out.shape != expected.shape:
                tests.append(HiddenTest(name, False, f"shape {out.shape}, expected {(m, n)}"))
                continue
            error = float(np.max(np.abs(out - expected)))
            bound = 1e-5 * (float(np.max(np.abs(expected))) + 1.0)
            wrong_blocks = sorted(
                {
                    (int(r) // bm, int(c) // bn)
                    for r, c in zip(*np.nonzero(np.abs(out - expected) > bound), strict=True)
                }
            )
            where = f"; wrong output blocks (i, j): {wrong_blocks[:6]}" if wrong_blocks else ""
            tests.append(
                HiddenTest(
                    f"{name} vs float64 NumPy",
                    error <= bound,
                    f"max |error| {error:.3g} (tolerance {bound:.2g}){where}",
                )
            )
        first = self.cases(seed)[0]
        x, y, (bm, bn, bk) = first["x"], first["y"], first["blocks"]
        bad = bk + 8 if x.shape[1] % (bk + 8) else bk + 16  # not a divisor of K
        name = f"block_k={bad} with K={x.shape[1]} raises ValueError"
        try:
            function(jax.numpy.asarray(x), jax.numpy.asarray(y), bm, bn, bad)
        except ValueError as error:
            tests.append(HiddenTest(name, True, f"ValueError: {error}"))
        else:
            tests.append(
                HiddenTest(name, False, "it returned a result: check that each block divides")
            )
        return tests


ITEMS: tuple[Item, ...] = (BlockedKernel(),)
