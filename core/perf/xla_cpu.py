"""A known XLA:CPU miscompile (jaxlib 0.10.2), the narrowest guard against it, and its cost.

The bug: XLA:CPU's YNNPACK "reduce" fusion returns wrong sums for a multiply-reduce over a
broadcast operand fused with an add, e.g.

    jit(lambda ct, x: ct + jnp.sum(x[None] * ct, axis=2)[..., None])   # ct f32 (256, 16, 16)

is off by ~20 (``MISCOMPILED_EXAMPLE``). The same pattern appears in ``jit(jax.jacrev(f))``
of small attention-like functions (a vmapped backward pass), which is why
core.lm.attention.jacobian maps one VJP per row instead of calling jacrev.

The guards, widest to narrowest, as they play out on the capstone's train step:

- ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` (no YNN fusion anywhere): correct,
  but the train step runs much slower, because the matmuls lose their YNN kernels (the
  capstone's ``bench`` times it).
- ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-reduce`` (drop only the reduce type):
  also fixes the example, and is just as slow on the train step.
- ``jax.jit(f, compiler_options=WITHOUT_YNN_FUSION)`` (``jit_without_ynn_fusion``): no YNN
  fusion in THAT program only. The rest of the process keeps the fast default. Use it for a
  program of the risky shape (a jacrev, a vmapped backward) and nowhere else.

core/perf/xla_cpu_test.py pins the example: the guarded program must be right on every CPU,
and the test says when a jaxlib upgrade has fixed the default (then this guard can go).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

YNN_FUSION_OPTION = "xla_cpu_experimental_ynn_fusion_type"
WITHOUT_YNN_FUSION = {YNN_FUSION_OPTION: ""}  # an empty list of fusion types: none


def jit_without_ynn_fusion(fn: Callable, **jit_kwargs) -> Callable:
    """jax.jit(fn) compiled without YNN fusions on the CPU backend (elsewhere: plain jit)."""
    options = dict(jit_kwargs.pop("compiler_options", None) or {})
    if jax.default_backend() == "cpu":
        options.update(WITHOUT_YNN_FUSION)
    return jax.jit(fn, compiler_options=options or None, **jit_kwargs)


def miscompiled_example(ct_BIJ, x_IJ):
    """ct + sum_j x[i, j] * ct[b, i, j], broadcast back over j: the pattern XLA:CPU's YNN
    reduce fusion gets wrong. (B, I, J), (I, J) -> (B, I, J)."""
    return ct_BIJ + jnp.sum(x_IJ[None] * ct_BIJ, axis=2)[..., None]


def example_inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The shapes that reproduce it: ct (256, 16, 16), x (16, 16), standard normal f32."""
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((256, 16, 16)).astype(np.float32),
        rng.standard_normal((16, 16)).astype(np.float32),
    )


def example_reference(ct_BIJ, x_IJ) -> np.ndarray:
    """The same function in NumPy float64."""
    ct, x = np.asarray(ct_BIJ, np.float64), np.asarray(x_IJ, np.float64)
    return ct + np.sum(x[None] * ct, axis=2)[..., None]


def uses_ynn_fusion(compiled_text: str) -> bool:
    """Whether a compiled CPU program (``.compile().as_text()``) holds a YNN fusion."""
    return "__ynn_fusion" in compiled_text
