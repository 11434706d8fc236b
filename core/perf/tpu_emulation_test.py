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
    # on the CPU's devices everywhere: the reference is float32 on the CPU (on a chip's TPU it
    # would itself be one bfloat16 pass per dot, and "close" would be measured against that)
    w, x = jax.device_put((w, x), jax.devices("cpu")[0])

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


def test_an_emulated_function_compiles_once_per_shape_and_precision():
    """A training loop calls one emulated step many times: a call with the same shapes and
    the same precision in force compiles nothing (a jit built on every call compiled every
    call), and a new precision still compiles its own program, equal to a fresh emulation's."""
    from core.nn.chunked import counting_compiles

    x, w = _operands(8, 32, 4, seed=3)
    matmul = tpu_emulation.emulate(lambda a, b: jnp.tanh(a @ b))
    shifted = x + 1.0
    first = matmul(x, w)
    with counting_compiles() as again:
        second = matmul(shifted, w)
    assert again == []
    fresh = tpu_emulation.emulate(lambda a, b: jnp.tanh(a @ b))(x, w)
    np.testing.assert_array_equal(first, fresh)
    want = jnp.tanh(precision.mxu_matmul(shifted, w, "DEFAULT"))
    assert numerics.scaled_max_error(second, want) <= 1e-6
    with jax.default_matmul_precision("highest"), counting_compiles() as pinned:
        highest = matmul(x, w)
    assert pinned != []
    want = jnp.tanh(precision.mxu_matmul(x, w, "HIGHEST"))
    assert numerics.scaled_max_error(highest, want) <= 1e-6


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


def _conv_same_float64(x_NHWI, w_HWIO):
    """A 3x3 'SAME' convolution (cross-correlation, NHWC x HWIO) in NumPy float64."""
    x, w = np.float64(x_NHWI), np.float64(w_HWIO)
    height, width = x.shape[1:3]
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((x.shape[0], height, width, w.shape[3]))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, dy : dy + height, dx : dx + width]
            out += np.einsum("nhwi,io->nhwo", window, w[dy, dx])
    return out


@pytest.mark.parametrize("level", ["DEFAULT", "HIGHEST"])
def test_a_convolution_is_emulated_at_its_precision(level):
    kx, kw = jax.random.split(jax.random.key(1))
    x, w = jax.random.normal(kx, (2, 6, 6, 8)), jax.random.normal(kw, (3, 3, 8, 8))

    def conv(a, b):
        return jax.lax.conv_general_dilated(
            a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    with jax.default_matmul_precision(level.lower()):
        got = tpu_emulation.emulate(conv)(x, w)
    bfloat16 = lambda a: np.float64(a.astype(jnp.bfloat16).astype(jnp.float32))  # noqa: E731
    one_pass = _conv_same_float64(bfloat16(x), bfloat16(w))  # exact products, float32 sums
    exact = _conv_same_float64(x, w)
    if level == "DEFAULT":  # a one-pass product rounds each operand to bfloat16
        assert numerics.scaled_max_error(got, one_pass) <= 1e-6
        assert numerics.scaled_max_error(got, exact) > 1e-4
    else:
        assert numerics.scaled_max_error(got, exact) <= 1e-6
    pinned = tpu_emulation.emulate(
        lambda a, b: jax.lax.conv_general_dilated(
            a,
            b,
            (1, 1),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            precision=jax.lax.Precision.HIGHEST,
        )
    )(x, w)
    assert numerics.scaled_max_error(pinned, exact) <= 1e-6  # its own precision wins
