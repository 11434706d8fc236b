"""run_record: a run.json is validated on load (the bad field named) and a new call's lessons
merge into it in order, the earlier ones kept."""

import json

import pytest

from tpu_scripts import run_record


def test_the_record_is_validated_on_load(tmp_path):
    record = run_record.merge_record(None, ["vmap", "jit"], "local", ["python"])
    path = tmp_path / run_record.RECORD
    run_record.save_record(path, record)
    loaded = run_record.load_record(path)
    assert [lesson["status"] for lesson in loaded["lessons"]] == ["pending", "pending"]
    merged = run_record.merge_record(loaded, ["jit", "lax_scan"], "local", ["again"])
    assert [lesson["slug"] for lesson in merged["lessons"]] == ["jit", "lax_scan", "vmap"]
    loaded["lessons"][0]["status"] = "finished"
    path.write_text(json.dumps(loaded))
    with pytest.raises(ValueError, match=r"lessons\[0\].status"):
        run_record.load_record(path)
