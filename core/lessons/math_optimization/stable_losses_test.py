import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import stable_losses as sl


@pytest.mark.parametrize("examples, classes", [(1, 2), (8, 10), (64, 64)])
@pytest.mark.parametrize("log10_scale", [-1.0, 1.0, 2.5, 20.0, 38.2])
@pytest.mark.parametrize("temperature, smoothing", [(1.0, 0.0), (3.0, 0.1), (1.5, 0.5)])
def test_stable_forms_equal_scipy(examples, classes, log10_scale, temperature, smoothing):
    assert sl.problem(log10_scale, temperature) is None
    logits, targets = sl.make_batch(
        jax.random.key(classes), examples, classes, log10_scale, temperature
    )
    ours = sl.stable(logits, targets, smoothing)
    reference = sl.scipy_reference(logits, targets, smoothing)
    for form in sl.FORMS:
        assert numerics.scaled_max_error(ours[form], reference[form]) <= numerics.tolerance(
            "float32"
        ), form
    assert float(np.abs(np.asarray(logits)).max()) == pytest.approx(
        10**log10_scale / temperature, rel=1e-6
    )


def test_naive_forms_overflow_past_88_and_agree_below():
    logits, targets = sl.make_batch(jax.random.key(0), 8, 10, np.log10(80.0), 1.0)
    reference = sl.scipy_reference(logits, targets, 0.1)
    small = sl.naive(logits, targets, 0.1)
    assert numerics.scaled_max_error(small["logsumexp"], reference["logsumexp"]) <= 1e-5
    big, targets = sl.make_batch(jax.random.key(0), 8, 10, 3.0, 1.0)
    overflowed = sl.naive(big, targets, 0.0)
    assert not np.all(np.isfinite(np.asarray(overflowed["logsumexp"])))
    assert np.isnan(np.asarray(overflowed["softmax"])).any()
    assert all(np.all(np.isfinite(np.asarray(v))) for v in sl.stable(big, targets, 0.0).values())


def test_cross_entropy_without_smoothing_is_the_nll_and_smoothing_raises_it():
    logits, targets = sl.make_batch(jax.random.key(2), 16, 5, 1.0, 1.0)
    plain = sl.stable(logits, targets, 0.0)
    assert float(plain["cross_entropy"]) == pytest.approx(float(plain["nll"]), rel=1e-6)
    np.testing.assert_allclose(np.asarray(plain["softmax"]).sum(-1), 1.0, rtol=1e-6)


def test_refusals_name_the_problem():
    assert "T > 0" in sl.problem(1.0, 0.0) and "flips" in sl.problem(1.0, -1.0)
    assert "past float32's range" in sl.problem(38.3, 1.0)
    assert "past float32's range" in sl.problem(38.2, 0.5)
    assert sl.problem(38.2, 1.0) is None


def test_sweep_rows():
    rows = sl.sweep(jax.random.key(0), 4, [0.0, 3.0], numerics.scaled_max_error)
    assert len(rows) == 8
    naive_at_1000 = [r for r in rows if r["form"] == "naive" and r["log10 largest |logit|"] == 3]
    assert all(r["error"] == np.inf for r in naive_at_1000)
