import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.setup import arrays_devices


@pytest.mark.parametrize("dtype", arrays_devices.DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 7)])
def test_row_stats_match_numpy_float64(dtype, shape):
    x = arrays_devices.example_matrix(jax.random.key(0), *shape, dtype)
    result = arrays_devices.row_stats_RC(x)
    reference = arrays_devices.row_stats_reference(np.asarray(x.astype("float32")))
    # bf16/f16 accumulate in their own precision: error grows with the row length.
    tolerance = numerics.tolerance(dtype) * max(1, shape[1]) ** 0.5 + 1e-6
    assert arrays_devices.check_tolerance(dtype, shape[1]) == tolerance
    assert numerics.scaled_max_error(result, reference) <= tolerance


def test_jit_equals_eager():
    x = arrays_devices.example_matrix(jax.random.key(1), 4, 6, "float32")
    with jax.disable_jit():
        eager = arrays_devices.row_stats_RC(x)
    np.testing.assert_allclose(arrays_devices.row_stats_RC(x), eager, rtol=1e-6)


def test_describe_reads_the_array():
    x = arrays_devices.example_matrix(jax.random.key(2), 3, 4, "bfloat16")
    info = arrays_devices.describe(x)
    assert info.shape == (3, 4) and info.dtype == "bfloat16"
    assert info.nbytes == 3 * 4 * 2 and info.size == 12
    assert info.committed is False


def test_placement_walkthrough_commits_and_refuses_a_clash():
    assert jax.device_count() >= 2, "the suite runs with 8 virtual CPU devices"
    x = arrays_devices.example_matrix(jax.random.key(3), 2, 2, "float32")
    steps = arrays_devices.placement_walkthrough(x, 1, 0)
    assert steps[0].info.committed is False
    assert steps[1].info.committed is True and steps[1].info.devices == (str(jax.devices()[1]),)
    assert steps[2].info.devices == (str(jax.devices()[1]),)
    assert steps[3].info is None and "device" in steps[3].error.lower()


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="dtype"):
        arrays_devices.example_matrix(jax.random.key(0), 2, 2, "float64x")
    with pytest.raises(ValueError, match="out of range"):
        arrays_devices.placement_walkthrough(np.ones(2), 0, 99)
