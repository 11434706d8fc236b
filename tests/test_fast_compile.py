"""The suite compiles XLA:CPU programs with LLVM's optimizer off (tests/tools/fast_compile.py)."""

import importlib.util
import os
import pathlib

import pytest

from core import runtime


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(
        name, pathlib.Path(__file__).resolve().parent / "tools" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fast_compile = _tool("fast_compile")
chip_mode = _tool("chip_mode")


def test_the_flags_are_added_once_after_the_callers_own():
    environ = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    assert "on" in fast_compile.enable("cpu", environ)
    flags = environ["XLA_FLAGS"].split()
    assert flags[0] == "--xla_cpu_enable_fast_math=false"
    assert flags[1:] == runtime.FAST_COMPILE_XLA_FLAGS.split()
    fast_compile.enable("cpu", environ)
    assert environ["XLA_FLAGS"].split() == flags


def test_work_that_runs_long_can_drop_them_and_keep_the_callers_own():
    environ = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    fast_compile.enable("cpu", environ)
    assert runtime.without_fast_compile(environ["XLA_FLAGS"]) == "--xla_cpu_enable_fast_math=false"
    assert runtime.without_fast_compile("") == ""


def test_a_chip_session_and_an_opt_out_keep_xlas_defaults():
    on_chip = {}
    assert "off (test backend tpu)" in fast_compile.enable("tpu", on_chip)
    assert "XLA_FLAGS" not in on_chip
    opted_out = {fast_compile.ENV_DISABLE: "0", "XLA_FLAGS": "--a=1"}
    assert "off" in fast_compile.enable("cpu", opted_out)
    assert opted_out["XLA_FLAGS"] == "--a=1"


def test_this_process_inherited_the_sessions_flags():
    if os.environ.get(fast_compile.ENV_DISABLE) == "0":
        pytest.skip(f"{fast_compile.ENV_DISABLE}=0: this session keeps XLA's defaults")
    if chip_mode.backend_asked(os.environ) == "tpu":
        pytest.skip("a chip session keeps XLA's defaults")
    present = os.environ.get("XLA_FLAGS", "").split()
    assert set(runtime.FAST_COMPILE_XLA_FLAGS.split()) <= set(present), present
