import hashlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from core import curriculum, documents, runtime
from core.lab import results

FIXTURE = curriculum.REPO_ROOT / "tests" / "fixtures" / "results_app.py"


def _run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FIXTURE), *flags],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        timeout=300,
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    run = _run("--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    return out, run.stdout


def test_a_headless_run_prints_and_writes_what_it_found(bundle):
    out, stdout = bundle
    doc = results.load(out / "results.json")
    assert doc["lesson"] == "results_app" and doc["status"] == "passed"
    assert doc["flags"] == {"size": 3}
    assert [c["passed"] for c in doc["checks"]] == [True]
    assert doc["tables"][0]["title"] == "The values"
    assert [row["value"] for row in doc["tables"][0]["rows"]] == [0.0, 1.0, 2.0]
    assert doc["numbers"] == [{"name": "sum of values", "value": 3.0, "unit": "units"}]
    # a chart inside mo.vstack and a chart that is a cell's own output, each once
    assert sorted(c["title"] for c in doc["charts"]) == ["direct chart", "stacked chart"]
    for chart in doc["charts"]:
        spec = json.loads((out / chart["file"]).read_text())
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    assert "| 2 | 2 |" in (out / "results.md").read_text()
    # the shown file, as the page shows it, and the sha256 of what the app meant to show
    [shown] = doc["code"]
    assert shown["title"] == "steps.yaml" and shown["file"] == "code/01.yaml"
    source = "steps:\n- name: a\n  args:\n  - x\n\n- name: b\n"
    assert (out / shown["file"]).read_text() == source
    assert shown["source_sha256"] == hashlib.sha256(source.encode()).hexdigest()
    assert "== Results of results_app" in stdout and "| i | value |" in stdout


def test_the_receipt_never_calls_a_cpu_run_a_tpu_result(bundle):
    receipt = results.load(bundle[0] / "results.json")["receipt"]
    assert receipt["backend"] == "cpu" and receipt["tpu_result"] is False
    assert "not a TPU result" in receipt["note"]
    assert receipt["device_count"] >= 1 and receipt["versions"]["jax"]


def test_a_failed_check_is_recorded_as_failed(tmp_path):
    run = _run("--size", "4", "--out", str(tmp_path))  # the sum is 6, not 3
    assert run.returncode == 0 and "FAIL:" in run.stdout
    doc = results.load(tmp_path / "results.json")
    assert doc["status"] == "failed" and doc["flags"] == {"size": 4}


def test_out_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    target = tmp_path / "taken"
    target.write_text("x")
    run = _run("--out", str(target))
    assert run.returncode == 2 and "is not a folder" in run.stderr
    assert target.read_text() == "x"


def test_cells_become_json_values():
    assert results.cell_value(np.float32(0.5)) == 0.5
    assert results.cell_value(np.int64(3)) == 3
    assert results.cell_value(math.nan) == "nan" and results.cell_value(-math.inf) == "-inf"
    assert results.cell_value((1, 2)) == "(1, 2)"
    assert results.cell_value(np.array(2.5)) == 2.5


def test_a_document_is_verified_before_it_is_trusted(bundle, tmp_path):
    doc = results.load(bundle[0] / "results.json")
    broken = dict(doc, version=2)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="version"):
        results.load(path)
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "receipt"}))
    with pytest.raises(ValueError, match="receipt"):
        results.load(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        results.load(path)


def test_the_committed_json_schema_is_current():
    path = results.SCHEMA_FILE
    expected = json.dumps(documents.json_schema(results.LessonResults), indent=2, sort_keys=True)
    assert path.read_text(encoding="utf-8") == expected + "\n", (
        "regenerate: python -c 'from core.lab import results; results.write_schema()'"
    )


def test_a_bare_value_as_a_cell_output_is_stray():
    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import text

    check = lab.Check("x", 0.0, 1.0)
    shown = [None, mo.md("a"), check, text.code_block("a: 1", "yaml"), alt.Chart(pd.DataFrame())]
    assert results.stray_outputs(shown) == []
    # the assessment apps' "8": lab.use_cpu_devices() as a block's last line
    stray = results.stray_outputs([mo.md("a"), 8, "text", (1, 2), np.zeros(3)])
    assert [s.split(" shows ")[0] for s in stray] == ["cell 2", "cell 3", "cell 4", "cell 5"]
    assert stray[0] == "cell 2 shows int 8"


def test_a_new_recording_forgets_the_topologies_a_former_lesson_compiled(monkeypatch):
    """One process, several lessons (course-run --one-process): a lesson's receipt names only
    the TPU topologies it compiled, not those an earlier lesson in the process did."""
    from core.tpu import topology_compile

    monkeypatch.setattr(topology_compile, "TOPOLOGIES_USED", {"v5p:2x2x1"})
    monkeypatch.setattr(results, "RECORDER", results.Recorder())
    assert "v5p:2x2x1" in results.receipt()["note"] or results.receipt()["backend"] == "tpu"
    results.start("jit", {}, None)
    assert topology_compile.TOPOLOGIES_USED == set()
    assert "v5p:2x2x1" not in results.receipt()["note"]


def test_a_headless_run_leaves_its_cyclic_garbage_to_the_os(tmp_path):
    """A headless lesson (lab.Flags.parse -> results.start) freezes the collector at exit:
    a cycle whose finalizer prints at the interpreter's last collection stays silent. The
    control, the same script without start, prints."""
    script = (
        "import atexit, gc, sys\n"
        "from core.lab import results\n"
        "class Node:\n"
        "    def __del__(self):\n"
        "        sys.stdout.write('collected at exit\\n'); sys.stdout.flush()\n"
        "if sys.argv[1] == 'headless':\n"
        "    results.start('probe', {}, None)\n"
        "gc.disable()\n"  # nothing collects the cycle before exit
        "a, b = Node(), Node(); a.other, b.other = b, a\n"
        "del a, b\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
    )
    (tmp_path / "cycle.py").write_text(script)
    env = runtime.child_env(JAX_PLATFORMS="cpu")

    def run(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, str(tmp_path / "cycle.py"), mode],
            capture_output=True, text=True, env=env, cwd=curriculum.REPO_ROOT, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert "collected at exit" in run("control"), "the control: a plain exit collects it"
    assert run("headless") == "atexit ran\n"
