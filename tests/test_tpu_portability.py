"""Defects of the course that only a TPU host shows, caught here on the CPU (issue 37).

Each test is a static sweep of the course's sources for one kind of defect seen on a TPU v5e
chip; the logic that fixes it lives in core/runtime.py and is unit-tested there with a faked
TPU state (core/runtime_test.py).
"""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("core", "apps", "capstones", "interop", "tpu_scripts", "benchmarks")


def _sources(dirs=SOURCE_DIRS):
    for folder in dirs:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name.endswith("_test.py") or "__marimo__" in path.parts:
                continue
            yield path, ast.parse(path.read_text(), filename=str(path))


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
