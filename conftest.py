"""Suite-wide pytest setup.

1. Every test process sees the lab's 8 virtual CPU devices (JAX fixes the count when its
   backend starts, so this runs before anything imports jax).
2. A marimo test cell whose ancestor stops (``mo.stop``) is never executed, and marimo's
   pytest bridge then returns quietly: the test would pass without asserting anything.
   Here such a test fails, naming the reason.
3. One persistent XLA compilation cache for the session's JAX processes, after a probe shows
   it reads back on this CPU (tests/tools/compilation_cache.py); JAX_LAB_TEST_COMPILATION_CACHE=0
   turns it off. Set here, in the controller, so xdist workers and every app subprocess inherit it.
"""

import importlib.util
import os
import pathlib

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # skip the TPU probe when libtpu is installed

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent
COMPILATION_CACHE_DIR = REPO_ROOT / ".jax_compilation_cache"


def _load_tool(name: str):
    path = REPO_ROOT / "tests" / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CACHE_STATUS = (
    _load_tool("compilation_cache").enable(COMPILATION_CACHE_DIR)
    if "PYTEST_XDIST_WORKER" not in os.environ  # workers inherit the controller's decision
    else None
)


def pytest_report_header(config):
    return _CACHE_STATUS


def _is_marimo_cell(obj) -> bool:
    return type(obj).__module__ == "marimo._ast.cell" and type(obj).__name__ == "Cell"


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if not _is_marimo_cell(pyfuncitem.obj):
        return (yield)
    from marimo._runtime.runner import by_refs

    original = by_refs._classify

    def classify_or_fail(result):
        stop = original(result)
        if stop is not None:
            pytest.fail(
                f"{pyfuncitem.name} did not run: a cell it depends on called mo.stop "
                "(a control or run button left it stopped). A test cell must execute.",
                pytrace=False,
            )
        return stop

    by_refs._classify = classify_or_fail
    try:
        return (yield)
    finally:
        by_refs._classify = original
