"""`python -m tpu_scripts compare`: a TPU run's bundles beside the local ones, lesson by lesson
(in-process on written bundles; the end-to-end run is in course_run_test.py)."""

import json
import subprocess
import sys

from core import curriculum, documents, runtime
from core.lab import results
from tpu_scripts import __main__ as cli
from tpu_scripts import compare


def sample(lesson="vmap", backend="cpu", kind="cpu", devices=8) -> dict:
    """A valid results.json (LessonResults v1): one check, one table."""
    receipt = dict(backend=backend, tpu_result=backend == "tpu", device_kinds=[kind])
    receipt.update(device_count=devices, process_count=1, host="h", python="3.11.7")
    receipt.update(versions={}, compiled_for_tpu_topologies=[], note="")
    check = dict(what="vmap equals a loop", passed=True, errors={"max": 1e-7})
    check.update(tolerances={"max": 1e-5}, facts={}, line="PASS")
    table = dict(title="timings", columns=["what", "ms"], rows=[{"what": "loop", "ms": 2.0}])
    doc = dict(schema=results.SCHEMA, version=1, lesson=lesson, flags={"rows": 4})
    doc.update(created_utc="2026-12-01T10:00:00", status="passed", stopped=[], error=None)
    doc.update(receipt=receipt, checks=[check], tables=[table], numbers=[], charts=[])
    return documents.validate(results.LessonResults, doc, "lesson results document")


def bundles(tmp_path):
    runs = tmp_path / "runs"
    tpu_dir, local_dir = runs / "tpu" / "vm" / "2026-12-01", runs / "local" / "2026-12-01"
    tpu = dict(backend="tpu", kind="TPU v6 lite", devices=8)
    for folder, slug, doc in (
        (tpu_dir, "vmap", sample(**tpu)),
        (tpu_dir, "jit", sample("jit", **tpu)),
        (local_dir, "vmap", sample()),
        (local_dir, "lax_scan", sample("lax_scan")),
    ):
        (folder / slug).mkdir(parents=True)
        (folder / slug / "results.json").write_text(json.dumps(doc))
    (tpu_dir / "broken").mkdir()
    (tpu_dir / "broken" / "results.json").write_text('{"schema": "other"}')
    return tpu_dir, local_dir


def test_every_lesson_of_either_side_is_compared_and_a_missing_side_is_said(tmp_path, capsys):
    tpu_dir, local_dir = bundles(tmp_path)
    assert compare.default_local_dir(tpu_dir) == local_dir
    report = tmp_path / "out" / "compare.md"
    assert cli.main(["compare", str(tpu_dir), "--markdown", str(report)]) == 0
    text = report.read_text()
    assert text in capsys.readouterr().out
    for slug in ("broken", "jit", "lax_scan", "vmap"):
        assert f"## {slug}" in text
    vmap = text.split("## vmap", 1)[1]
    assert "TPU: tpu (TPU v6 lite x 8)" in vmap and "CPU: cpu (cpu x 8)" in vmap
    assert "| loop | ms | 2 | 2 | yes |" in vmap
    jit = text.split("\n## jit", 1)[1].split("\n## ", 1)[0]
    assert "CPU side missing: no " in jit
    broken = text.split("\n## broken", 1)[1].split("\n## ", 1)[0]
    assert "missing on both sides" in broken and "not a valid bundle" in broken


def test_a_folder_without_bundles_is_refused(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path)]) == 2
    assert "holds no lesson bundles" in capsys.readouterr().err


def test_comparing_never_imports_marimo(tmp_path):
    tpu_dir, local_dir = bundles(tmp_path)
    code = (
        "import sys; from tpu_scripts import compare, course_run; "
        f"text = compare.report(__import__('pathlib').Path({str(tpu_dir)!r}), None); "
        "assert '## vmap' in text; "
        "assert 'marimo' not in sys.modules, 'marimo imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
