"""The parent side: the backends control, and the run's refusals (the runs: parity_test.py)."""

import pytest

from interop.keras_track import models, runner


@pytest.mark.parametrize(
    ("text", "chosen", "problem"),
    [
        ("jax,torch,tensorflow", ("jax", "torch", "tensorflow"), None),
        (" torch , jax", ("torch", "jax"), None),
        ("", (), "choose at least one"),
        (" , ", (), "choose at least one"),
        ("jax,mxnet", (), "unknown backend 'mxnet'"),
        ("jax,jax", (), "named twice"),
    ],
)
def test_parse_backends(text, chosen, problem):
    got, why = runner.parse_backends(text)
    assert got == chosen
    assert (why is None) if problem is None else (problem in why)


def test_run_cases_refuses_before_starting_anything(tmp_path):
    spec = models.MLPSpec()
    case = runner.Case("a", spec, models.init_weights(spec, 0), {})
    with pytest.raises(ValueError, match="unknown backend"):
        runner.run_cases([case], ["theano"], tmp_path)
    with pytest.raises(ValueError, match="distinct names"):
        runner.run_cases([case, case], ["jax"], tmp_path)
    bad = runner.Case("b", spec, case.weights, {}, runner.Training(optimizer="rmsprop"))
    with pytest.raises(ValueError, match="optimizer"):
        runner.run_cases([bad], ["jax"], tmp_path)
    assert not list(tmp_path.iterdir())
