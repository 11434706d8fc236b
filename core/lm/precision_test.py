"""precision: the tolerance follows the coarsest dtype, a bf16 running sum rounds exactly as
ml_dtypes' emulation does and stalls, and a float32 accumulator does not (over seeds)."""

import jax
import ml_dtypes
import numpy as np
import pytest

from core import numerics
from core.lm import precision


def test_policy_tolerance_follows_the_coarsest_dtype():
    # float32's bound is the CPU's 1e-5; on a TPU, float32 at the matmul precision in force
    # (DEFAULT: one bfloat16 pass, judged like bfloat16)
    on_tpu = numerics.computed_backend() == "tpu"
    f32 = numerics.TPU_FLOAT32[numerics.matmul_precision()][1] if on_tpu else 1e-5
    assert precision.policy_tolerance(precision.POLICIES["f32"]) == f32
    assert precision.policy_tolerance(precision.POLICIES["bf16 compute"]) == 2e-2
    assert precision.policy_tolerance(precision.POLICIES["bf16 params + compute"]) == 2e-2
    assert precision.policy_tolerance(precision.Precision(params="bfloat16")) == 2e-2


def bf16_running_sum_reference(values):
    total = ml_dtypes.bfloat16(0)
    out = []
    for v in values:
        total = ml_dtypes.bfloat16(np.float32(total) + np.float32(ml_dtypes.bfloat16(v)))
        out.append(float(total))
    return np.asarray(out)


@pytest.mark.parametrize("value, count", [(0.01, 1000), (1.0, 600), (0.3, 50)])
def test_running_sums_match_emulated_rounding(value, count):
    values = np.full(count, value, np.float32)
    np.testing.assert_array_equal(
        precision.running_sums(values, "bfloat16"), bf16_running_sum_reference(values)
    )
    np.testing.assert_allclose(
        precision.running_sums(values, "float32"), np.cumsum(values, dtype=np.float64), rtol=1e-4
    )


def test_bf16_accumulator_stalls_and_f32_does_not():
    sums = precision.running_sums(np.full(2000, 0.01, np.float32), "bfloat16")
    assert sums[-1] < 5.0  # the exact sum is 20: increments below half a bf16 step vanish
    # transformer_block's claim on every seed (the app draws the vectors from its seed):
    # a float32 accumulator stays below 1e-5, a bf16 one is off by more than 10%.
    f32_worst, bf16_best = 0.0, np.inf
    for seed in range(6):
        errors = precision.dot_prefix_errors(jax.random.key(seed), 4096)
        assert errors["float32"].shape == errors["bfloat16"].shape == (4096,)
        f32_worst = max(f32_worst, float(errors["float32"][-1]))
        bf16_best = min(bf16_best, float(errors["bfloat16"][-1]))
    print(f"dot of 4096: f32 accumulator worst {f32_worst:.2e} (< 1e-5), bf16 best {bf16_best:.2f}")
    assert f32_worst < 1e-5
    assert bf16_best > 100 * f32_worst
    assert bf16_best > 0.1, "1024 products of mean 1/4 reach ~1000: bf16 steps of 4 or 8"
