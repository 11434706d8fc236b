import numpy as np
import pytest

from core import numerics
from core.lessons.operations import capacity_cost as lesson

PEAKS = {"peak_flop_per_s": 1e11, "bytes_per_s": 1e10, "machine": "test"}


@pytest.mark.parametrize("shape", [(32, 16, 64, 8), (64, 32, 128, 10), (16, 8, 256, 4)])
def test_xla_flops_match_the_closed_form_within_the_elementwise_share(shape):
    compiled, _ = lesson.compiled_step(*shape)
    from core.perf import roofline

    cost = roofline.cost_from_compiled(compiled)
    closed = lesson.matmul_flops(*shape)
    flops = cost.flops + cost.transcendentals
    assert closed <= flops <= closed * (1 + lesson.ELEMENTWISE_SHARE)


@pytest.mark.parametrize("shape", [(32, 16, 64, 8), (8, 4, 16, 3)])
def test_the_step_matches_numpy_float64_backprop(shape):
    compiled, args = lesson.compiled_step(*shape, seed=2)
    got = compiled(*args)
    want = lesson.step_reference(*args)
    for key in ("w1", "w2"):
        assert numerics.scaled_max_error(np.asarray(got[key]), want[key]) <= numerics.tolerance(
            "float32"
        )


def test_measure_reports_consistent_figures():
    result = lesson.measure(32, 16, 64, 8, repeats=3, peaks=PEAKS)
    # MFU counts the model's FLOPs, HFU every FLOP XLA executes; PEAKS' 1e11 FLOP/s is the
    # peak. Model FLOPs of B=32 rows, F=16, H=64, C=8: forward 2B(FH + HC), backward dW1 2BFH,
    # dW2 and dH 2BHC each (no gradient for the input)
    b, f, h, c = 32, 16, 64, 8
    model_flops = 2 * b * (f * h + h * c) + 2 * b * f * h + 2 * 2 * b * h * c
    assert result.closed_form_flops == model_flops
    assert result.mfu == pytest.approx(model_flops / result.step_s / 1e11)
    assert result.hfu == pytest.approx(result.xla_flops / result.step_s / 1e11)
    assert result.hfu >= result.mfu
    assert result.bound in ("compute-bound", "memory-bound")
    assert len(result.rows()) == 10
    with pytest.raises(ValueError, match="hidden"):
        lesson.measure(32, 16, 0, 8, peaks=PEAKS)
