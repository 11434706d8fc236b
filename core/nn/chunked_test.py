import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.nn import chunked


def _momentum_step(carry, index, x_ND, y_N, learning_rate, *, momentum):
    """One heavy-ball step on least squares; the index feeds a decaying rate."""
    w_D, v_D = carry
    rate = learning_rate / (1.0 + 0.01 * index.astype(jnp.float32))
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x_ND @ w - y_N) ** 2))(w_D)
    v_D = momentum * v_D + grad
    return (w_D - rate * v_D, v_D), {"loss": loss, "w": w_D}


def _adam_step(carry, batch, learning_rate):
    """One Adam step on a batch {"x": (B, D), "y": (B,)}."""
    w_D, state = carry
    tx = optax.adam(learning_rate)
    loss, grads = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(w_D)
    updates, state = tx.update(grads, state, w_D)
    return (optax.apply_updates(w_D, updates), state), loss


_momentum = chunked.ChunkedScan(_momentum_step, chunk=10)
_adam = chunked.ChunkedScan(_adam_step, chunk=10)


def _problem(seed=0, n=32, d=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x, (x @ rng.normal(size=d)).astype(np.float32)


def _assert_bitwise(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("steps", [1, 7, 10, 23, 40])  # within, at, across and past chunks
def test_chunks_equal_one_scan_bitwise_with_indices(steps):
    x, y = _problem()
    carry = (np.zeros(5, np.float32), np.zeros(5, np.float32))
    lr = np.float32(0.05)
    got = _momentum(carry, x, y, lr, steps=steps, momentum=0.9)
    want = chunked.scan_reference(_momentum_step, carry, x, y, lr, steps=steps, momentum=0.9)
    _assert_bitwise(got, want)
    assert got[1]["loss"].shape == (steps,) and isinstance(got[1]["loss"], np.ndarray)
    # and the scan is the plain Python loop of the same updates (float32, NumPy float64)
    w, v, losses = np.zeros(5), np.zeros(5), []
    for s in range(steps):
        residual = x.astype(np.float64) @ w - y
        losses.append(np.mean(residual**2))
        v = 0.9 * v + 2 * x.T.astype(np.float64) @ residual / len(y)
        w = w - 0.05 / (1 + 0.01 * s) * v
    np.testing.assert_allclose(got[1]["loss"], losses, rtol=1e-4)


@pytest.mark.parametrize("steps", [4, 10, 23])
def test_chunks_equal_one_scan_bitwise_with_batches(steps):
    rng = np.random.default_rng(1)
    xs = {"x": rng.normal(size=(steps, 8, 3)).astype(np.float32)}
    xs["y"] = xs["x"] @ np.array([1.0, -2.0, 0.5], np.float32)
    w = np.zeros(3, np.float32)
    carry = (w, optax.adam(0.1).init(w))
    got = _adam(carry, np.float32(0.1), xs=xs)
    want = chunked.scan_reference(_adam_step, carry, np.float32(0.1), xs=xs)
    _assert_bitwise(got, want)


def test_a_second_step_count_compiles_nothing_new():
    runner = chunked.ChunkedScan(_momentum_step, chunk=10)
    x, y = _problem(2)
    carry = (np.zeros(5, np.float32), np.zeros(5, np.float32))
    with chunked.counting_compiles() as first:
        runner(carry, x, y, np.float32(0.1), steps=20, momentum=0.5)
    assert runner._cache_size() == 1 and len(first) >= 1
    with chunked.counting_compiles() as second:
        runner(carry, x, y, np.float32(0.2), steps=50, momentum=0.5)  # new count, new rate
    assert second == [] and runner._cache_size() == 1
    with chunked.counting_compiles() as remainder:
        runner(carry, x, y, np.float32(0.2), steps=23, momentum=0.5)
        runner(carry, x, y, np.float32(0.2), steps=33, momentum=0.5)
    assert len(remainder) == 1 and runner._cache_size() == 2  # one program for chunks of 3
    runner(carry, x, y, np.float32(0.2), steps=20, momentum=0.7)  # a static argument compiles
    assert runner._cache_size() == 3


def test_a_single_scan_compiles_per_step_count():
    # the control: what the chunks avoid
    x, y = _problem(3)
    carry = (np.zeros(5, np.float32), np.zeros(5, np.float32))
    with chunked.counting_compiles() as names:
        chunked.scan_reference(_momentum_step, carry, x, y, np.float32(0.1), steps=20, momentum=0.5)
        chunked.scan_reference(_momentum_step, carry, x, y, np.float32(0.1), steps=30, momentum=0.5)
    assert len(names) >= 2


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="chunk"):
        chunked.ChunkedScan(_momentum_step, chunk=0)
    x, y = _problem()
    carry = (np.zeros(5, np.float32), np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="steps"):
        _momentum(carry, x, y, np.float32(0.1), steps=0, momentum=0.9)
    with pytest.raises(ValueError, match="entries"):
        _adam((np.zeros(3, np.float32), None), np.float32(0.1), steps=5, xs={"x": np.ones((4, 3))})
