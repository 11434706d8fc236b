"""Defects of the course that only a TPU host shows, caught here on the CPU (issue 37).

Each test is a static sweep of the course's sources for one kind of defect seen on a TPU v5e
chip; the logic that fixes it lives in core/runtime.py and is unit-tested there with a faked
TPU state (core/runtime_test.py).
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("core", "apps", "capstones", "interop", "tpu_scripts", "benchmarks")


@functools.cache
def _sources() -> tuple[tuple[pathlib.Path, ast.Module], ...]:
    """(path, syntax tree) of every library, app and script module (tests left out), parsed
    once for all the sweeps."""
    found = []
    for folder in SOURCE_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name.endswith("_test.py") or "__marimo__" in path.parts:
                continue
            found.append((path, ast.parse(path.read_text(), filename=str(path))))
    return tuple(found)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def test_float64_jax_runs_where_float64_exists():
    """Kind 2: a TPU has no float64 (least_squares stopped with "UNIMPLEMENTED: Only F32 and C64
    types are implemented in LuDecomposition"). Float64 JAX work goes through
    core.runtime.enable_float64, which puts it on the CPU backend when the default is a TPU;
    a bare jax.enable_x64 / jax_enable_x64 switch would ask the chip."""
    found = []
    for path, tree in _sources():
        if path == REPO / "core" / "runtime.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("enable_x64"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
            switch = isinstance(node, ast.Call) and _dotted(node.func).endswith("config.update")
            if switch and node.args and getattr(node.args[0], "value", None) == "jax_enable_x64":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "float64 JAX outside core.runtime.enable_float64:\n" + "\n".join(found)


def test_float64_tolerances_name_the_backend_that_computed():
    """Kind 2: ``numerics.tolerance("float64")`` refuses on a TPU (it has no float64), so a
    float64 comparison computed in NumPy or under enable_float64 (the host's CPU) says so with
    ``backend="cpu"``; without it the check raised on the chip instead of judging."""
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _dotted(node.func).endswith("tolerance")):
                continue
            first = node.args[0] if node.args else None
            named = getattr(first, "value", None) == "float64" or _dotted(first) in (
                "np.float64",
                "jnp.float64",
            )
            if named and not any(k.arg == "backend" for k in node.keywords):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, 'tolerance("float64") without backend=:\n' + "\n".join(found)


SUBPROCESS_CALLS = ("run", "Popen", "check_output", "check_call", "call")
# Modules whose Python children never import JAX: why each is left out.
NO_JAX_CHILDREN = {
    "core/envlock.py": "pip install/uninstall of the locked environment",
    "core/serving/load.py": "locust against a loopback service",
    "tpu_scripts/project_wheel.py": "pip wheel of the project",
    "tpu_scripts/wheelhouse/build.py": "pip download",
    "tpu_scripts/wheelhouse/install.py": "pip install from the wheelhouse",
    "tpu_scripts/fake_gcloud.py": "bash, standing in for gcloud",
    "core/lessons/operations/mlops.py": "Kubeflow's local runner in .venv-kfp (no JAX there)",
}
# Modules whose own process never imports JAX, so a child of theirs is the only process that
# can hold the chip: its environment is the host's, as it is.
PARENT_WITHOUT_JAX = {
    "tpu_scripts/chip_session.py": "standard library only; each step is the chip's one process",
    # marimo started the shim with runtime.child_env() (warm_kernels.install's plan); it hands
    # that environment on unchanged to the kernel forked for it
    "core/lab/warm_kernel_shim.py": "standard library only; its environment is child_env's",
}
# Modules that copy os.environ for another reason than a child's environment.
NOT_A_CHILD_ENVIRONMENT = {
    "tpu_scripts/one_process.py": "a snapshot of this process's environment, put back after "
    "each lesson (it starts no child)",
}
PINNED_TO_CPU = re.compile(r"""JAX_PLATFORMS["']?\s*(?:[:=,])\s*["']cpu["']""")


def test_python_children_get_their_environment_from_child_env():
    """Kind 3: one process per chip. tpu_receipt's child `python -m tpu_scripts receipt` asked
    for the chip its parent held (libtpu's multi-process lockfile error). core.runtime.child_env
    gives a child JAX_PLATFORMS=cpu while this process holds a TPU (core/runtime_test.py); a
    module that starts Python children passes every one an env= from it (directly, or through
    a helper built on it: allocator.child_env, recovery.job_env), or pins the child to the CPU
    in a literal environment."""
    found = [f"{name}: no such module" for name in NO_JAX_CHILDREN if not (REPO / name).exists()]
    for path, tree in _sources():
        source = path.read_text()
        if "sys.executable" not in source:
            continue
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and _dotted(node.func).startswith("subprocess.")
            and _dotted(node.func).split(".")[-1] in SUBPROCESS_CALLS
        ]
        if not calls:
            continue
        where = path.relative_to(REPO)
        if str(where) in NO_JAX_CHILDREN:
            continue
        pinned = PINNED_TO_CPU.search(source) is not None
        if not ("child_env(" in source or "job_env(" in source or pinned):
            found.append(f"{where}: starts Python children without child_env")
        found += [
            f"{where}:{call.lineno}: no env= (inherits os.environ as it is)"
            for call in calls
            if not any(k.arg == "env" for k in call.keywords) and _starts_python(call)
        ]
    assert not found, "\n".join(found)


def test_child_environments_are_not_built_from_os_environ_by_hand():
    """Kind 3: observability's and accelerator_jobs' job children got dict(os.environ, ...),
    so on a TPU they asked for the chip their lesson's process held. An environment for a
    child is runtime.child_env(...) (or pins JAX_PLATFORMS=cpu itself), except in the
    modules whose children never import JAX."""
    found = []
    for path, tree in _sources():
        where = str(path.relative_to(REPO))
        exempt = where in NO_JAX_CHILDREN or where in NOT_A_CHILD_ENVIRONMENT
        exempt = exempt or where in PARENT_WITHOUT_JAX
        if where == "core/runtime.py" or exempt:
            continue
        if PINNED_TO_CPU.search(path.read_text()):
            continue
        found += [f"{where}:{node.lineno}" for node in ast.walk(tree) if _copies_environ(node)]
    assert not found, "child environments copied from os.environ:\n" + "\n".join(found)


def _copies_environ(node: ast.AST) -> bool:
    """dict(os.environ, ...), {**os.environ, ...}, os.environ | {...}, os.environ.copy() or a
    comprehension over os.environ.items(): an environment for a child, made by hand."""
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        first = _dotted(node.args[0]) if node.args else ""
        return name in ("os.environ.copy", "os.environ.items") or (
            name == "dict" and first == "os.environ"
        )
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return any(key is None and _dotted(value) == "os.environ" for key, value in pairs)
    return isinstance(node, ast.BinOp) and _dotted(node.left) == "os.environ"


def _starts_python(call: ast.Call) -> bool:
    """Whether a subprocess call's argv is a literal list that starts with sys.executable."""
    argv = call.args[0] if call.args else None
    return (
        isinstance(argv, ast.List) and bool(argv.elts) and _dotted(argv.elts[0]) == "sys.executable"
    )


def test_a_childs_pythonpath_keeps_the_parents():
    """Kind 7: on the chip's host the Keras workers got PYTHONPATH=<project> and lost the
    host's own folders (safetensors, and there JAX itself, live on its PYTHONPATH). A child's
    PYTHONPATH is built by runtime.python_path(first, ...), which keeps the parent's after it
    (core/runtime_test.py runs a child with it)."""
    found = []
    for path, tree in _sources():
        where = str(path.relative_to(REPO))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "PYTHONPATH":
                value = node.value
            elif isinstance(node, ast.Dict):
                pairs = zip(node.keys, node.values, strict=True)
                value = next((v for k, v in pairs if getattr(k, "value", 0) == "PYTHONPATH"), 0)
                if value == 0:
                    continue
            else:
                continue
            built = isinstance(value, ast.Call) and _dotted(value.func).endswith("python_path")
            if not built:
                found.append(f"{where}:{node.lineno}")
    assert not found, "a child's PYTHONPATH set without runtime.python_path:\n" + "\n".join(found)


@pytest.mark.parametrize("module", sorted(PARENT_WITHOUT_JAX))
def test_a_parent_without_jax_imports_only_the_standard_library(module):
    """The exemption holds only while the parent cannot hold the chip: it imports no JAX and
    nothing of the project (which would)."""
    tree = ast.parse((REPO / module).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}  # fmt: skip
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}  # fmt: skip
    imported -= {"__future__"}
    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
