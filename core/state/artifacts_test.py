"""core.state.artifacts: the catalogue, the label, the canonical hash and the tamper check."""

import datetime
import hashlib
import json

import pytest

from core import curriculum
from core.state import artifacts


def _write(tmp_path, document, name="runtime-receipt"):
    path = tmp_path / name / "2026-01-02-030405" / f"{name}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(document, indent=3))
    digest = artifacts.canonical_sha256(document)
    artifacts.hash_path(path).write_text(f"{digest}  {path.name}\n")
    return path


def _document(backend="cpu"):
    return {
        "schema": artifacts.SCHEMA,
        "version": artifacts.VERSION,
        "artifact": "runtime-receipt",
        "created_utc": "2026-01-02T03:04:05+00:00",
        "label": artifacts.label(backend),
        "tpu_result": backend == "tpu",
        "receipt": {"backend": backend},
        "checks": [],
    }


def test_every_learning_path_names_its_first_artifacts():
    titles = [p.title for p in curriculum.LEARNING_PATHS]
    assert {a.path_title for a in artifacts.ARTIFACTS} == set(titles)
    assert [a.name for a in artifacts.for_path(titles[0])] == [
        "runtime-receipt",
        "experiment-log",
        "decision-dossier",
    ]
    assert [a.name for a in artifacts.for_path(titles[1])] == ["timing-placement"]
    with pytest.raises(ValueError, match="unknown artifact 'receipt'"):
        artifacts.get("receipt")


def test_only_the_tpu_backend_is_labelled_a_tpu_result():
    assert artifacts.label("tpu") == "TPU RESULT"
    for backend in ("cpu", "TPU", ""):
        assert artifacts.label(backend) == "CPU REHEARSAL (not a TPU result)"
    assert artifacts.label("gpu") == "GPU REHEARSAL (not a TPU result)"


def test_canonical_hash_ignores_layout_not_values():
    document = {"b": [1, 2.5], "a": "x"}
    text = '{"a":"x","b":[1,2.5]}'
    assert artifacts.canonical_sha256(document) == hashlib.sha256(text.encode()).hexdigest()
    assert artifacts.canonical_sha256({"a": "x", "b": [1, 2.5]}) == artifacts.canonical_sha256(
        json.loads(json.dumps(document, indent=4))
    )
    assert artifacts.canonical_sha256({"a": "x", "b": [1, 2.25]}) != artifacts.canonical_sha256(
        document
    )


def test_default_dir_is_under_runs_by_utc_time():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    path = artifacts.default_dir("timing-placement", when)
    assert path == curriculum.REPO_ROOT / "runs/artifacts/timing-placement/2026-01-02-030405"


def test_load_verified_refuses_changed_unhashed_and_mislabelled_files(tmp_path):
    path = _write(tmp_path, _document())
    assert artifacts.load_verified(path)["label"] == artifacts.CPU_LABEL
    found = artifacts.latest("runtime-receipt", tmp_path)
    assert found.verified and found.label == artifacts.CPU_LABEL
    assert artifacts.latest("experiment-log", tmp_path) is None
    # a CPU figure relabelled as a TPU result, with its hash recomputed: still refused
    forged = {**_document(), "label": artifacts.TPU_LABEL, "tpu_result": True}
    with pytest.raises(ValueError, match="disagree with backend 'cpu'"):
        artifacts.load_verified(_write(tmp_path / "f", forged))
    # one value changed after writing: the hash no longer matches
    path.write_text(path.read_text().replace('"checks": []', '"checks": [1]'))
    with pytest.raises(ValueError, match="changed after it was written"):
        artifacts.load_verified(path)
    found = artifacts.latest("runtime-receipt", tmp_path)
    assert not found.verified and "changed" in found.problem
    artifacts.hash_path(path).unlink()
    with pytest.raises(ValueError, match="no hash file"):
        artifacts.load_verified(path)
    with pytest.raises(ValueError, match="no artifact file"):
        artifacts.load_verified(tmp_path / "missing.json")
