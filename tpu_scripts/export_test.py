"""`python -m tpu_scripts export`: a headless script whose flags mirror the app's controls."""

import hashlib
import subprocess
import sys

import pytest

from core import curriculum, runtime
from tpu_scripts import export

APP = curriculum.APPS_DIR / "arrays_devices.py"


def run(*args, cwd=curriculum.REPO_ROOT, timeout=180):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"),
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "arrays_devices_tpu.py"
    result = run("-m", "tpu_scripts", "export", str(APP), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    return out


def test_export_keeps_the_app_byte_for_byte_and_records_its_hash(exported):
    source = APP.read_text(encoding="utf-8")
    text = exported.read_text(encoding="utf-8")
    assert text.endswith(source)
    assert export.source_digest(exported) == hashlib.sha256(source.encode()).hexdigest()


def test_exported_flags_mirror_the_controls(exported):
    header = exported.read_text(encoding="utf-8").split("import marimo", 1)[0]
    help_result = run(str(exported), "--help")
    assert help_result.returncode == 0
    for option in ("--rows", "--cols", "--dtype", "--device-a", "--device-b", "--seed"):
        assert option in header and option in help_result.stdout


def test_exported_script_runs_headless_with_flags(exported, tmp_path):
    result = run(str(exported), "--rows", "3", "--cols", "5", "--dtype", "bfloat16", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PASS: row sum-of-squares and mean in bfloat16" in result.stdout


def test_exported_script_rejects_out_of_bounds_flags(exported):
    result = run(str(exported), "--rows", "0")
    assert result.returncode == 2
    assert "--rows must be between 1 and 64" in result.stderr


def test_exporting_a_file_that_is_not_a_marimo_app_says_so(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("print('hello')\n")
    result = run("-m", "tpu_scripts", "export", str(plain), "-o", str(tmp_path / "out.py"))
    assert result.returncode == 1
    assert "is not a marimo app" in result.stderr
    assert not (tmp_path / "out.py").exists()


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def broken(:\n", "not valid Python"),
        ("import os\n", "does not `import marimo`"),
        ("import marimo\n", "no `app = marimo.App"),
        ("import marimo\napp = marimo.App()\n", "no `@app.cell`"),
        ("import marimo\napp = marimo.App()\n@app.cell\ndef _():\n    return\n", "app.run()"),
    ],
)
def test_marimo_app_problem_names_the_reason(source, reason):
    assert reason in export.marimo_app_problem(source)


def test_export_refuses_to_overwrite_the_app():
    with pytest.raises(ValueError, match="the app itself"):
        export.export_app(APP, APP)


@pytest.mark.parametrize("argv", [[], ["export"], ["export", "apps/index.py"], ["launch-rockets"]])
def test_bad_arguments_print_usage_and_exit_2(argv):
    result = run("-m", "tpu_scripts", *argv)
    assert result.returncode == 2
    assert "usage:" in result.stderr
