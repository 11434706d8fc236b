"""A learner's code answer runs in its own process: the course's solutions cannot be reached
from it (by import, importlib, runpy, a path, the grader's /proc, a subprocess), every way it
can end is that answer's feedback, and what comes back is validated JSON."""

from __future__ import annotations

import importlib
import json
import pathlib
import socket
import sys

import numpy as np
import pytest

from core import curriculum
from core.assessment import paper, sandbox, sandbox_child
from core.assessment.items import _STOPPED, CodeItem

CODE = {item.id: item for item in paper.ITEMS.values() if isinstance(item, CodeItem)}
GAE = CODE["reinforcement_learning.gae_truncation"]
SOLUTION = pathlib.Path(importlib.import_module(GAE.solution_module).__file__)
HIDDEN_TESTS = pathlib.Path(sys.modules[type(GAE).__module__].__file__)

PROBE = '''
import glob, importlib, os, runpy, socket, subprocess, sys


def editable_finder():
    """Put back the finder of an editable install, which maps the course's packages."""
    for folder in sys.path:
        for path in glob.glob(os.path.join(folder, "__editable__*finder.py")):
            importlib.import_module(os.path.basename(path)[:-3]).install()
            return importlib.import_module("core.assessment.solutions.gae").gae
    raise LookupError("no editable install")


def from_the_project(repo):
    sys.path.insert(0, repo)
    return importlib.import_module("core.assessment.solutions.causal_attention")


def probe(solution, hidden_tests, repo, port):
    parent = os.getppid()
    attempts = {
        "import": lambda: __import__("core.assessment.solutions.gae", fromlist=["gae"]),
        "importlib": lambda: importlib.import_module("core.assessment.solutions.gae"),
        "runpy.run_module": lambda: runpy.run_module("core.assessment.solutions.gae"),
        "the project on sys.path": lambda: from_the_project(repo),
        "an editable install's finder": editable_finder,
        "open by path": lambda: open(solution).read(),
        "runpy.run_path": lambda: runpy.run_path(solution),
        "the hidden tests' references": lambda: open(hidden_tests).read(),
        "list the project": lambda: os.listdir(repo),
        "the grader's root in /proc": lambda: open(f"/proc/{parent}/root{solution}").read(),
        "the grader's environment": lambda: open(f"/proc/{parent}/environ", "rb").read(),
        "a subprocess": lambda: subprocess.run(
            ["cat", solution], capture_output=True, check=True
        ).stdout,
        "write into the project": lambda: open(os.path.join(repo, "planted.txt"), "w"),
        "signal the grader": lambda: os.kill(parent, 0),
        "TCP to the grader": lambda: socket.create_connection(("127.0.0.1", port), 5),
    }
    results = {}
    for name, attempt in attempts.items():
        try:
            value = attempt()
        except BaseException as error:
            results[name] = "blocked: " + type(error).__name__
        else:
            results[name] = "REACHED: " + repr(value)[:120]
    return results
'''
ALWAYS = ("import", "importlib", "runpy.run_module")  # with or without Landlock


def test_the_course_cannot_be_reached_from_an_answer(tmp_path):
    """One answer tries every way to the reference solutions (and to the grader) it can."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        with sandbox.Child() as child:
            probe = child.load(PROBE, "probe")
            results = probe(
                str(SOLUTION),
                str(HIDDEN_TESTS),
                str(curriculum.REPO_ROOT),
                listener.getsockname()[1],
            )
            confinement = child.confinement
    finally:
        listener.close()
    assert not (curriculum.REPO_ROOT / "planted.txt").exists()
    for name in ALWAYS:
        assert results[name].startswith("blocked"), (name, results[name])
    if confinement.startswith("unconfined"):
        pytest.skip(f"{confinement}: reads by path, signals and TCP are not confined here")
    guarded = {n: r for n, r in results.items()}
    if "TCP" not in confinement:
        guarded.pop("TCP to the grader")
    if "signals" not in confinement:
        guarded.pop("signal the grader")
    reached = {n: r for n, r in guarded.items() if not r.startswith("blocked")}
    assert not reached, reached


def _outcome(source: str, **limits) -> tuple:
    run = GAE.run(3, source, limits=sandbox.Limits(**limits))
    assert len(run.tests) == 1 and not run.tests[0].passed, run.tests
    return run.tests[0], run


@pytest.mark.parametrize(
    ("source", "status", "words"),
    [
        ("import sys\nsys.exit(0)\n", "exit", "SystemExit(0)"),
        ("def gae(*args, **kwargs):\n    raise SystemExit(3)\n", "exit", "SystemExit(3)"),
        ("def gae(*args, **kwargs):\n    quit()\n", "exit", "SystemExit(None)"),
        ("def gae(*args, **kwargs):\n    raise KeyboardInterrupt\n", "exit", "KeyboardInterrupt"),
        (
            "import os\ndef gae(*args, **kwargs):\n    print('leaving', flush=True)\n"
            "    os._exit(0)\n",
            "ended",
            "exit status 0",
        ),
        (
            "import ctypes\ndef gae(*args, **kwargs):\n    return ctypes.string_at(0)\n",
            "crashed",
            "SIGSEGV",
        ),  # fmt: skip
        ("def gae(*args, **kwargs):\n    return bytearray(64 * 2**30)\n", "memory", "MemoryError"),
        (
            "import os\ndef gae(*args, **kwargs):\n    for fd in range(3, 64):\n        try:\n"
            "            os.write(fd, b'{\"ok\": true}\\n')\n        except OSError:\n"
            "            pass\n    return 0.0\n",
            "malformed",
            "cannot read",
        ),
    ],
    ids=[
        "exit at import",
        "exit in the call",
        "quit",
        "interrupt",
        "os._exit",
        "segfault",
        "memory",
        "writes into the channel",
    ],  # fmt: skip
)
def test_every_end_of_an_answer_is_its_feedback(source, status, words):
    if status == "memory" and not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_AS is enforced on Linux only: the allocation would be real")
    test, run = _outcome(source)
    assert test.name == _STOPPED[status] and words in test.message, test
    assert not run.ungraded  # the answer's outcome, not the grader's
    if status == "ended":
        assert "leaving" in run.output


def test_an_answer_past_its_time_limit_is_stopped():
    test, _run = _outcome("def gae(*args, **kwargs):\n    while True:\n        pass\n", time_s=3)
    assert test.name == _STOPPED["timeout"] and "after 3 s" in test.message, test


def test_a_process_that_cannot_start_is_ungraded_not_failed():
    """The answer's process not ready in time (no process starts Python and JAX in 10 ms):
    the grader's failure, said so, not counted against the answer, and not kept: the next
    grading of the same answer runs it again."""
    source = GAE.stub + "\n# edited\n"
    try:
        sandbox.use_limits(sandbox.Limits(start_s=0.01))
        feedback = GAE.grade(3, source)
    finally:
        sandbox.use_limits(sandbox.DEFAULT_LIMITS)
    assert not feedback.passed and "did not start" in feedback.ungraded, feedback
    assert feedback.summary.startswith("not graded:") and _STOPPED["grader"] in feedback.detail
    again = GAE.grade(3, source)
    assert not again.ungraded and "NotImplementedError" in again.detail, again.detail


# --- the wire -------------------------------------------------------------------------------


def _reply(value) -> str:
    return json.dumps({"ok": True, "value": value})


@pytest.mark.parametrize(
    "value",
    [
        {"t": "ndarray", "dtype": "object", "shape": [1], "data": "AA==", "scalar": False},
        {"t": "ndarray", "dtype": "float32", "shape": [4], "data": "AAAA", "scalar": False},
        {"t": "ndarray", "dtype": "float32", "shape": [2**40, 2**40], "data": "", "scalar": False},
        {"t": "int", "v": 10**30},
        {"t": "float", "v": "1e400"},
        {"t": "str", "v": "x" * 200_000},
        {"t": "code", "v": "import os"},
        {"t": "other", "type": "x", "repr": "y" * 10_000},
    ],
)
def test_a_reply_that_does_not_validate_is_refused(value):
    with pytest.raises(sandbox.pydantic.ValidationError):
        sandbox.Reply.model_validate_json(_reply(value))


def test_a_reply_nested_past_any_use_is_refused():
    deep = '{"t": "list", "items": [' * 100_000 + "]}" * 100_000
    with pytest.raises(sandbox.pydantic.ValidationError):
        sandbox.Reply.model_validate_json(f'{{"ok": true, "value": {deep}}}')


def test_values_cross_the_wire_unchanged():
    import jax
    import ml_dtypes

    devices = list(jax.devices())
    value = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "h": np.array([1.5, -0.0], dtype=ml_dtypes.bfloat16),
        "scalar": np.float64(2.5),
        "items": (1, 2.0, float("nan"), None, True, "text", [np.int8(-3)]),
        7: jax.numpy.arange(3),
    }
    wire = sandbox.Reply.model_validate_json(_reply(sandbox_child.encode(value, devices)))
    back = sandbox_child.decode(wire.value.model_dump(), devices)
    np.testing.assert_array_equal(back["w"], value["w"])
    assert back["h"].dtype == value["h"].dtype and back["h"].tobytes() == value["h"].tobytes()
    assert back["scalar"] == 2.5 and isinstance(back["scalar"], np.float64)
    assert back["items"][:2] == (1, 2.0) and np.isnan(back["items"][2])
    assert back["items"][3:6] == (None, True, "text") and back["items"][6][0] == -3
    assert isinstance(back[7], jax.Array) and back[7].tolist() == [0, 1, 2]
    opaque = sandbox_child.decode(sandbox_child.encode(print, devices), devices)
    assert "builtin_function_or_method" in repr(opaque)


# --- where the child may read ----------------------------------------------------------------


def test_the_read_roots_hold_python_and_never_the_project():
    roots = [pathlib.Path(r) for r in sandbox.read_roots()]
    project = curriculum.REPO_ROOT.resolve()
    prefix = pathlib.Path(sys.prefix).resolve()
    assert prefix in roots or any(sandbox._inside(prefix, r) for r in roots)
    for root in roots:
        assert not sandbox._inside(project, root), root  # no root holds the project
        assert not sandbox._inside(root, project) or sandbox._inside(root, prefix), root


def test_a_root_that_holds_the_project_is_opened_around_it(tmp_path):
    (tmp_path / "src" / "course" / "core").mkdir(parents=True)
    (tmp_path / "src" / "other").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "notes.txt").write_text("")
    found = sandbox._around(tmp_path, tmp_path / "src" / "course")
    assert sorted(found) == [tmp_path / "lib", tmp_path / "notes.txt", tmp_path / "src" / "other"]


def test_the_child_imports_from_the_graders_path_without_the_project(tmp_path, monkeypatch):
    """-I drops PYTHONPATH, where an installation may keep JAX (a TPU VM's image does): the
    child gets the grader's entries back, never the project's."""
    project = curriculum.REPO_ROOT
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(project), str(project / "core"), ""])
    assert sandbox.import_path() == [str(tmp_path)]
