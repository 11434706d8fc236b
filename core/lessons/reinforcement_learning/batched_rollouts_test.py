import pytest

from core.lessons.reinforcement_learning import batched_rollouts


def test_env_counts():
    assert batched_rollouts.env_counts(1, 256, 3) == [1, 16, 256]
    assert batched_rollouts.env_counts(1, 4096, 7) == [1, 4, 16, 64, 256, 1024, 4096]
    assert batched_rollouts.env_counts(8, 8, 1) == [8]
    assert batched_rollouts.env_counts(1, 256, 1) == [256]
    with pytest.raises(ValueError, match="min envs"):
        batched_rollouts.env_counts(16, 4, 3)


@pytest.mark.parametrize(
    "lo, hi, points",
    [(600, 700, 2), (600, 700, 7), (1, 8, 7), (3, 5, 3), (1, 4096, 7), (100, 4096, 5)],
)
def test_env_counts_stay_in_the_requested_range_and_number(lo, hi, points):
    # 600 .. 700 with 2 points once ran one row, 512: rounded to a power of two outside it.
    counts = batched_rollouts.env_counts(lo, hi, points)
    assert len(counts) == points and counts == sorted(set(counts))
    assert counts[0] == lo and counts[-1] == hi


def test_a_sweep_with_fewer_counts_than_points_is_refused():
    assert batched_rollouts.sweep_problem(1, 256, 3) is None
    assert "2 env counts" in batched_rollouts.sweep_problem(4, 5, 3)
    assert "1 env count" in batched_rollouts.sweep_problem(8, 8, 3)
    assert "larger than max envs" in batched_rollouts.sweep_problem(16, 4, 3)
    with pytest.raises(ValueError, match="points 3"):
        batched_rollouts.env_counts(8, 8, 3)


def _rows(pairs):
    return [{"envs": n, "jax / gymnasium": q} for n, q in pairs]


def test_crossover_interpolates_in_log_scale():
    assert batched_rollouts.crossover(_rows([(1, 0.5), (4, 2.0)])) == pytest.approx(2.0)
    assert batched_rollouts.crossover(_rows([(1, 3.0), (4, 9.0)])) == 1.0
    assert batched_rollouts.crossover(_rows([(1, 0.1), (4, 0.5)])) is None


def test_chart_builds():
    rows = [{"envs": 1, "jax steps/s": 10.0, "gymnasium steps/s": 20.0}]
    assert batched_rollouts.throughput_chart(rows, "m").to_dict()["mark"]["type"] == "line"
