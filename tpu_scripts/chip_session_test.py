"""chip_session: a plan run over several calls, with real processes (no timing is asserted)."""

from __future__ import annotations

import json
import pathlib
import sys
import tarfile
import tempfile

import pytest

from tpu_scripts import chip_session


def _append(path: pathlib.Path, text: str) -> list[str]:
    """A command that appends ``text`` to ``path`` (how a test counts the runs of a step)."""
    code = f"open({str(path)!r}, 'a').write({text!r} + '\\n')"
    return [sys.executable, "-c", code]


def _write_plan(tmp_path: pathlib.Path, plan: dict) -> pathlib.Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path, monkeypatch):
    """The setup marker lives in this test's own temporary folder, never the machine's."""
    machine = tmp_path / "machine-tmp"
    machine.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(machine))
    return machine


def test_a_plan_continues_in_the_next_call_from_its_state(tmp_path):
    runs = tmp_path / "runs.txt"
    result = tmp_path / "result.json"
    plan = {
        "setup": _append(runs, "setup"),
        "steps": [
            {
                "name": "first",
                "argv": [sys.executable, "-c", f"open({str(result)!r}, 'w').write('{{}}')"],
                "timeout_s": 60,
                "outputs": [str(tmp_path / "result*.json")],
            },
            {"name": "long", "argv": _append(runs, "long"), "timeout_s": 1000},
            {"name": "last", "argv": _append(runs, "last"), "timeout_s": 60},
        ],
    }
    path = _write_plan(tmp_path, plan)
    first_out = tmp_path / "call1"
    # the budget holds "first" and "last" but not "long": it waits, "last" still runs
    assert chip_session.main([str(path), "--out", str(first_out), "--budget-s", "500"]) == 10
    state = json.loads((first_out / "state.json").read_text())
    assert sorted(state["done"]) == ["first", "last"]
    assert state["calls"][0]["deferred"] == ["long"] and state["calls"][0]["setup"] == "exit 0"
    assert state["done"]["first"]["exit"] == 0 and not state["done"]["first"]["timed_out"]
    with tarfile.open(first_out / "outputs.tar.gz") as archive:
        assert archive.getnames() == [f"first/{str(result).lstrip('/')}"]
    assert "=== first:" in (first_out / "log.txt").read_text()
    # the next call, with the state brought back: only "long", and setup not again (a warm
    # machine keeps its marker)
    second_out = tmp_path / "call2"
    argv = [str(path), "--state", str(first_out / "state.json"), "--out", str(second_out)]
    assert chip_session.main([*argv, "--budget-s", "2000"]) == 0
    assert runs.read_text().split() == ["setup", "last", "long"]
    state = json.loads((second_out / "state.json").read_text())
    assert sorted(state["done"]) == ["first", "last", "long"] and len(state["calls"]) == 2
    assert state["calls"][1]["setup"] == "already done on this machine"


def test_a_fresh_machine_runs_setup_again_and_a_failed_setup_runs_nothing(tmp_path, own_tempdir):
    runs = tmp_path / "runs.txt"
    step = {"name": "a", "argv": _append(runs, "a"), "timeout_s": 60}
    plan = {"setup": _append(runs, "setup"), "steps": [step]}
    path = _write_plan(tmp_path, plan)
    assert chip_session.main([str(path), "--out", str(tmp_path / "o1")]) == 0
    for marker in own_tempdir.iterdir():  # the machine was given back: a bare one next
        marker.unlink()
    assert chip_session.main([str(path), "--out", str(tmp_path / "o2"), "--redo", "a"]) == 0
    assert runs.read_text().split() == ["setup", "a", "setup", "a"]

    failing = {"setup": [sys.executable, "-c", "raise SystemExit(3)"], "steps": plan["steps"]}
    path = _write_plan(tmp_path, failing)
    assert chip_session.main([str(path), "--out", str(tmp_path / "o3")]) == 10
    state = json.loads((tmp_path / "o3" / "state.json").read_text())
    assert state["done"] == {} and state["calls"][0]["setup"] == "exit 3"
    assert runs.read_text().split() == ["setup", "a", "setup", "a"]


def test_a_newly_carried_setup_input_runs_setup_again_on_a_warm_machine(tmp_path, monkeypatch):
    """One wheelhouse part a call: the second part's arrival reruns setup, a repeat does not."""
    root = tmp_path / "checkout"
    (root / "wheels" / "part-01").mkdir(parents=True)
    (root / "wheels" / "part-01" / "manifest.json").write_text("{}")
    monkeypatch.setattr(chip_session, "ROOT", root)
    runs = tmp_path / "runs.txt"
    step = {"name": "a", "argv": _append(runs, "a"), "timeout_s": 60}
    plan = {"setup": _append(runs, "setup"), "setup_inputs": ["wheels/*/*"], "steps": [step]}
    path = _write_plan(tmp_path, plan)
    for call in ("o1", "o2"):
        assert chip_session.main([str(path), "--out", str(tmp_path / call), "--redo", "a"]) == 0
    (root / "wheels" / "part-02").mkdir()
    (root / "wheels" / "part-02" / "manifest.json").write_text("{}")
    assert chip_session.main([str(path), "--out", str(tmp_path / "o3"), "--redo", "a"]) == 0
    assert runs.read_text().split() == ["setup", "a", "a", "setup", "a"]
    state = json.loads((tmp_path / "o2" / "state.json").read_text())
    assert state["calls"][-1]["setup"] == "already done on this machine"


def test_a_step_past_its_timeout_is_killed_with_its_children(tmp_path):
    """The step starts a grandchild that would outlive it; both are gone once it is killed."""
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)"
    )
    plan = {"steps": [{"name": "hangs", "argv": [sys.executable, "-c", code], "timeout_s": 3}]}
    out = tmp_path / "out"
    assert chip_session.main([str(_write_plan(tmp_path, plan)), "--out", str(out)]) == 0
    done = json.loads((out / "state.json").read_text())["done"]["hangs"]
    assert done["timed_out"] and done["exit"] is None and "past its timeout" in done["tail"]
    assert _dead(int(pid_file.read_text()))


def _dead(pid: int, patience_s: float = 30.0) -> bool:
    """Whether process ``pid`` is gone or a zombie (killed, not yet reaped by its new parent),
    waiting at most ``patience_s`` for the kill to land (it is sent before the step returns)."""
    import time

    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_env_names_the_checkout_root_and_the_hosts_own_values(tmp_path, monkeypatch):
    monkeypatch.setenv("HOST_PATH", "/opt/host")
    seen = tmp_path / "seen.txt"
    code = f"import os; open({str(seen)!r}, 'w').write(os.environ['LAB_PATH'])"
    step = {"name": "env", "argv": [sys.executable, "-c", code], "timeout_s": 60}
    plan = {"env": {"LAB_PATH": "$HOST_PATH:{root}:/tmp/site"}, "steps": [step]}
    assert chip_session.main([str(_write_plan(tmp_path, plan)), "--out", str(tmp_path / "o")]) == 0
    assert seen.read_text() == f"/opt/host:{chip_session.ROOT}:/tmp/site"


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ({"steps": []}, "non-empty list 'steps'"),
        ({"steps": [{"argv": ["true"], "timeout_s": 1}]}, "needs a 'name'"),
        ({"steps": [{"name": "a", "argv": "true", "timeout_s": 1}]}, "'argv' must be"),
        ({"steps": [{"name": "a", "argv": ["true"], "timeout_s": 0}]}, "'timeout_s' must be"),
        (
            {"steps": [{"name": "a", "argv": ["true"], "timeout_s": 1}] * 2},
            "used twice",
        ),
        ({"steps": [{"name": "a", "argv": ["true"], "timeout_s": 1}], "stepz": []}, "unknown keys"),
        ({"setup": [], "steps": [{"name": "a", "argv": ["true"], "timeout_s": 1}]}, "'setup'"),
        (
            {"setup_inputs": ["w/*"], "steps": [{"name": "a", "argv": ["true"], "timeout_s": 1}]},
            "'setup_inputs'",
        ),
    ],
)
def test_a_bad_plan_is_refused_before_anything_runs(tmp_path, capsys, plan, words):
    out = tmp_path / "out"
    assert chip_session.main([str(_write_plan(tmp_path, plan)), "--out", str(out)]) == 2
    assert words in capsys.readouterr().err and not out.exists()


def test_a_bad_state_or_redo_is_refused(tmp_path, capsys):
    plan = _write_plan(tmp_path, {"steps": [{"name": "a", "argv": ["true"], "timeout_s": 1}]})
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"finished": []}))
    out = tmp_path / "out"
    assert chip_session.main([str(plan), "--state", str(state), "--out", str(out)]) == 2
    assert "not a chip_session state" in capsys.readouterr().err
    assert chip_session.main([str(plan), "--out", str(out), "--redo", "b"]) == 2
    assert "does not have: ['b']" in capsys.readouterr().err and not out.exists()


PLANS = sorted((chip_session.ROOT / "tpu_scripts" / "plans").glob("*.json"))


def _commands(step: dict) -> list[list[str]]:
    """The python commands a step runs: its argv, or each `python3 ...` of a `bash -c` line."""
    import shlex

    argv = step["argv"]
    if argv[:2] != ["bash", "-c"]:
        return [argv]
    parts = [shlex.split(part) for part in argv[2].split("&&")]
    return [part for part in parts if part and part[0] == "python3"]


@pytest.mark.parametrize("path", PLANS, ids=[p.stem for p in PLANS])
def test_each_kept_plan_names_scripts_flags_and_lessons_that_exist(path):
    """A kept plan cannot rot unseen: it validates, and each command's script or module is
    in the checkout and accepts the flags given (its own argparse parser), each test path
    exists, each lesson has an app."""
    from core import curriculum
    from tpu_scripts import __main__ as tpu_main
    from tpu_scripts import (
        byte_transformer_run_tpu,
        byte_transformer_tpu,
        flash_vs_jax,
        matmul_blocks_tpu,
    )

    parsers = {
        "tpu_scripts/flash_vs_jax.py": flash_vs_jax.build_parser,
        "tpu_scripts/matmul_blocks_tpu.py": matmul_blocks_tpu.build_parser,
        "tpu_scripts/byte_transformer_tpu.py": byte_transformer_tpu.build_parser,
        "tpu_scripts/byte_transformer_run_tpu.py": byte_transformer_run_tpu.build_parser,
    }
    plan = chip_session.load_plan(path)
    for step in plan["steps"]:
        commands = _commands(step)
        assert commands, f"{step['name']}: no python3 command"
        for command in commands:
            if command[1] == "-m" and command[2] == "tpu_scripts":
                args = tpu_main.build_parser().parse_args(command[3:])
                for slug in getattr(args, "lessons", "").split(","):
                    assert curriculum.app_path(slug).is_file(), f"{step['name']}: {slug}"
            elif command[1] == "-m":
                assert command[2] == "tpu_scripts.pytest_on_chip", step["name"]
                paths = [a for a in command[3:] if a.startswith("core/")]
                assert paths and all((chip_session.ROOT / p).exists() for p in paths)
            else:
                assert (chip_session.ROOT / command[1]).is_file(), f"{step['name']}: {command}"
                parsers[command[1]]().parse_args(command[2:])


def test_outputs_keep_their_paths_so_same_named_files_do_not_collide(tmp_path):
    """A course run's bundles are all results.json: each is packed under its own path."""
    runs = tmp_path / "runs"
    code = (
        "import pathlib; "
        f"[(pathlib.Path({str(runs)!r}) / s).mkdir(parents=True) for s in ('jit', 'vmap')]; "
        f"[(pathlib.Path({str(runs)!r}) / s / 'results.json').write_text(s) "
        "for s in ('jit', 'vmap')]"
    )
    step = {"name": "course", "argv": [sys.executable, "-c", code], "timeout_s": 60,
            "outputs": [str(runs / "*" / "results.json")]}  # fmt: skip
    out = tmp_path / "out"
    assert (
        chip_session.main([str(_write_plan(tmp_path, {"steps": [step]})), "--out", str(out)]) == 0
    )
    with tarfile.open(out / "outputs.tar.gz") as archive:
        names = archive.getnames()
        texts = {n: archive.extractfile(n).read().decode() for n in names}
    base = f"course/{str(runs).lstrip('/')}"
    assert texts == {f"{base}/jit/results.json": "jit", f"{base}/vmap/results.json": "vmap"}
