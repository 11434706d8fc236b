"""The timing exercise's stand-in step and clock are written once (async_benchmarking.py) and
travel as source in the stub; the reference solution keeps a copy of that source, which must
stay the same text, or the reference would be graded on another stand-in than the learner."""

from core.exercises.performance import async_benchmarking


def test_the_reference_carries_the_stubs_stand_in_unchanged():
    item = async_benchmarking.TimeStep()
    assert item.stub.endswith(async_benchmarking.STAND_IN)
    assert item.reference_source().endswith(async_benchmarking.STAND_IN)
