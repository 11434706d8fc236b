import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.perf import precision, tpu_emulation


def _operands(m=16, k=64, n=8, seed=0):
    kx, kw = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (m, k)), jax.random.normal(kw, (k, n))


@pytest.mark.parametrize("level", ["DEFAULT", "HIGH", "HIGHEST"])
@pytest.mark.parametrize("shape", [(16, 64, 8), (5, 300, 3)])
def test_a_matmul_equals_the_mxu_emulation_at_the_precision_in_force(level, shape):
    x, w = _operands(*shape)
    with jax.default_matmul_precision(level.lower()):
        got = tpu_emulation.emulate(lambda a, b: a @ b)(x, w)
    # the same bfloat16 products; float32 accumulation in another order (a few units of 2^-24)
    assert numerics.scaled_max_error(got, precision.mxu_matmul(x, w, level)) <= 1e-6
    error = numerics.scaled_max_error(got, np.float64(x) @ np.float64(w))
    # independent of the emulator: one pass errs like bfloat16 operands, six like float32
    assert (error > 1e-4) if level == "DEFAULT" else (error < 1e-4)


def test_a_matmul_keeps_its_own_precision_and_others_dtypes_are_untouched():
    x, w = _operands()
    pinned = tpu_emulation.emulate(
        lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
    )(x, w)
    assert numerics.scaled_max_error(pinned, precision.mxu_matmul(x, w, "HIGHEST")) <= 1e-6
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    np.testing.assert_array_equal(tpu_emulation.emulate(jnp.matmul)(xb, wb), xb @ wb)


def test_batched_dots_gradients_and_control_flow_are_emulated():
    x, w = _operands(8, 32, 32)
    w = w / jnp.sqrt(32.0)  # unit gain, so float32 rounding is not amplified by the loop

    def program(w, x):
        y = jnp.einsum("bk,kn->bn", x, w)
        y = jax.lax.fori_loop(0, 2, lambda i, h: jnp.tanh(h @ w), y)
        y = jax.lax.cond(y.sum() > 0, lambda: y @ w, lambda: -(y @ w))
        return jax.lax.scan(lambda c, row: (c + row @ w, None), jnp.zeros(32), y)[0].sum()

    by_hand = jax.jit(jax.grad(program))
    reference = by_hand(w, x)
    with jax.default_matmul_precision("highest"):
        close = tpu_emulation.emulate(by_hand)(w, x)
    far = tpu_emulation.emulate(by_hand)(w, x)
    assert numerics.scaled_max_error(close, reference) < 1e-5
    assert numerics.scaled_max_error(far, reference) > 1e-4  # every dot went through one pass


def test_matrix_vector_products_are_emulated_too():
    # XLA:CPU has no bfloat16 x bfloat16 -> float32 kernel for these; a TPU may run them in
    # float32 (jax#16349): emulating them in bfloat16 passes is the cautious side
    x, w = _operands(16, 64, 1)
    got = tpu_emulation.emulate(lambda a, v: a @ v)(x, w[:, 0])
    want = precision.mxu_matmul(x, w, "DEFAULT")[:, 0]
    assert numerics.scaled_max_error(got, want) <= 1e-6


def test_precision_names():
    name = tpu_emulation.precision_name
    assert name(None) == "DEFAULT" and name(None, "HIGH") == "HIGH"
    assert name((jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGHEST)) == "HIGHEST"
    with pytest.raises(ValueError, match="no MXU emulation"):
        name("ANY_F8_ANY_F8_F32")
