"""apps/capstone_pallas_kernel.py: every cell that computes stops with the guard (CONTRIBUTING
contract point 4), so a refused run does not profile, shard or compile (read from the
source: cell parameters are the names a cell depends on, its return the names it defines)."""

import ast

from core import curriculum

APP = curriculum.APPS_DIR / "capstone_pallas_kernel.py"
GUARDED = {"blocks", "shape"}  # what the guard cell defines after lab.guard(...)


def _cells():
    tree = ast.parse(APP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "_":
            params = {a.arg for a in node.args.args}
            defined = set()
            for stmt in node.body:
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
                    defined |= {v.id for v in values if isinstance(v, ast.Name)}
            yield node, params, defined


def test_every_computing_cell_depends_on_the_guard():
    downstream = set(GUARDED)
    cells = list(_cells())
    for _ in cells:  # fixed point over the dependency graph
        for _node, params, defined in cells:
            if params & downstream:
                downstream |= defined
    heavy = ("profile.measure", "partition.sharded_check", "partition.tpu_memory_rows")
    for node, params, _defined in cells:
        source = ast.unparse(node)
        if any(call in source for call in heavy):
            assert params & downstream, f"line {node.lineno}: runs in a refused run"
