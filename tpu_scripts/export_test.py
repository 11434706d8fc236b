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


def app_help(run_app, app) -> str:
    """What `python APP --help` prints in export's own --help environment: the reference the
    flags read from the source must equal (a forked run of a pre-imported server, as the
    app-contract runs are, instead of a fresh interpreter importing JAX and marimo each time)."""
    result = run_app([app, "--help"], env=export._help_env(), cwd=curriculum.REPO_ROOT, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def run_exported(run_app, *args):
    """`python EXPORTED ARGS...` from the repository root, in `run`'s environment."""
    return run_app(
        list(args),
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8"),
        cwd=curriculum.REPO_ROOT,
        timeout=180,
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


def test_exported_flags_mirror_the_controls(exported, run_app):
    header = exported.read_text(encoding="utf-8").split("import marimo", 1)[0]
    help_result = run_exported(run_app, exported, "--help")
    assert help_result.returncode == 0
    for option in ("--rows", "--cols", "--dtype", "--device-a", "--device-b", "--seed"):
        assert option in header and option in help_result.stdout


def test_exported_script_runs_headless_with_flags(exported, tmp_path):
    result = run(str(exported), "--rows", "3", "--cols", "5", "--dtype", "bfloat16", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PASS: row sum-of-squares and mean in bfloat16" in result.stdout


def test_exported_script_rejects_out_of_bounds_flags(exported, run_app):
    result = run_exported(run_app, exported, "--rows", "0")
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


# --- reading the flags without running the app ----------------------------------------------

TINY_APP = """import marimo

app = marimo.App()

with app.setup:
    import os

    from core import lab
    from core.lessons.setup import arrays_devices

    WIDTH = 32
{flags_line}
    FLAGS = lab.Flags(
        lab.Flag("width", WIDTH, "units", lo=1, hi=2 * WIDTH),
        lab.Flag("dtype", "float32", "element type", choices=arrays_devices.DTYPES),
        lab.Flag("steps", STEPS, "steps", lo=1, hi=100),
        description="A tiny app.",
    )
    ARGS = FLAGS.parse()


@app.cell
def _():
    return


if __name__ == "__main__":
    app.run()
"""


def tiny_app(folder, steps_line="    STEPS = 10", name="tiny.py"):
    path = folder / name
    path.write_text(TINY_APP.format(flags_line=steps_line), encoding="utf-8")
    return path


@pytest.mark.parametrize("stem", ["arrays_devices", "tiny_mlp", "pytrees", "flax_nnx"])
def test_flags_read_from_the_source_are_the_apps_own_help(stem, run_app):
    """The header's flags, read from the source, equal what `python app.py --help` prints (a
    handful: each --help starts the app's imports; apps using a module's constants among them)."""
    app = curriculum.APPS_DIR / f"{stem}.py"
    flags = export.static_flags(app.read_text(encoding="utf-8"))
    assert flags is not None
    assert export.help_of(flags, app.name) == app_help(run_app, app)


def test_most_apps_export_without_starting_jax():
    """Reading every app's flags imports neither JAX nor marimo and leaves only apps whose
    defaults are computed (jax.device_count(), a module's computed tuple) to --help."""
    code = (
        "import pathlib, sys\n"
        "from tpu_scripts import export\n"
        "apps = sorted(pathlib.Path(sys.argv[1]).glob('*.py'))\n"
        "read = [a for a in apps if export.static_flags(a.read_text()) is not None]\n"
        "print(len(read), len(apps), 'jax' in sys.modules or 'marimo' in sys.modules)\n"
    )
    result = run("-c", code, str(curriculum.APPS_DIR))
    assert result.returncode == 0, result.stderr[-3000:]
    read, total, jax_or_marimo = result.stdout.split()
    assert jax_or_marimo == "False"
    assert int(read) >= 0.7 * int(total), result.stdout
    # random_keys' --devices defaults to min(8, jax.device_count()): only its --help knows
    source = (curriculum.APPS_DIR / "random_keys.py").read_text(encoding="utf-8")
    assert export.static_flags(source) is None


@pytest.mark.parametrize(
    ("steps_line", "static"),
    [
        ("    STEPS = 10", True),
        ("    STEPS = min(10, 2 * 8)", True),
        ("    STEPS = int(os.environ.get('STEPS', 10))", False),  # read at run time
        ("    STEPS = arrays_devices.row_sums(3)", False),  # a library function
        ("    STEPS = 10\n    STEPS = len(os.sep) * 10", False),  # reassigned from a module
        ("    STEPS = 10\n    def STEPS():\n        return 1", False),
        ("    STEPS = 1000", False),  # out of its bounds: the app's own --help says why
    ],
)
def test_static_flags_take_constants_only(tmp_path, steps_line, static):
    flags = export.static_flags(tiny_app(tmp_path, steps_line).read_text())
    assert (flags is not None) == static
    if static:
        assert flags.flags["width"].default == 32 and flags.flags["width"].hi == 64
        assert flags.flags["dtype"].choices == ("float32", "bfloat16", "float16", "int32")


def test_help_is_kept_by_source_hash_and_asked_again_when_the_source_changes(
    tmp_path, monkeypatch, run_app
):
    cache = tmp_path / "cache"
    app = tiny_app(tmp_path, "    STEPS = int(os.environ.get('TINY_STEPS', 10))")
    text, how = export.flags_help(app, cache)
    assert how == "--help" and "--steps STEPS" in text and "(default: 10)" in text
    assert text == app_help(run_app, app)

    def no_run(path, timeout_s=120):
        raise AssertionError("--help ran again for an unchanged app")

    monkeypatch.setattr(export, "run_help", no_run)
    assert export.flags_help(app, cache) == (text, "cache")
    monkeypatch.undo()
    app.write_text(app.read_text().replace("'TINY_STEPS', 10", "'TINY_STEPS', 12"))
    changed, how = export.flags_help(app, cache)
    assert how == "--help" and "(default: 12)" in changed
    assert len(list(cache.glob("*.txt"))) == 2


def test_export_many_says_each_app_as_it_is_done_and_the_time_left(tmp_path):
    apps = [tiny_app(tmp_path, name=f"tiny_{i}.py") for i in range(3)]
    pairs = [(app, tmp_path / "out" / app.name) for app in apps]
    ticks = iter(range(0, 100, 2))  # each reading of the clock 2 s after the last
    lines = []
    written = export.export_many(
        pairs, tmp_path / "cache", workers=1, say=lines.append, clock=lambda: next(ticks)
    )
    assert written == [script for _, script in pairs] and all(p.is_file() for p in written)
    assert [line.split(" (")[0] for line in lines] == [
        f"# exported {i}/3 tiny_{i - 1}.py" for i in (1, 2, 3)
    ]
    assert "flags from source; 2.0 s, about 4 s left" in lines[0]
    assert lines[-1].endswith("6.0 s)")
    assert "--steps STEPS" in written[0].read_text()
