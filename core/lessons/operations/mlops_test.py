"""The MLOps lesson's pieces: the contract refuses every planted violation (row and rule), the
gate blocks a noisy-label candidate over seeds, KS and PSI agree with scipy, the Cloud Build
config passes its checks (and broken ones do not), and the Kubeflow pipeline compiles and runs
in .venv-kfp with its artifacts read back (the issue: the pipeline runs in `make test`)."""

import os

import numpy as np
import pytest
import scipy.special
import scipy.stats

from core import numerics
from core.lessons.operations import mlops

GATE_SEEDS = (0, 1, 2)
MAX_REGRESSION = 0.02  # the app's default gate


def test_clean_rows_pass_the_contract():
    assert mlops.check_contract(mlops.raw_rows(400)) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_violation_is_refused_with_its_row_and_rule(seed):
    bad, planted = mlops.plant(mlops.raw_rows(300), mlops.VIOLATIONS, seed)
    found = mlops.check_contract(bad)
    for p in planted:
        rule = mlops.violation_rule(p["violation"])
        assert any(f["row"] == p["row"] and rule in f["rule"] for f in found), p
    planted_rows = {p["row"] for p in planted}
    # a duplicate id flags both rows that share it: the planted one and its twin above it
    twins = {p["row"] - 1 for p in planted if p["violation"] == "duplicate id"}
    assert {f["row"] for f in found} <= planted_rows | twins
    grouped = mlops.by_row(found)
    assert len(grouped) <= len(found)
    assert {g["row"] for g in grouped} == {f["row"] for f in found}


def test_plant_refuses_unknown_kinds_and_too_few_rows():
    with pytest.raises(ValueError, match="unknown violations"):
        mlops.plant(mlops.raw_rows(20), ["typo"], 0)
    with pytest.raises(ValueError, match="cannot hold"):
        mlops.plant(mlops.raw_rows(5), mlops.VIOLATIONS, 0)


@pytest.mark.parametrize("seed", GATE_SEEDS)
def test_gate_blocks_a_noisy_candidate_and_promotes_a_clean_one(seed):
    """Over 3 seeds: 60 % replaced labels regress past 2 points; no noise never regresses."""
    r = mlops.champion_and_candidate(0.6, 200, seed)
    acc = {k: float(np.mean(r[k] == r["y_test"])) for k in ("champion", "candidate")}
    blocked = mlops.gate(acc["champion"], acc["candidate"], MAX_REGRESSION)
    assert not blocked["promote"] and blocked["regression"] > 2 * MAX_REGRESSION
    same = mlops.champion_and_candidate(0.0, 200, seed)
    assert np.array_equal(same["champion"], same["candidate"])


@pytest.mark.parametrize("n,m,shift", [(300, 300, 0.0), (200, 350, 0.1), (50, 80, 0.3)])
def test_ks_statistic_matches_scipy(n, m, shift):
    a = mlops.incoming(n, 0.0, 1)
    b = mlops.incoming(m, shift, 2)
    for f in (10, 20, 35):
        want = scipy.stats.ks_2samp(a[:, f], b[:, f]).statistic
        assert abs(mlops.ks_statistic(a[:, f], b[:, f]) - want) <= numerics.tolerance("float64")


@pytest.mark.parametrize("bins", [5, 10, 20])
def test_psi_is_the_symmetric_kl_of_the_binned_shares(bins):
    rng = np.random.default_rng(bins)
    ref, cur = rng.normal(0, 1, 2000), rng.normal(0.3, 1.2, 1500)
    edges = np.quantile(ref, np.linspace(0, 1, bins + 1))
    cuts = np.concatenate([[-np.inf], edges[:-1], [np.inf]])
    p = np.maximum(np.histogram(-ref, -cuts[::-1])[0][::-1] / ref.size, mlops.PSI_EPS)
    q = np.maximum(np.histogram(-cur, -cuts[::-1])[0][::-1] / cur.size, mlops.PSI_EPS)
    want = np.sum(scipy.special.rel_entr(p, q) + scipy.special.rel_entr(q, p))
    assert abs(mlops.psi(ref, cur, bins) - want) <= numerics.tolerance("float64") * max(1, want)
    assert abs(mlops.psi_reference(ref, cur, bins) - want) <= 1e-12 * max(1, want)
    assert mlops.psi(ref, ref, bins) == 0.0


def test_psi_sees_a_point_mass_move():
    ref = np.r_[np.zeros(80), np.linspace(0.2, 1, 20)]
    assert mlops.psi(ref, ref + 0.05, 10) > 1.0  # the zeros left their own bin
    assert abs(mlops.psi(ref, ref + 0.05, 10) - mlops.psi_reference(ref, ref + 0.05, 10)) < 1e-12


def test_cloudbuild_config_passes_and_broken_ones_are_caught():
    good = mlops.cloudbuild_config("us-central1", "gs://b/pipelines", 0.8)
    assert mlops.check_cloudbuild(mlops.cloudbuild_yaml(good)) == []
    no_name = {**good, "steps": [{k: v for k, v in good["steps"][0].items() if k != "name"}]}
    assert any(
        "'name' is a required" in p for p in mlops.check_cloudbuild(mlops.cloudbuild_yaml(no_name))
    )
    lower = {**good, "substitutions": {**good["substitutions"], "_region": "x"}}
    assert mlops.check_cloudbuild(mlops.cloudbuild_yaml(lower))
    undeclared = {**good, "substitutions": {k: v for k, v in good["substitutions"].items()
                                            if k != "_REGION"}}  # fmt: skip
    assert any(
        "_REGION is used" in p for p in mlops.check_cloudbuild(mlops.cloudbuild_yaml(undeclared))
    )
    local_root = {**good, "substitutions": {**good["substitutions"], "_PIPELINE_ROOT": "/tmp/x"}}
    assert any("gs://" in p for p in mlops.check_cloudbuild(mlops.cloudbuild_yaml(local_root)))
    steps = [dict(s) for s in good["steps"]]
    steps[1]["waitFor"] = ["submit"]
    assert any(
        "earlier step" in p
        for p in mlops.check_cloudbuild(mlops.cloudbuild_yaml({**good, "steps": steps}))
    )


def _require_kfp():
    problem = mlops.kfp_missing()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(problem)  # CI builds it (make test depends on make kfp-env)
    pytest.skip(problem)


def test_the_kubeflow_pipeline_compiles_and_runs_locally(tmp_path):
    _require_kfp()
    frame = mlops.raw_rows(240)
    mlops.write_raw(frame, tmp_path / "raw.json")
    run, _log = mlops.run_pipeline(tmp_path / "raw.json", tmp_path / "out", 3, 0.25, 0.5)
    art = mlops.read_artifacts(run)
    assert run.kfp_version == "2.17.3"
    assert len(art["test"].labels) == 60 and len(art["train"].labels) == 180
    assert sorted(art["train"].rows + art["test"].rows) == frame["id"].tolist()
    assert abs(mlops.centroid_accuracy(art["model"], art["test"]) - run.accuracy) <= 1e-12
    assert run.artifacts["metrics"].metadata["accuracy"] == run.accuracy
    assert art["published"].accuracy == run.accuracy >= 0.5
    dag = {
        row["task"]: row["depends on"]
        for row in mlops.pipeline_dag(tmp_path / "out" / "pipeline.yaml")
    }
    assert dag == {"preprocess": "-", "train": "preprocess", "evaluate": "preprocess, train",
                   "publish": "evaluate, train"}  # fmt: skip


def test_the_pipeline_refuses_to_publish_below_the_gate(tmp_path):
    _require_kfp()
    mlops.write_raw(mlops.raw_rows(120), tmp_path / "raw.json")
    with pytest.raises(RuntimeError, match="below the gate"):
        mlops.run_pipeline(tmp_path / "raw.json", tmp_path / "out", 0, 0.25, 1.0)
