import json
import pathlib
import subprocess
import sys
import textwrap

import jax
import pytest

from core import runtime
from tpu_scripts import one_process


def _script(folder: pathlib.Path, name: str, body: str) -> pathlib.Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def test_what_a_lesson_changes_is_put_back_before_the_next(tmp_path, monkeypatch):
    monkeypatch.delenv("LESSON_MARK", raising=False)
    before = jax.config.values["jax_default_matmul_precision"]
    careless = _script(
        tmp_path,
        "careless.py",
        """
        import os, sys, jax, numpy as np
        jax.config.update("jax_default_matmul_precision", "highest")
        os.environ["LESSON_MARK"] = "set"
        np.seterr(all="ignore")
        sys.path.append("/nowhere")
        print("careless ran with", sys.argv[1:])
    """,
    )
    code, output = one_process.run_script(careless, ["--out", "x"], tmp_path / "work", 30)
    assert code == 0 and "careless ran with ['--out', 'x']" in output
    assert "jax_default_matmul_precision" in output and "$LESSON_MARK" in output  # named
    probe = _script(
        tmp_path,
        "probe.py",
        """
        import json, os, sys, jax, numpy as np
        print(json.dumps({"precision": jax.config.values["jax_default_matmul_precision"],
                          "mark": os.environ.get("LESSON_MARK"), "divide": np.geterr()["divide"],
                          "nowhere": "/nowhere" in sys.path, "cwd": os.getcwd()}))
    """,
    )
    code, output = one_process.run_script(probe, [], tmp_path / "work2", 30)
    seen = json.loads(output.splitlines()[0])
    assert code == 0
    assert seen == {
        "precision": before,
        "mark": None,
        "divide": "warn",
        "nowhere": False,
        "cwd": str(tmp_path / "work2"),
    }
    assert jax.config.values["jax_default_matmul_precision"] == before


def test_exit_codes_tracebacks_and_timeouts_read_as_a_process_would(tmp_path):
    cases = {
        "exits.py": ("import sys\nsys.exit(3)\n", 3, ""),
        "says.py": ("raise SystemExit('STOPPED: no torch')\n", 1, "STOPPED: no torch"),
        "fails.py": ("def f():\n    raise ValueError('bad shape')\nf()\n", 1, "ValueError: bad"),
        "sleeps.py": ("import time\nwhile True:\n    time.sleep(0.05)\n", None, "timed out after"),
    }
    for name, (body, want_code, want_text) in cases.items():
        code, output = one_process.run_script(
            _script(tmp_path, name, body), [], tmp_path, 1 if name == "sleeps.py" else 30
        )
        assert code == want_code and want_text in output, (name, code, output)


def test_a_shared_run_gives_each_lesson_its_own_results(tmp_path):
    """Two lessons in one process: each bundle holds its own check, not the first one's (the
    results recorder starts empty for every lesson), and the record says 'shared'."""
    done = subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "course-run", "--local", "--one-process",
         "--keep-going", "--lessons", "workspace,arrays_devices", "--runs-root", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=runtime.child_env(),
    )  # fmt: skip  (child_env: without pytest's variables, marimo's mode is "script")
    run = next((tmp_path / "local").iterdir())
    assert done.returncode == 0, (run / "run.json").read_text()[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert {lesson["process"] for lesson in record["lessons"]} == {"shared"}
    checks = {
        slug: json.loads((run / slug / "results.json").read_text())["checks"][0]["what"]
        for slug in ("workspace", "arrays_devices")
    }
    assert "receipt" in checks["workspace"] and "row sum-of-squares" in checks["arrays_devices"]


def test_one_process_needs_local():
    done = subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "course-run", "--one-process", "--lessons",
         "workspace", "--name", "vm", "--accelerator-type", "v5litepod-8"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--one-process runs lessons here: add --local" in done.stderr


@pytest.fixture(autouse=True)
def _keep_cwd(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
