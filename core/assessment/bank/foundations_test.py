"""The foundation items beyond the generic contract (core/assessment/items_test.py): live values
against numbers worked out by hand for fixed params, and properties over many seeds (the planted
mistakes stay wrong, every defect's evidence holds, the matrix shown is exact)."""

from __future__ import annotations

import fractions

import jax
import numpy as np
import pytest

from core.assessment.bank import foundations
from core.assessment.items import rng

ITEM = {item.id: item for item in foundations.ITEMS}
MANY_SEEDS = range(40)


def _params(item_id: str, seed: int) -> dict:
    item = ITEM[item_id]
    return item.params(rng(item.id, seed)) if item.kind == "predict" else item.seeded(seed)[1]


# --- setup.shard_shape ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "block"),
    [
        # 32/2 (data), 48 whole, 16/2 (model)
        (
            {
                "shape": (32, 48, 16),
                "dtype": "bfloat16",
                "mesh_shape": (2, 2),
                "axis_names": ("data", "model"),
                "entries": ("data", None, "model"),
            },
            (16, 48, 8),
        ),
        # 24 whole, 40/4
        (
            {
                "shape": (24, 40),
                "dtype": "int8",
                "mesh_shape": (4,),
                "axis_names": ("x",),
                "entries": (None, "x"),
            },
            (24, 10),
        ),
        # 48 over both axes: 48/(2*2)
        (
            {
                "shape": (48, 8),
                "dtype": "float32",
                "mesh_shape": (2, 2),
                "axis_names": ("x", "y"),
                "entries": (("y", "x"), None),
            },
            (12, 8),
        ),
    ],
)
def test_shard_shape_by_hand(params, block):
    item = ITEM["setup.shard_shape"]
    assert item.live(params) == block
    assert item.derive(params)[0] == block


def test_shard_shape_mistakes_stay_wrong_and_shapes_divide():
    item = ITEM["setup.shard_shape"]
    for seed in MANY_SEEDS:
        params = _params(item.id, seed)
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert tuple(value) != tuple(expected), (seed, mistake)
        assert all(n % 4 == 0 for n in params["shape"])


def test_shard_shape_refuses_too_few_devices(monkeypatch):
    item = ITEM["setup.shard_shape"]
    params = _params(item.id, 3)
    monkeypatch.setattr(jax, "devices", lambda *a: [object(), object()])
    with pytest.raises(ValueError, match="JAX_NUM_CPU_DEVICES"):
        item.live(params)
    assert "needs 4 devices" in item.prompt(params)
    assert "needs 4 devices" in item.question(1234).prompt  # a seed not computed yet


# --- arrays.plausible_bug ------------------------------------------------------------------


PLAUSIBLE = {
    "counts": [[1, 3, 2, 2], [4, 1, 1, 2], [2, 2, 2, 2], [1, 1, 1, 5], [3, 3, 1, 1]],
    "values": [1, 2, 3, 5],
    "updated": 2,
    "new_value": 3.5,
    "targets": [2.0, 2.5, 3.0, 4.0, 2.2],
}


def _plausible_reference(params, defect=None) -> float:
    """The script's mean squared error in NumPy float64, with or without one defect."""
    counts = np.asarray(params["counts"], dtype=np.float64)
    values = np.asarray(params["values"], dtype=np.float64)
    targets = np.asarray(params["targets"], dtype=np.float64)
    values[params["updated"]] = params["new_value"]
    probs = counts / counts.sum(axis=0 if defect == "wrong_axis" else 1, keepdims=True)
    if defect == "integer_dtype":
        probs[0] = 0.0  # full_like of an int row: 1/K truncated
    elif defect != "discarded_update":
        probs[0] = 1.0 / counts.shape[1]
    pred = probs @ values
    if defect == "broadcast_column":
        targets = targets[:, None]
    return float(np.mean((pred - targets) ** 2))


@pytest.mark.parametrize(
    "defect", [None, "wrong_axis", "broadcast_column", "discarded_update", "integer_dtype"]
)
def test_plausible_bug_programs_compute_what_they_say(defect):
    item = ITEM["arrays.plausible_bug"]
    namespace, printed = foundations._run(item.program(defect or "none", PLAUSIBLE))
    reference = _plausible_reference(PLAUSIBLE, defect)
    assert float(namespace["mse"]) == pytest.approx(reference, rel=1e-5)
    assert printed == f"mse = {reference:.4f}"
    if defect is None:
        # by hand, values [1, 2, 3.5, 5]: row 0 uniform 11.5/4, then (4+2+3.5+10)/8, 23/8,
        # (1+2+3.5+25)/8, (3+6+3.5+5)/8
        by_hand = [2.875, 2.4375, 2.875, 3.9375, 2.1875]
        assert np.asarray(namespace["pred"]) == pytest.approx(by_hand)


def test_plausible_bug_every_defect_is_evidenced_over_seeds():
    item = ITEM["arrays.plausible_bug"]
    for seed in range(12):
        params = _params(item.id, seed)
        for defect in item.defects:
            evidence = item.evidence(defect, params)
            assert all(evidence.facts.values()), (seed, defect, evidence.facts)
            assert len(item.program(defect, params).splitlines()) <= 25


# --- transformations.recompiles ------------------------------------------------------------


def test_recompiles_by_hand():
    item = ITEM["transformations.recompiles"]
    calls = (
        ((4,), "float32", 2),
        ((4,), "float32", 2),  # cached
        ((4,), "int32", 2),  # new dtype
        ((4,), "float32", 3),  # new static value
        ((2, 4), "float32", 2),  # new shape
    )
    params = {"calls": calls}
    assert item.live(params) == 4.0
    assert item.derive(params)[0] == 4.0
    assert item.wrong(params, 4.0) == {
        "one trace per call": 5.0,
        "distinct shapes only (dtype and static value ignored)": 2.0,
        "distinct shapes and dtypes (the static argument ignored)": 3.0,
    }


def test_recompiles_mistakes_stay_wrong_over_seeds():
    item = ITEM["transformations.recompiles"]
    answers = set()
    for seed in MANY_SEEDS:
        params = _params(item.id, seed)
        assert 6 <= len(params["calls"]) <= 10
        expected = item.derive(params)[0]
        answers.add(expected)
        for mistake, value in item.wrong(params, expected).items():
            assert abs(value - expected) >= 1, (seed, mistake)
    assert len(answers) >= 3


# --- control_flow.key_reuse ----------------------------------------------------------------


def test_key_reuse_every_defect_repeats_its_draw_over_seeds():
    item = ITEM["control_flow.key_reuse"]
    for seed in range(6):
        params = _params(item.id, seed)
        for defect in item.defects:
            evidence = item.evidence(defect, params)
            assert all(evidence.facts.values()), (seed, defect, evidence.facts)
            assert len(item.program(defect, params).splitlines()) <= 25


def test_key_reuse_parent_reuse_repeats_w_b_exactly():
    """The claim the explanation makes: the loop started from the split parent re-creates
    k_init, and its second step's subkey is k_b."""
    item = ITEM["control_flow.key_reuse"]
    params = {"key_seed": 7, "width": 4, "steps": 3}
    namespace, _ = foundations._run(item.program("parent_reused", params))
    assert np.array_equal(np.asarray(namespace["noise_TD"][1]), np.asarray(namespace["w_b"]))


# --- math_optimization.stable_learning_rate ------------------------------------------------


def test_stable_learning_rate_by_hand():
    item = ITEM["math_optimization.stable_learning_rate"]
    # A = [[2, 1], [1, 2]]: eigenvalues 1 and 3, so eta_max = 2/3
    params = {"A": ((2.0, 1.0), (1.0, 2.0)), "eigenvalues": (3.0, 1.0), "b": (1.0, -1.0)}
    assert item.live(params) == pytest.approx(2 / 3, rel=1e-12)
    assert item.derive(params)[0] == pytest.approx(2 / 3, rel=1e-12)


def test_stable_learning_rate_matrix_is_exact_and_mistakes_stay_wrong():
    item = ITEM["math_optimization.stable_learning_rate"]
    for seed in MANY_SEEDS:
        params = _params(item.id, seed)
        exact = np.array(params["A_exact"], dtype=object)
        # the four decimals shown are A itself
        assert all((v * 10000).denominator == 1 for v in exact.flat), seed
        shown = np.array([[float(f"{v:.4f}") for v in row] for row in params["A"]])
        assert np.allclose(shown, shown.T)
        eigen = np.linalg.eigvalsh(shown)
        assert eigen == pytest.approx(sorted(params["eigenvalues"]), rel=1e-12)
        assert all(fractions.Fraction(v) * 16 % 1 == 0 for v in params["eigenvalues"])
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert abs(value - expected) > 0.03 * expected, (seed, mistake)


def test_gradient_descent_converges_just_below_the_answer_and_diverges_above():
    item = ITEM["math_optimization.stable_learning_rate"]
    params = _params(item.id, 3)
    a, b = np.asarray(params["A"]), np.asarray(params["b"])
    limit = item.live(params)
    for factor, converges in ((0.97, True), (1.03, False)):
        x = np.ones(len(b))
        for _ in range(2000):
            x = x - factor * limit * (a @ x + b)
        assert np.allclose(a @ x + b, 0, atol=1e-6) == converges


# --- nn_training.parameter_count -----------------------------------------------------------


def test_parameter_count_by_hand():
    item = ITEM["nn_training.parameter_count"]
    params = {"sizes": (8, 16, 4, 3), "layer_norm": (True, False), "no_bias": 1, "dropout": True}
    # linear0 8*16+16 = 144, norm0 2*16 = 32, linear1 16*4 (no bias) = 64, linear2 4*3+3 = 15
    assert item.live(params) == 255.0
    assert item.derive(params)[0] == 255.0
    assert item.wrong(params, 255.0) == {
        "biases forgotten": 255.0 - 16 - 3,
        "the output layer left out (hidden layers only)": 255.0 - 15,
        "LayerNorm's scale and bias left out": 255.0 - 32,
    }


def test_parameter_count_source_runs_as_shown():
    """The abstract build counts what the real model (the source exactly as shown) holds."""
    from core.nn import nnx_models

    item = ITEM["nn_training.parameter_count"]
    for seed in (3, 17):
        params = _params(item.id, seed)
        namespace, _ = foundations._run(item.source(params))
        assert nnx_models.count_params(namespace["model"]) == item.live(params)
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert value != expected, mistake
