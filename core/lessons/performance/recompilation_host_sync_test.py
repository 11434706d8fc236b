import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lessons.performance import recompilation_host_sync


def test_compile_messages_match_distinct_signatures():
    arguments = [
        jnp.ones(8),
        jnp.ones(8),
        jnp.ones(16),
        jnp.ones(8, jnp.int32),
        3.0,
        4.0,
        3,
        np.float32(2.0),
    ]
    records = recompilation_host_sync.count_compiles(lambda x: x * 2 + 1, arguments)
    # independent reference: the set of (shape, dtype, weak type) signatures seen so far
    seen = set()
    for argument, record in zip(arguments, records, strict=True):
        new = recompilation_host_sync.signature(argument) not in seen
        seen.add(recompilation_host_sync.signature(argument))
        assert record.compiled == new, record
        if new:
            assert record.message.startswith("Compiling")
    assert sum(r.compiled for r in records) == len(seen) == 6


def test_static_arguments_compile_per_value():
    records = recompilation_host_sync.count_compiles(
        lambda n: jnp.arange(3) * n, [1, 2, 2, 3], static_argnums=0
    )
    assert [r.compiled for r in records] == [True, True, False, True]
    assert records[-1].cache_size == 3


def test_every_loop_kind_trains_the_same_way():
    w, x, y = recompilation_host_sync.regression_problem(jax.random.key(0), 64, 4)
    results = [
        recompilation_host_sync.run_loop(kind, w, x, y, 10)
        for kind in recompilation_host_sync.LOOPS
    ]
    for w_out, best in results[1:]:
        np.testing.assert_allclose(w_out, results[0][0], rtol=1e-6)
        assert best == pytest.approx(results[0][1], rel=1e-6)
    # independent reference: the same gradient steps in numpy float64
    reference_losses = []
    w_np, x_np, y_np = (np.asarray(a, np.float64) for a in (w, x, y))
    for _ in range(10):
        residual = x_np @ w_np - y_np
        reference_losses.append(np.mean(residual**2))
        w_np = w_np - recompilation_host_sync.LEARNING_RATE * 2 * x_np.T @ residual / len(y_np)
    assert results[0][1] == pytest.approx(
        min(reference_losses), rel=recompilation_host_sync.BEST_LOSS_TOLERANCE
    )


def test_guard_catches_the_python_comparison_and_passes_the_fix():
    w, x, y = recompilation_host_sync.regression_problem(jax.random.key(1), 32, 4)
    message = recompilation_host_sync.guarded("python compare each step", w, x, y)
    assert message is not None and "Disallowed" in message and "transfer" in message
    assert recompilation_host_sync.guarded("on device, fetch once", w, x, y) is None
    assert recompilation_host_sync.guard_catches("host-to-device")
    if jax.default_backend() == "cpu":
        # CPU arrays live in host memory: reading one is not a transfer, nothing to catch
        assert not recompilation_host_sync.guard_catches("device-to-host")
        assert recompilation_host_sync.guarded("float(loss) each step", w, x, y) is None


def test_time_loop_counts_repeats():
    w, x, y = recompilation_host_sync.regression_problem(jax.random.key(2), 16, 2)
    ticks = iter(range(100))
    samples = recompilation_host_sync.time_loop(
        "on device, fetch once", w, x, y, steps=2, repeats=3, clock=lambda: next(ticks)
    )
    assert samples == [1, 1, 1]


def test_bad_inputs():
    with pytest.raises(ValueError, match="loop kind"):
        recompilation_host_sync.run_loop("sometimes", None, None, None, 1)
    with pytest.raises(ValueError, match="direction"):
        recompilation_host_sync.guard_catches("sideways")
