import json
import sqlite3

import numpy as np
import pytest

from core.lessons.operations import modelops
from core.workload import provenance


@pytest.fixture(scope="module")
def life(tmp_path_factory):
    return modelops.lifecycle(tmp_path_factory.mktemp("registry"), seed=0, steps=40, revision="r")


def test_a_fresh_reader_sees_exactly_the_operations_performed(life):
    seen = modelops.read_back(life.registry.uri)
    want = modelops.expected_state(life.registry.ops)
    for key in ("aliases", "owners", "approved", "retired"):
        assert seen[key] == want[key], key
    assert seen["audit"] == [o.to_dict() for o in life.registry.ops]
    assert seen["aliases"] == {"champion": "1", "challenger": "3"}
    assert seen["retired"] == {"2": modelops.OWNER}
    assert seen["approved"] == {"1": modelops.REVIEWER, "2": modelops.REVIEWER}
    assert seen["model_owner"] == modelops.OWNER
    assert [r["aliases"] for r in seen["versions"]] == ["champion", "", "challenger"]
    approve = [o for o in life.registry.ops if o.op == "approve"]
    assert [r["approved at"] for r in seen["versions"][:2]] == [o.at for o in approve]


def test_the_sqlite_file_itself_holds_the_aliases(life):
    """A reader that is not MLflow: the registry's tables through sqlite3."""
    db = life.registry.tracker.run_dir / "mlflow.db"
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("select alias, version from registered_model_aliases").fetchall())
        tags = con.execute(
            "select version, key, value from model_version_tags where key = 'approval.by'"
        ).fetchall()
    assert rows == {"champion": 1, "challenger": 3}
    assert sorted((int(v), val) for v, _, val in tags) == [
        (1, modelops.REVIEWER),
        (2, modelops.REVIEWER),
    ]


def test_champion_by_alias_predicts_what_it_predicted_when_registered(life):
    version, artifacts = modelops.load_alias(life.registry.uri, "champion")
    labels, probabilities = artifacts.predict(life.x)
    np.testing.assert_array_equal(labels, life.predictions[version][0])
    np.testing.assert_array_equal(probabilities, life.predictions[version][1])


def test_refusals_leave_the_registry_unchanged(life):
    assert [r["attempt"] for r in life.refused] == [
        "champion -> v2 before approval",
        "challenger -> v2 after retirement",
    ]
    assert "no approval" in life.refused[0]["why"]
    assert "retired" in life.refused[1]["why"]
    before = modelops.read_back(life.registry.uri)
    with pytest.raises(modelops.PromotionRefused, match="is the champion"):
        life.registry.retire("1", modelops.OWNER, "cannot retire what serves")
    with pytest.raises(modelops.PromotionRefused, match="no approval"):
        life.registry.promote("3", "champion", modelops.OWNER, "unreviewed")
    with pytest.raises(ValueError, match="alias must be one of"):
        life.registry.promote("3", "production", modelops.OWNER, "a stage name")
    assert modelops.read_back(life.registry.uri) == before


def test_a_tampered_source_cannot_be_promoted(tmp_path):
    registry = modelops.Registry(tmp_path)
    registry.create(modelops.OWNER, "t")
    directory, _ = modelops.build(tmp_path / "a", "m1", 0, 10, 0.1, "r")
    version = registry.register(directory, modelops.OWNER, "v")
    registry.approve(version, modelops.REVIEWER, "ok")
    data = bytearray((directory / "weights.npz").read_bytes())
    data[500] ^= 1
    (directory / "weights.npz").write_bytes(bytes(data))
    with pytest.raises(provenance.ProvenanceError, match="weights.npz was changed"):
        registry.promote(version, "champion", modelops.OWNER, "tampered")
    assert registry.champion() is None
    assert json.loads(json.dumps([o.to_dict() for o in registry.ops]))[-1]["op"] == "approve"


def test_a_reopened_registry_appends_to_the_audit_log_and_rolls_back(tmp_path):
    """Two sessions on one store: the second appends after the first's entries (it overwrote
    them, numbering from its own empty list) and rolls back to a champion the first set."""
    first = modelops.Registry(tmp_path)
    first.create(modelops.OWNER, "t")
    versions = []
    for label in ("m1", "m2"):
        directory, _ = modelops.build(tmp_path / "artifacts", label, 0, 10, 0.1, "r")
        versions.append(first.register(directory, modelops.OWNER, label))
        first.approve(versions[-1], modelops.REVIEWER, "ok")
    first.promote(versions[0], "champion", modelops.OWNER, "first")

    second = modelops.Registry(tmp_path)
    second.promote(versions[1], "champion", modelops.OWNER, "second")
    assert second.rollback(modelops.ONCALL, "incident") == versions[0]

    audit = modelops.read_back(second.uri)["audit"]
    assert [o["op"] for o in audit] == [
        *["create", "register", "approve", "register", "approve", "alias"],
        *["alias", "rollback"],
    ]
    assert audit == [o.to_dict() for o in first.ops + second.ops]
    assert second.history() == first.ops + second.ops
    assert second.champion() == versions[0]


def test_the_audit_log_orders_entries_by_number_past_9999(tmp_path):
    """audit.NNNN keys sorted as text put audit.10000 before audit.9999: read by number."""
    registry = modelops.Registry(tmp_path)
    registry.create(modelops.OWNER, "t")
    for number in (9999, 10000):
        registry.client.set_registered_model_tag(
            modelops.MODEL,
            modelops.audit_key(number),
            json.dumps(modelops.Op(f"t{number}", "approve", "1", "x").to_dict()),
        )
    assert [o.at for o in registry.history()[-2:]] == ["t9999", "t10000"]
    assert [o["at"] for o in modelops.read_back(registry.uri)["audit"][-2:]] == [
        "t9999",
        "t10000",
    ]
