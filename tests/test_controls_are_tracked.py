"""Every control an app shows is one marimo tracks, and no cell reads its start-up value.

marimo re-runs the cells that read a UI element's global name when the element moves. A
control held in a plain dict or list is no such name: moving it re-runs nothing, and the page
keeps showing the old value's results (capacity_cost's 13 controls in a dict: "chips" moved to
16, the table still said "USD per hour, 8 chips"; evaluate_agents, policy_gradients_ppo,
keras_debug_unstable and vmap's in_axes dropdowns had the same). And ``ARGS`` is the command
line, parsed once at start: a cell that reads ``ARGS.x`` where a control for ``x`` exists
ignores the control in a served app (failure_runbooks judged its check on ``ARGS.save_every``
while the slider moved). tests/test_browser.py moves every control of every app in Chromium;
this static scan catches the same class without a browser. No app is run.
"""

from __future__ import annotations

import ast
import dataclasses

import pytest

from core import curriculum

# marimo elements a learner moves (mo.ui.<kind>); FLAGS.control(...) builds one of them.
INPUTS = {
    "button", "checkbox", "code_editor", "date", "date_range", "datetime", "dropdown", "file",
    "multiselect", "number", "radio", "range_slider", "run_button", "slider", "switch", "text",
    "text_area",
}  # fmt: skip
# Elements that hold other elements and are tracked themselves: a control inside one is fine.
CONTAINERS = {"array", "batch", "dictionary", "form"}
# Where a control's value may reach it from ARGS without being read from the control: the
# start-up value a control is built with. Anything else needs `not lab.interactive()` around it.
VALUE_KEYWORDS = {"value"}
# (app, flag): why a cell may read ARGS.flag outside a control's start-up value and outside
# headless-only code. Each is a flag with no control, or the start-up value of a control that
# a cell rebuilds; a new entry needs the same kind of reason.
ARGS_READS_ALLOWED: dict[tuple[str, str], str] = {
    ("assessment_learn_tpus.py", "answers"): "a sheet file named on the command line; no control",
    ("assessment_learn_tpus.py", "progress_dir"): "where progress is saved; no control",
    ("assessment_make_it_fast.py", "answers"): "a sheet file named on the command line; no control",
    ("assessment_make_it_fast.py", "progress_dir"): "where progress is saved; no control",
    ("index.py", "progress_dir"): "where the assessments' progress is read from; no control",
    ("select_tpu_slice.py", "name"): "the VM name in the generated command; no control",
    ("meshes_sharding.py", "mesh_shape"): "the start-up value of the mesh-shape dropdown, "
    "rebuilt for each mesh size (the flag is refused if that size cannot use it)",
    ("virtual_devices.py", "mesh_shape"): "the start-up value of the mesh-shape dropdown, "
    "rebuilt for each mesh size",
    ("virtual_devices.py", "spec"): "the start-up value of the spec dropdown, rebuilt for each "
    "mesh shape",
}


def _is_cell(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "cell":
            return True
    return False


def _ui_kind(node: ast.AST) -> str | None:
    """ "control" for FLAGS.control(...), the kind for mo.ui.<kind>(...), else None."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    func = node.func
    if func.attr == "control" and isinstance(func.value, ast.Name) and func.value.id == "FLAGS":
        return "control"
    owner = func.value
    if (
        isinstance(owner, ast.Attribute)
        and owner.attr == "ui"
        and isinstance(owner.value, ast.Name)
        and owner.value.id == "mo"
    ):
        return func.attr
    return None


def _is_interactive_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "interactive"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "lab"
    )


def _headless_test(test: ast.AST) -> bool | None:
    """True if ``test`` holds only headless (it contains `not lab.interactive()`), False if
    only interactive (it is `lab.interactive()`), None otherwise."""
    for node in ast.walk(test):
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.Not)
            and _is_interactive_call(node.operand)
        ):
            return True
    if _is_interactive_call(test):
        return False
    return None


@dataclasses.dataclass
class Finding:
    line: int
    what: str
    flag: str | None = None  # the ARGS attribute read, for an ARGS finding

    def __str__(self):
        return f"line {self.line}: {self.what}"


def scan(source: str) -> list[Finding]:
    """What in ``source`` (a marimo app) holds a control marimo cannot track, or reads a
    control's flag from ARGS where the control's value is meant."""
    tree = ast.parse(source)
    cells = [node for node in tree.body if _is_cell(node)]
    readers: dict[str, int] = {}
    for cell in cells:
        for arg in cell.args.args:
            readers[arg.arg] = readers.get(arg.arg, 0) + 1
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    findings = []
    for cell in cells:
        for node in ast.walk(cell):
            kind = _ui_kind(node)
            if kind is None or (kind not in INPUTS and kind != "control"):
                continue
            if any(k.arg == "disabled" and getattr(k.value, "value", None) is True
                   for k in node.keywords):  # fmt: skip
                continue  # shown read-only (train_eval_step's code): nothing to move
            findings += _binding_problems(node, kind, parents, readers)
    for cell in cells:
        for node in ast.walk(cell):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ARGS"
                and not _start_up_or_headless(node, parents)
            ):
                findings.append(
                    Finding(
                        node.lineno,
                        f"reads ARGS.{node.attr} (the command line at start) where a served "
                        "app's control value is meant (read the control, or guard the read "
                        "with `not lab.interactive()`)",
                        flag=node.attr,
                    )
                )
    return sorted(findings, key=lambda finding: finding.line)


def _binding_problems(node, kind, parents, readers) -> list[Finding]:
    """A control must be bound to a global name (or sit in a tracked container that is) that
    another cell reads."""
    child, up = node, parents.get(node)
    # Up through literals and comprehensions to a tracked container, if any.
    while isinstance(
        up, (ast.List, ast.Tuple, ast.Dict, ast.ListComp, ast.DictComp, ast.comprehension)
    ) or (isinstance(up, ast.Call) and _ui_kind(up) in CONTAINERS and child in up.args):
        if isinstance(up, ast.Call):  # the container is the thing that must be bound
            child, up = up, parents.get(up)
            break
        child, up = up, parents.get(up)
    if isinstance(child, ast.Call) and _ui_kind(child) in CONTAINERS:
        node, kind = child, _ui_kind(child)
    elif child is not node:
        return [Finding(node.lineno, f"a {kind} held in a {type(child).__name__.lower()}, "
                        "which marimo does not track (use one global name per control, or "
                        "mo.ui.dictionary / mo.ui.array)")]  # fmt: skip
    target = parents.get(node)
    if not (
        isinstance(target, ast.Assign)
        and len(target.targets) == 1
        and isinstance(target.targets[0], ast.Name)
    ):
        return [Finding(node.lineno, f"a {kind} bound to no global name: marimo cannot track it")]
    name = target.targets[0].id
    if name.startswith("_"):
        return [Finding(node.lineno, f"a {kind} bound to cell-private {name}: no cell re-runs")]
    if not readers.get(name):
        return [Finding(node.lineno, f"a {kind} ({name}) that no other cell reads")]
    return []


def _start_up_or_headless(node: ast.AST, parents) -> bool:
    """True where reading ARGS is right: a control's start-up value (inside FLAGS.control(...)
    or a `value=` keyword), or code that runs only headless (under `not lab.interactive()`)."""
    child, up = node, parents.get(node)
    while up is not None:
        if isinstance(up, ast.keyword) and up.arg in VALUE_KEYWORDS:
            return True
        if _ui_kind(up) == "control":
            return True
        if isinstance(up, (ast.If, ast.IfExp, ast.While)):
            headless = _headless_test(up.test)
            if child is up.test and headless:
                return True  # `not lab.interactive() and ARGS.x ...`: read only headless
            in_body = child in (up.body if isinstance(up.body, list) else [up.body])
            if (headless is True and in_body) or (headless is False and not in_body):
                return True
        if isinstance(up, ast.BoolOp):
            # `not lab.interactive() and ARGS.x`, `lab.interactive() or ARGS.x`: read headless
            earlier = up.values[: up.values.index(child)]
            wanted = True if isinstance(up.op, ast.And) else False
            if any(_headless_test(value) is wanted for value in earlier):
                return True
        child, up = up, parents.get(up)
    return False


def test_the_scan_finds_each_kind_of_untracked_control():
    source = """
@app.cell
def _():
    held = {"rows": FLAGS.control("rows", ARGS)}
    listed = [mo.ui.slider(1, 3) for _ in range(2)]
    mo.hstack([mo.ui.switch(label="shown, unbound")])
    _private = FLAGS.control("cols", ARGS)
    unread = FLAGS.control("depth", ARGS)
    width = FLAGS.control("width", ARGS)
    start = mo.ui.slider(1, 9, value=min(ARGS.width, 9))
    fine = mo.ui.dictionary({"a": FLAGS.control("a", ARGS)})
    code = mo.ui.code_editor("x = 1", disabled=True)
    return code, fine, held, listed, start, unread, width


@app.cell
def _(fine, held, listed, start, width):
    value = ARGS.width * fine.value["a"] + width.value + held["rows"].value + len(listed)
    if not lab.interactive() and ARGS.width > 4:
        print(f"--width {ARGS.width}")
    headless = ARGS.width if not lab.interactive() else width.value + start.value
    also = lab.interactive() or ARGS.width
    return also, headless, value
"""
    found = [(f.line, f.what.split(" (")[0].split(",")[0]) for f in scan(source)]
    assert found == [
        (4, "a control held in a dict"),
        (5, "a slider held in a listcomp"),
        (6, "a switch held in a list"),
        (7, "a control bound to cell-private _private: no cell re-runs"),
        (8, "a control"),
        (18, "reads ARGS.width"),
    ], found


def test_every_allowed_read_is_still_made():
    stale = [
        (app, flag)
        for app, flag in ARGS_READS_ALLOWED
        if f"ARGS.{flag}" not in (curriculum.APPS_DIR / app).read_text()
    ]
    assert not stale, f"ARGS_READS_ALLOWED names reads no app makes: {stale}"


APPS = sorted(curriculum.APPS_DIR.glob("*.py"))


@pytest.mark.parametrize("path", APPS, ids=[p.stem for p in APPS])
def test_every_control_is_tracked_and_read_live(path):
    findings = [f for f in scan(path.read_text()) if (path.name, f.flag) not in ARGS_READS_ALLOWED]
    assert not findings, f"{path.name}:\n" + "\n".join(map(str, findings))
