import numpy as np
import optax
import pytest

from core import numerics
from core.optim import schedules

STEPS = np.arange(0, 260)


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (schedules.constant(3e-4), optax.constant_schedule(3e-4)),
        (schedules.linear(1e-3, 1e-5, 100), optax.linear_schedule(1e-3, 1e-5, 100)),
        (schedules.linear(0.0, 2.0, 37, 20), optax.linear_schedule(0.0, 2.0, 37, 20)),
        (
            schedules.warmup_cosine(0.0, 1e-3, 20, 200, 1e-5),
            optax.warmup_cosine_decay_schedule(0.0, 1e-3, 20, 200, 1e-5),
        ),
        (
            schedules.warmup_cosine(1e-4, 0.5, 1, 50, 0.0),
            optax.warmup_cosine_decay_schedule(1e-4, 0.5, 1, 50, 0.0),
        ),
        (
            schedules.warmup_cosine(0.1, 1.0, 0, 90, 0.2),
            optax.warmup_cosine_decay_schedule(0.1, 1.0, 0, 90, 0.2),
        ),
    ],
)
def test_equals_optax(ours, theirs):
    reference = np.array([float(theirs(t)) for t in STEPS])
    assert numerics.scaled_max_error(ours(STEPS), reference) <= numerics.tolerance("float32")


def test_closed_form_points():
    s = schedules.warmup_cosine(0.0, 1.0, 10, 110, 0.0)
    np.testing.assert_allclose(
        np.asarray(s(np.array([0, 5, 10, 60, 110, 500]))), [0, 0.5, 1, 0.5, 0, 0], atol=1e-6
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: schedules.warmup_cosine(0, 1, 10, 10),
        lambda: schedules.warmup_cosine(0, 1, -1, 10),
        lambda: schedules.linear(1, 0, 0),
    ],
)
def test_bad_schedules_are_refused(make):
    with pytest.raises(ValueError):
        make()
