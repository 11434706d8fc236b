import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import vectors_norms
from core.optim import linalg


def test_parse_vector_reads_numbers_and_names_problems():
    values, problem = vectors_norms.parse_vector("3, -1.5 2")
    assert problem is None and values.tolist() == [3.0, -1.5, 2.0]
    assert "not numbers" in vectors_norms.parse_vector("1, b")[1]
    assert "no number" in vectors_norms.parse_vector(" , ")[1]
    assert "inf or a NaN" in vectors_norms.parse_vector("1, nan")[1]
    assert "beyond" in vectors_norms.parse_vector("1e7")[1]
    assert "up to 16" in vectors_norms.parse_vector(",".join(["1"] * 17))[1]


def test_line_and_subspace_problems():
    assert "zero vector" in vectors_norms.line_problem(np.ones(2), np.zeros(2))
    assert "one space" in vectors_norms.line_problem(np.ones(2), np.ones(3))
    assert "underflows" in vectors_norms.line_problem(np.ones(2), np.array([1e-30, 0.0]))
    assert vectors_norms.line_problem(np.ones(2), np.array([0.0, 2.0])) is None
    assert "cannot be independent" in vectors_norms.subspace_problem(3, 5)
    assert vectors_norms.subspace_problem(5, 5) is None


@pytest.mark.parametrize("dim, rank", [(1, 1), (6, 2), (64, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_subspace_projection_matches_the_references(dim, rank, seed):
    x, a = vectors_norms.subspace_data(jax.random.key(seed), dim, rank)
    p, r = linalg.project_onto_subspace(x, a)
    assert numerics.scaled_max_error(p, vectors_norms.subspace_reference(x, a)) <= 1e-5
    assert vectors_norms.orthogonality(r, a, x) <= 1e-5


def test_orthogonality_sees_a_residual_that_is_not_orthogonal():
    a = np.array([[1.0], [0.0]])
    assert vectors_norms.orthogonality(np.array([0.0, 1.0]), a, np.ones(2)) == 0.0
    assert vectors_norms.orthogonality(np.array([1.0, 1.0]), a, np.ones(2)) > 0.5


def test_ball_rows_put_x_on_each_ball():
    rows = vectors_norms.ball_rows(np.array([3.0, 1.0]))
    points = [r for r in rows if r["kind"] == "x / ||x||"]
    assert [p["norm"] for p in points] == list(linalg.ORDERS)
    for p, order in zip(points, (1, 2, np.inf), strict=True):
        assert np.isclose(np.linalg.norm([p["u1"], p["u2"]], order), 1.0)
    assert not [r for r in vectors_norms.ball_rows(np.zeros(2)) if r["kind"] != "unit ball"]
