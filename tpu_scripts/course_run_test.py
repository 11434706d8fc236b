"""course-run: lessons resolved and refused before anything runs; the record; end to end with
the fake gcloud (tpu_scripts/fake_gcloud.py), whose two workers are the local multi-process
rehearsal (2 JAX processes x 4 CPU devices)."""

import os
import pathlib
import shutil
import sys

import pytest

from core import curriculum
from tpu_scripts import __main__ as cli
from tpu_scripts import compare, course_run, fake_gcloud, lesson_choice
from tpu_scripts.wheelhouse import fake_wheels, manifest

VM = ["--name", "lab-vm", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-16"]
DATE = "2026-12-01"

# A lesson app that passes on process 0 and fails on process 1 of a multi-host job (or
# everywhere, with FAIL_EVERYWHERE = True): a failure that only one worker sees.
PLANTED = """import marimo

app = marimo.App(width="medium", app_title="planted")

with app.setup:
    import jax

    from core import lab

    lab.use_cpu_devices()
    FLAGS = lab.Flags(lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9), description="planted")
    ARGS = FLAGS.parse()
    FAIL_ON = {fail_on}


@app.cell
def _():
    if jax.process_index() in FAIL_ON:
        raise RuntimeError("planted failure on worker " + str(jax.process_index()))
    check = lab.Check("planted lesson", 0.0, 1e-6)
    check
    return (check,)


@app.cell
def test_check(check):
    check.assert_passed()


if __name__ == "__main__":
    app.run()
"""


def run_cli(*argv) -> int:
    return cli.main(list(argv))


# ---------------------------------------------------------------------------------------
# Which lessons, refused before anything runs


def test_lessons_resolve_from_phases_paths_packages_and_slugs(tmp_path):
    for lesson in curriculum.all_lessons():  # every app present (some are not written yet)
        curriculum.app_path(lesson.slug, tmp_path).write_text("")

    def resolve(spec):
        return lesson_choice.resolve_lessons(spec, tmp_path)

    setup = [lesson.slug for lesson in curriculum.PHASES[0].lessons]
    assert resolve("Setup & first steps") == setup
    assert resolve("setup, vmap , setup") == [*setup, "vmap"]
    # a phase title that holds a comma is one name
    post = next(p for p in curriculum.PHASES if p.title.startswith("Post-training"))
    assert resolve(f"vmap,{post.title.upper()}") == ["vmap", *(x.slug for x in post.lessons)]
    path = curriculum.LEARNING_PATHS[1]
    every = [x.slug for t in path.phase_titles for p in curriculum.PHASES if p.title == t
             for x in p.lessons]  # fmt: skip
    assert resolve(path.title) == every


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--lessons", "no_such_lesson", *VM], "unknown lesson name(s): 'no_such_lesson'"),
        (["--lessons", " , "], "--lessons is empty"),
        (["--lessons", "vmap"], "needs --name and --accelerator-type"),
        (
            ["--lessons", "vmap", "--name", "vm", "--accelerator-type", "v9-8"],
            "unknown accelerator type 'v9-8'",
        ),
        (
            ["--lessons", "vmap", "--name", "vm", "--accelerator-type", "tpu7x:2x2x1"],
            "not created through the Cloud TPU API",
        ),
        (
            ["--lessons", "vmap", "--name", "vm", "--accelerator-type", "v6e-8"],
            "is not offered in zone 'us-west4-a'",
        ),
        (["--lessons", "vmap", "--local", "--date", "yesterday"], "is not YYYY-MM-DD"),
    ],
)
def test_bad_input_is_refused_with_exit_2_before_anything_runs(argv, words, tmp_path, capsys):
    assert run_cli("course-run", "--runs-root", str(tmp_path), *argv) == 2
    assert words in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_lesson_without_its_app_is_refused_with_the_lessons_that_have_one(tmp_path, capsys):
    (tmp_path / "vmap.py").write_text("")
    argv = ["course-run", "--lessons", "vmap,jit", "--local", "--apps-dir", str(tmp_path)]
    assert run_cli(*argv, "--runs-root", str(tmp_path / "runs")) == 2
    err = capsys.readouterr().err
    assert "no app for jit" in err and "lessons with an app: vmap" in err


def test_the_remote_commands_run_every_worker_into_its_own_bundle():
    multi = course_run.remote_run_command("vmap", multi_host=True)
    assert multi.startswith("cd ~/jax-tpu-lab && rm -rf results/vmap && ")
    assert "JAX_TPU_LAB_MULTIHOST=1 .venv/bin/python scripts/vmap.py --out results/vmap" in multi
    assert "MULTIHOST" not in course_run.remote_run_command("vmap", multi_host=False)
    install = course_run.remote_install_command("jax_tpu_lab-0.1.0-py3-none-any.whl")
    assert '--reinstall-package jax-tpu-lab "./jax_tpu_lab-0.1.0-py3-none-any.whl[tpu]"' in install


def test_without_gcloud_the_steps_are_printed_and_nothing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcloud here
    runs = tmp_path / "runs"
    assert run_cli("course-run", "--lessons", "setup", *VM, "--runs-root", str(runs)) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "describe lab-vm" in out
    for slug in ("arrays_devices", "virtual_devices"):
        assert f"scripts/{slug}.py --out results/{slug}" in out
        assert f"jax-tpu-lab/results/{slug}" in out and "--worker=1" in out
    assert "launch delete --name lab-vm --zone us-west4-a" in out
    assert "tpu-vm delete" not in out  # delete is the learner's explicit step
    assert not runs.exists()


# ---------------------------------------------------------------------------------------
# End to end: the fake gcloud, two workers


def ssh_commands(root) -> list[str]:
    return [c[-1].removeprefix("--command=") for c in fake_gcloud.calls(root) if c[3] == "ssh"]


def fake_vm(tmp_path, monkeypatch) -> pathlib.Path:
    """The fake gcloud first on PATH (its VM's workers under tmp/fake); an empty apps folder."""
    fake_gcloud.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TPU_ROOT", str(tmp_path / "fake"))
    apps = tmp_path / "apps"
    apps.mkdir()
    return apps


def test_course_run_end_to_end_with_two_workers(tmp_path, monkeypatch, capsys):
    apps = fake_vm(tmp_path, monkeypatch)
    shutil.copy(curriculum.app_path("arrays_devices"), apps)
    # virtual_devices stands in for a lesson that fails on worker 1 only
    (apps / "virtual_devices.py").write_text(PLANTED.format(fail_on="{1}"))
    runs = tmp_path / "runs"
    argv = ["course-run", "--lessons", "arrays_devices,virtual_devices", *VM]
    argv += ["--runs-root", str(runs), "--date", DATE, "--apps-dir", str(apps)]
    run_dir = runs / "tpu" / "lab-vm" / DATE

    # 1. The second lesson fails on one worker: the run stops with its output, exit 1.
    assert run_cli(*argv) == 1
    out, err = capsys.readouterr()
    assert "[1/2] arrays_devices: passed" in out
    assert "FAILED: virtual_devices (worker 1: error; exit code 1)" in err
    assert "RuntimeError: planted failure on worker 1" in err
    assert "launch delete --name lab-vm --zone us-west4-a" in out
    record = course_run.load_record(run_dir / course_run.RECORD)
    assert record["status"] == "failed"
    assert record["vm"]["accelerator_type"] == "v5litepod-16" and record["vm"]["hosts"] == 2
    assert record["vm"]["runtime_version"] == "v2-alpha-tpuv5-lite"
    assert record["versions"]["jax"] and record["versions"]["processes"] == "2"
    passed, failed = record["lessons"]
    assert failed["status"] == "failed" and "planted failure" in failed["output_tail"]
    assert [(w["worker"], w["status"]) for w in failed["workers"]] == [(0, "passed"), (1, "error")]
    assert passed["status"] == "passed"
    bundle = course_run.results.load(run_dir / "arrays_devices" / "results.json")
    assert bundle["lesson"] == "arrays_devices" and bundle["receipt"]["process_count"] == 2
    worker = course_run.results.load(run_dir / "arrays_devices/workers/1/results.json")
    assert worker["status"] == "passed"
    commands = ssh_commands(tmp_path / "fake")
    assert any("uv pip install" in c and "[tpu]" in c for c in commands)  # sent, fake skipped it
    assert sum(".py --out results/" in c for c in commands) == 2
    calls = fake_gcloud.calls(tmp_path / "fake")
    assert all(c[3] != "delete" for c in calls)
    scps = [c for c in calls if c[3] == "scp" and c[-1] == "--worker=all"]
    assert any(c[4].endswith("jax_tpu_lab-0.1.0-py3-none-any.whl") for c in scps)
    assert course_run.to_run(record, run_dir, force=False) == ["virtual_devices"]

    # 2. The lesson that came back is not run again (virtual_devices would be: it failed).
    before = len(calls)
    again = ["course-run", "--lessons", "arrays_devices", *argv[3:]]
    assert run_cli(*again) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert len(fake_gcloud.calls(tmp_path / "fake")) == before

    # 3. The CPU side here (the planted lesson passes on one process), then the comparison.
    local = ["course-run", "--local", "--lessons", "virtual_devices", "--runs-root", str(runs)]
    assert run_cli(*local, "--date", DATE, "--apps-dir", str(apps)) == 0
    assert (runs / "local" / DATE / "virtual_devices" / "results.json").is_file()
    capsys.readouterr()
    report = tmp_path / "compare.md"
    assert run_cli("compare", str(run_dir), "--markdown", str(report)) == 0
    text = report.read_text()
    arrays, virtual = text.split("\n## arrays_devices", 1)[1].split("\n## virtual_devices")
    assert "TPU: cpu (cpu x 8, 2 processes)" in virtual and "CPU: cpu (cpu x 8)" in virtual
    assert "| planted lesson | PASS error 0 | PASS error 0 |" in virtual
    assert "recorded this lesson as failed (worker 0: passed, worker 1: error)" in virtual
    assert "row sum-of-squares and mean in float32" in arrays
    assert "CPU: missing" in arrays  # no local run of it: missing, not invented
    assert "a rehearsal, not a TPU measurement" in arrays
    assert compare.lesson_slugs(run_dir, None) == ["arrays_devices", "virtual_devices"]
    assert pathlib.Path(run_dir / "arrays_devices" / "results.md").is_file()


# ---------------------------------------------------------------------------------------
# --keep-going, and a wheelhouse instead of the network

# A lesson that needs a module only a wheelhouse provides (fake_wheels' "offline_only").
NEEDS_WHEELHOUSE = PLANTED.replace(
    "    check = lab.Check(", "    import offline_only\n\n    check = lab.Check("
)


def test_keep_going_runs_every_lesson_and_reports_all_failures_at_the_end(tmp_path, capsys):
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "vmap.py").write_text(PLANTED.format(fail_on="{0}"))  # fails on this one process
    (apps / "jit.py").write_text(PLANTED.format(fail_on="set()"))
    runs = tmp_path / "runs"
    argv = ["course-run", "--local", "--lessons", "vmap,jit", "--runs-root", str(runs)]
    argv += ["--date", DATE, "--apps-dir", str(apps)]
    record_path = runs / "local" / DATE / course_run.RECORD

    # without it: the first failure stops the run; the table shows what ran
    assert run_cli(*argv) == 1
    out, err = capsys.readouterr()
    assert "FAILED: vmap" in err and "--keep-going runs them all" in err
    table = out[out.index("| lesson |") :]
    assert "| vmap | error |" in table and "RuntimeError: planted failure on worker 0" in table
    assert "| jit |" not in table
    assert [x["status"] for x in course_run.load_record(record_path)["lessons"]] == [
        "error",
        "pending",
    ]

    # with it: every lesson runs, the failures come at the end, exit 1
    assert run_cli(*argv, "--keep-going") == 1
    out, err = capsys.readouterr()
    assert "vmap error: RuntimeError: planted failure on worker 0 (going on: --keep-going)" in out
    assert "[2/2] jit: passed" in out
    rows = out[out.index("| lesson |") :].splitlines()
    assert rows[2].startswith("| vmap | error | ") and rows[2].endswith(
        "| RuntimeError: planted failure on worker 0 |"
    )
    assert rows[3].startswith("| jit | passed | ") and "PASS: planted lesson" in rows[3]
    assert "1 of 2 lesson(s) run did not pass: vmap" in err
    record = course_run.load_record(record_path)
    assert record["status"] == "failed"
    assert [x["status"] for x in record["lessons"]] == ["error", "passed"]


def _wheelhouse(tmp_path):
    wheel = fake_wheels.make_wheel(tmp_path / "src", "offline_only")
    parts = fake_wheels.wheelhouse(tmp_path / "wheelhouse", {"offline_only": wheel})
    return tmp_path / "wheelhouse", manifest.read(parts[0])["build"]


def test_a_tpu_vm_installs_from_the_wheelhouse_and_runs_offline(tmp_path, monkeypatch, capsys):
    apps = fake_vm(tmp_path, monkeypatch)
    (apps / "jit.py").write_text(NEEDS_WHEELHOUSE.format(fail_on="set()"))
    wheelhouse, build = _wheelhouse(tmp_path)
    runs = tmp_path / "runs"
    argv = ["course-run", "--lessons", "jit", *VM, "--wheelhouse", str(wheelhouse)]
    argv += ["--runs-root", str(runs), "--date", DATE, "--apps-dir", str(apps)]
    assert run_cli(*argv, "--dry-run") == 0
    dry = capsys.readouterr().out
    assert "copy the wheelhouse to every worker" in dry and "part-01" in dry and "--recurse" in dry
    assert "uv pip install" not in dry

    assert run_cli(*argv) == 0, capsys.readouterr()
    commands = ssh_commands(tmp_path / "fake")
    assert not any("uv pip install" in c for c in commands)
    install = next(c for c in commands if "wheelhouse install" in c)
    assert "python3 -m tpu_scripts wheelhouse install wheelhouse --target site" in install
    assert "--no-index --no-deps" in install and "--target project ./jax_tpu_lab-" in install
    run = next(c for c in commands if "scripts/jit.py" in c)
    assert '$HOME/jax-tpu-lab/project:$HOME/jax-tpu-lab/site" python3 scripts/jit.py' in run
    for worker in (0, 1):  # every worker installed the part, and the project from its wheel
        lab = tmp_path / "fake" / f"worker-{worker}" / "jax-tpu-lab"
        assert (lab / "site" / "offline_only.py").is_file()
        assert (lab / "project" / "core" / "lab" / "__init__.py").is_file()
        assert not list((lab / "project" / "core").rglob("*_test.py"))
    record = course_run.load_record(runs / "tpu" / "lab-vm" / DATE / course_run.RECORD)
    assert record["wheelhouse"] == build and record["lessons"][0]["status"] == "passed"


def test_a_local_run_installs_the_wheelhouse_first_and_its_lessons_see_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(sys, "path", list(sys.path))
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "jit.py").write_text(NEEDS_WHEELHOUSE.format(fail_on="set()"))
    wheelhouse, build = _wheelhouse(tmp_path)
    runs, site = tmp_path / "runs", tmp_path / "site"
    argv = ["course-run", "--local", "--lessons", "jit", "--wheelhouse", str(wheelhouse)]
    argv += ["--site", str(site), "--runs-root", str(runs), "--apps-dir", str(apps)]
    assert run_cli(*argv, "--date", DATE) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"all 1 part(s) of wheelhouse {build} are installed in {site}" in out
    assert os.environ["PYTHONPATH"].endswith(str(site.resolve()))
    record = course_run.load_record(runs / "local" / DATE / course_run.RECORD)
    assert record["wheelhouse"] == build and record["lessons"][0]["status"] == "passed"
    # a damaged part stops the run before anything runs
    next(wheelhouse.glob("part-01/*.whl")).write_bytes(b"not the wheel")
    assert run_cli(*argv, "--date", "2026-12-02", "--force") == 1
    assert "differ from their manifest" in capsys.readouterr().err
    assert not (runs / "local" / "2026-12-02").exists()
