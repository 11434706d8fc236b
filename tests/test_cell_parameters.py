"""Every parameter of an app cell is used in the cell's body.

marimo builds its dataflow graph from the names a cell's BODY reads; the parameter list is
only generated from that graph. A parameter the body never reads creates no dependency, so a
cell that takes a guard's value "to run after the guard" (CONTRIBUTING point 4) still runs
when the guard stops, and a cell that lists controls "to re-run when they change" does not.
Found on apps/attention.py (the torch check ran past a refused --head), and on
capstone_transformer and train_generate (the untrained flag ignored a changed setting).
A static AST scan: no app is run.
"""

from __future__ import annotations

import ast

import pytest

from core import curriculum


def _is_cell(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "cell":
            return True
    return False


def unused_parameters(source: str) -> list[tuple[int, list[str]]]:
    """(line, names) for every marimo cell whose body does not read some of its parameters."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and _is_cell(node):
            read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            unused = [a.arg for a in node.args.args if a.arg not in read]
            if unused:
                found.append((node.lineno, unused))
    return found


def test_the_scan_finds_an_unused_parameter():
    source = (
        "@app.cell\ndef _(guard_ok, x):\n    return x + 1\n\n"
        "@app.cell\ndef _(guard_ok):\n    assert guard_ok\n    return\n"
    )
    assert unused_parameters(source) == [(2, ["guard_ok"])]


APPS = sorted(curriculum.APPS_DIR.glob("*.py"))


@pytest.mark.parametrize("path", APPS, ids=[p.stem for p in APPS])
def test_cell_parameters_are_read(path):
    assert unused_parameters(path.read_text()) == [], path.name
