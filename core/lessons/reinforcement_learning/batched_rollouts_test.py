import pytest

from core.lessons.reinforcement_learning import batched_rollouts


def test_env_counts():
    assert batched_rollouts.env_counts(1, 256, 3) == [1, 16, 256]
    assert batched_rollouts.env_counts(1, 4096, 7) == [1, 4, 16, 64, 256, 1024, 4096]
    assert batched_rollouts.env_counts(8, 8, 3) == [8]
    with pytest.raises(ValueError, match="min envs"):
        batched_rollouts.env_counts(16, 4, 3)


def _rows(pairs):
    return [{"envs": n, "jax / gymnasium": q} for n, q in pairs]


def test_crossover_interpolates_in_log_scale():
    assert batched_rollouts.crossover(_rows([(1, 0.5), (4, 2.0)])) == pytest.approx(2.0)
    assert batched_rollouts.crossover(_rows([(1, 3.0), (4, 9.0)])) == 1.0
    assert batched_rollouts.crossover(_rows([(1, 0.1), (4, 0.5)])) is None


def test_chart_builds():
    rows = [{"envs": 1, "jax steps/s": 10.0, "gymnasium steps/s": 20.0}]
    assert batched_rollouts.throughput_chart(rows, "m").to_dict()["mark"]["type"] == "line"
