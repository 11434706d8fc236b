"""tests/tools/app_runner.py runs a script as a fresh `python FILE ARGS` would (issue 27's CI cut).

The suite's headless app runs go through it; these tests hold it to a fresh interpreter's
behaviour: the same stdout, stderr and exit status, `__main__`, `sys.argv`, `sys.path[0]`, an
empty stdin, atexit handlers and non-daemon threads at shutdown, a traceback and status 1 on an
uncaught exception, and a timeout that kills the run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from core import curriculum, lab

PROBE = curriculum.REPO_ROOT / "tests" / "fixtures" / "app_runner_probe.py"


def _runner():
    path = curriculum.REPO_ROOT / "tests" / "tools" / "app_runner.py"
    spec = importlib.util.spec_from_file_location("app_runner_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh(argv, env, timeout=60):
    return subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("args", [[], ["3"], ["--raise"]], ids=["exit 0", "exit 3", "raises"])
def test_a_run_through_the_server_is_a_fresh_interpreter_run(args, run_app):
    env = lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu")
    forked = run_app([PROBE, *args], env=env, cwd=curriculum.REPO_ROOT, timeout=60)
    fresh = _fresh([PROBE, *args], env)
    assert (
        forked.returncode == fresh.returncode == {"3": 3, "--raise": 1}.get((args or ["0"])[0], 0)
    )
    assert forked.stdout == fresh.stdout, (forked.stdout, fresh.stdout)
    assert "name __main__" in forked.stdout and "path0 tests/fixtures" in forked.stdout
    assert "stdin ''" in forked.stdout
    assert "atexit ran" in forked.stdout and "thread finished" in forked.stdout
    if args == ["--raise"]:
        assert "RuntimeError: deliberate" in forked.stderr and "Traceback" in forked.stderr
    else:
        assert forked.stderr == fresh.stderr == "to stderr\n"


def test_the_server_forks_and_a_timeout_kills_the_run():
    runner = _runner()
    env = lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu")
    server = runner._server(env, str(curriculum.REPO_ROOT))
    assert server is not None, "the server refused to fork: nothing would be saved"
    with pytest.raises(subprocess.TimeoutExpired):
        runner.run([PROBE, "--sleep"], env=env, cwd=curriculum.REPO_ROOT, timeout=2)
    # The server is still there and runs the next script.
    after = runner.run([PROBE, "5"], env=env, cwd=curriculum.REPO_ROOT, timeout=60)
    assert after.returncode == 5 and runner._server(env, str(curriculum.REPO_ROOT)) is server
    runner._close_all()


def test_forking_is_refused_once_jax_has_started():
    # This test process has run JAX (the suite's other tests, or this call): no fork here.
    import jax

    jax.devices()
    assert _runner()._fork_problem() is not None


def test_a_server_that_refused_to_fork_is_not_started_again():
    runner = _runner()
    env = lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu")
    key = (tuple(sorted(env.items())), str(curriculum.REPO_ROOT))
    runner._SERVERS[key] = None  # as _server records a refusal
    assert runner._server(env, str(curriculum.REPO_ROOT)) is None
    fresh = runner.run([PROBE, "4"], env=env, cwd=curriculum.REPO_ROOT, timeout=60)
    assert fresh.returncode == 4 and "thread finished" in fresh.stdout
    assert runner._SERVERS[key] is None


def test_a_forked_run_leaves_its_cyclic_garbage_to_the_os(run_app, tmp_path):
    """The runner freezes the collector at exit (after the app's own atexit handlers): the
    interpreter's last collections skip what the run built. A cycle whose finalizer would
    print at that collection in a fresh interpreter stays silent in a forked run."""
    script = tmp_path / "cycle_at_exit.py"
    script.write_text(
        "import atexit, gc, sys\n"
        "class Node:\n"
        "    def __del__(self):\n"
        "        sys.stdout.write('collected at exit\\n'); sys.stdout.flush()\n"
        "gc.disable()\n"  # nothing collects the cycle before exit
        "a, b = Node(), Node(); a.other, b.other = b, a\n"
        "del a, b\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
    )
    env = lab.child_env(JAX_PLATFORMS="cpu")
    fresh = _fresh([script], env)
    forked = run_app([script], env=env, cwd=curriculum.REPO_ROOT, timeout=60)
    assert fresh.returncode == forked.returncode == 0
    assert "collected at exit" in fresh.stdout, "the control: a fresh interpreter collects it"
    assert forked.stdout == "atexit ran\n", forked.stdout


def test_a_forked_run_starts_with_the_servers_imports_frozen(run_app, tmp_path):
    """The server freezes what its imports made before it forks (core.lab.warm_kernels.
    freeze_imports): a run's full collections skip those objects; a fresh interpreter has
    nothing frozen."""
    script = tmp_path / "frozen.py"
    script.write_text("import gc\nprint(gc.get_freeze_count())\n")
    env = lab.child_env(JAX_PLATFORMS="cpu")
    fresh = _fresh([script], env)
    forked = run_app([script], env=env, cwd=curriculum.REPO_ROOT, timeout=60)
    assert fresh.returncode == forked.returncode == 0
    assert int(fresh.stdout) == 0, "the control: nothing is frozen in a fresh interpreter"
    assert int(forked.stdout) > 10_000, forked.stdout  # JAX alone leaves well over 10,000
