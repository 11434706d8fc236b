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


TRACEBACK = """PASS: first check, max error 1e-7
Traceback (most recent call last):
  File "x.py", line 3, in <module>
    raise RuntimeError("planted failure on worker 0")
RuntimeError: planted failure on worker 0
"""


def test_the_first_problem_is_a_failed_verdict_else_the_exception_raised():
    assert run_record.first_problem(TRACEBACK) == "RuntimeError: planted failure on worker 0"
    stopped = "PASS: a\nSTOPPED: no socket here (needs a loopback socket)\nFAIL: b\n"
    assert run_record.first_problem(stopped) == "STOPPED: no socket here (needs a loopback socket)"
    crash = "jaxlib._jax.XlaRuntimeError: UNIMPLEMENTED: f64 LuDecomposition\n"
    assert run_record.first_problem(crash).startswith("jaxlib._jax.XlaRuntimeError: UNIMPL")
    assert run_record.first_problem("") == "(no output)"
    assert run_record.first_problem("killed\n(timed out after 60 s)") == "(timed out after 60 s)"


def test_the_summary_has_a_row_per_lesson_with_its_line_and_seconds(tmp_path):
    record = run_record.merge_record(None, ["vmap", "jit", "lax_scan"], "local", ["python"])
    vmap, jit, _ = record["lessons"]
    vmap.update(status="error", seconds=3.25, output_tail=TRACEBACK)
    jit.update(status="passed", seconds=7.0, output_tail="PASS: jit == eager | NumPy\n" + "x" * 200)
    table = run_record.summary_table(tmp_path, record, ["vmap", "jit", "lax_scan"], width=60)
    rows = table.splitlines()
    assert rows[0] == "| lesson | status | seconds | check line or first error |"
    assert rows[2] == "| vmap | error | 3.2 | RuntimeError: planted failure on worker 0 |"
    assert rows[3] == "| jit | passed | 7.0 | PASS: jit == eager \\| NumPy |"
    assert rows[4] == "| lax_scan | pending |  | (not run) |"
