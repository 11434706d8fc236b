import json

import pytest

from core.rl import records


def test_write_latest_cite_round_trip(tmp_path):
    root = tmp_path / "benchmarks" / "records"
    path = records.write("rl_demo", "python x.py", {"seconds": 1.5}, "n", root=root)
    assert path.parent == root / "rl_demo" and path.name.endswith("core-cpu.json")
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["name"] == "rl_demo"
    assert doc["figures"] == {"seconds": 1.5} and doc["command"] == "python x.py"
    assert set(doc["machine"]) == {"label", "cpu", "cores", "platform"}
    assert records.latest("rl_demo", root) == (path, doc)
    assert records.cite("rl_demo", root).startswith(f"benchmarks/records/rl_demo/{path.name} (")
    with pytest.raises(ValueError, match="snake_case"):
        records.document("Bad Name", "c", {})
    with pytest.raises(FileNotFoundError, match="rl_none"):
        records.latest("rl_none", root)


def test_the_ppo_record_in_the_repo_is_well_formed():
    _, doc = records.latest("rl_ppo")
    assert doc["figures"]["seeds_solved"] <= doc["figures"]["seeds"]
    assert doc["command"].startswith("python benchmarks/rl_ppo.py --record")
