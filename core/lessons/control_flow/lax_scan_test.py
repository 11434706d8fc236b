import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.control_flow import lax_scan


@pytest.mark.parametrize("implementation", list(lax_scan.IMPLEMENTATIONS))
@pytest.mark.parametrize("length, hidden", [(1, 1), (7, 3), (20, 16)])
def test_every_loop_matches_numpy_float64(implementation, length, hidden):
    w, h0, xs = lax_scan.example_inputs(jax.random.key(length), length, hidden)
    reference = lax_scan.rnn_reference(w, h0, xs)
    h_T, hs = lax_scan.JITTED[implementation](w, h0, xs)
    assert h_T.shape == (hidden,) and hs.shape == (length, hidden)
    # |h| <= 1 (tanh): the scaled error is the absolute error
    assert numerics.tree_scaled_max_error((h_T, hs), reference) <= numerics.tolerance("float32")
    np.testing.assert_allclose(np.asarray(hs[-1]), np.asarray(h_T))


def test_reference_by_hand():
    w = np.array([[0.5]])
    h, hs = lax_scan.rnn_reference(w, np.array([1.0]), np.array([[0.0], [1.0]]))
    assert hs[0, 0] == pytest.approx(np.tanh(0.5))
    assert h[0] == pytest.approx(np.tanh(0.5 * np.tanh(0.5) + 1.0))


@pytest.mark.parametrize("implementation", list(lax_scan.IMPLEMENTATIONS))
def test_jit_equals_eager(implementation):
    args = lax_scan.example_inputs(jax.random.key(1), 6, 4)
    with jax.disable_jit():
        eager = lax_scan.IMPLEMENTATIONS[implementation](*args)
    assert numerics.tree_scaled_max_error(lax_scan.JITTED[implementation](*args), eager) <= 1e-6


@pytest.mark.parametrize("hidden", [1, 8])
def test_unrolled_program_grows_linearly_and_scan_does_not(hidden):
    def counts(implementation):
        return [
            lax_scan.jaxpr_equation_count(
                lax_scan.IMPLEMENTATIONS[implementation],
                *lax_scan.example_inputs(jax.random.key(0), length, hidden),
            )
            for length in (8, 16, 32, 64)
        ]

    unrolled = counts("Python loop (unrolled)")
    steps = np.diff(unrolled)
    assert steps[0] > 0 and list(steps) == [steps[0], 2 * steps[0], 4 * steps[0]], unrolled
    assert len(set(counts("lax.scan"))) == 1
    assert len(set(counts("lax.fori_loop"))) == 1
    assert counts("lax.scan")[0] < unrolled[0]


def test_equation_count_by_hand():
    assert lax_scan.jaxpr_equation_count(lambda x: x + 1, 1.0) == 1
    assert lax_scan.jaxpr_equation_count(lambda x: jax.numpy.sin(x) * 2, 1.0) == 2


@pytest.mark.parametrize("implementation", list(lax_scan.IMPLEMENTATIONS))
def test_measure_reports_its_parts(implementation):
    args = lax_scan.example_inputs(jax.random.key(2), 4, 3)
    timing = lax_scan.measure(implementation, *args, repeats=2)
    assert timing.implementation == implementation and timing.length == 4
    assert timing.equations == lax_scan.jaxpr_equation_count(
        lax_scan.IMPLEMENTATIONS[implementation], *args
    )
    assert timing.trace_lower_s > 0 and timing.compile_s > 0 and timing.run_s > 0
    assert timing.total_compile_s == timing.trace_lower_s + timing.compile_s


def test_example_and_sweep_inputs():
    w, h0, xs = lax_scan.example_inputs(jax.random.key(3), 5, 4)
    assert (w.shape, h0.shape, xs.shape) == ((4, 4), (4,), (5, 4))
    assert len({np.asarray(a).tobytes() for a in (w[0], h0, xs[0])}) == 3
    cut = lax_scan.sweep_inputs(jax.random.key(3), [2, 5], 4)
    assert [c[2].shape for c in cut] == [(2, 4), (5, 4)]
    np.testing.assert_array_equal(cut[0][2], cut[1][2][:2])
    np.testing.assert_array_equal(cut[1][2], xs)
    assert lax_scan.sweep_inputs(jax.random.key(3), [], 4) == []


def test_scan_vs_unrolled_compile_rows():
    rows = lax_scan.scan_vs_unrolled_compile([2, 4], hidden=2)
    assert [r["length"] for r in rows] == [2, 4]
    assert all(r["scan_compile_s"] > 0 and r["unrolled_compile_s"] > 0 for r in rows)
    assert rows[0]["scan_equations"] == rows[1]["scan_equations"]
    assert rows[1]["unrolled_equations"] > rows[0]["unrolled_equations"]


@pytest.mark.parametrize(
    "max_length, expected", [(1, [1]), (4, [4]), (16, [4, 8, 16]), (100, [4, 8, 16, 32, 64])]
)
def test_sweep_lengths(max_length, expected):
    assert lax_scan.sweep_lengths(max_length) == expected


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="length"):
        lax_scan.example_inputs(jax.random.key(0), 0, 3)
    with pytest.raises(ValueError, match="implementation"):
        lax_scan.measure("while", *lax_scan.example_inputs(jax.random.key(0), 2, 2))
    with pytest.raises(ValueError, match="max_length"):
        lax_scan.sweep_lengths(0)
