"""What a learner copies from a lesson is what the lesson meant: code, files and commands reach
the page verbatim.

marimo's ``mo.md`` re-indents list-like lines even inside a fenced block, so a YAML manifest
interpolated into a markdown fence no longer loads (issue 36 item 5). Every app shows a file,
manifest or generated command with ``core.lab.text.code_block`` (Pygments, no markdown on the
way); a fence written literally in an app's prose must come out of ``mo.md`` unchanged. Both
are checked here from the apps' source, without running them; the headless run checks what
``code_block`` showed (tests/test_app_contract.py: the bundle's ``code/`` files).
"""

from __future__ import annotations

import ast
import inspect
import re

import pytest

from core import curriculum
from core.lab import text

APPS = sorted(curriculum.APPS_DIR.glob("*.py"))
HOLE = "\x00"  # stands for an interpolated value in a reconstructed markdown template
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)\n?^[ \t]*\1[ \t]*$", re.M | re.S)


def _template(node: ast.AST) -> str | None:
    """The markdown text of an ``mo.md`` argument with every computed part as ``HOLE``, or
    None when nothing of it is literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    return None


def _md_templates(path, every_fstring: bool = False) -> list[tuple[int, str]]:
    """The markdown templates of an app's ``mo.md`` calls (with ``every_fstring``, also every
    f-string anywhere: a fenced block built apart and interpolated later)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "mo.md" and node.args:
            template = _template(node.args[0])
        elif every_fstring and isinstance(node, ast.JoinedStr):
            template = _template(node)
        else:
            continue
        if template is not None:
            # a computed block may end the fence's last line itself: "{source}```"
            template = re.sub(HOLE + r"(`{3,}|~{3,})", HOLE + "\n\\1", template)
            found.append((node.lineno, inspect.cleandoc(template)))
    return found


def interpolated_fences(path) -> list[str]:
    """``mo.md`` calls that put computed text on lines of its own inside a fenced block (a
    file, a manifest, a command, a printout). A value inside a written line of code
    (``MLP({sizes}, ...)``) stays: it cannot start a line, so markdown cannot move it."""
    return [
        f"{path.name}:{line}"
        for line, template in _md_templates(path, every_fstring=True)
        for match in FENCE.finditer(template)
        if any(
            HOLE in row and not row.replace(HOLE, "").strip() for row in match.group(2).split("\n")
        )
    ]


@pytest.mark.parametrize("app_path", APPS, ids=[p.name for p in APPS])
def test_no_app_interpolates_text_into_a_markdown_fence(app_path):
    assert interpolated_fences(app_path) == [], (
        "show a file, manifest or generated command with core.lab.text.code_block(text, "
        "language): mo.md re-indents list-like lines inside a fence"
    )


@pytest.mark.parametrize("app_path", APPS, ids=[p.name for p in APPS])
def test_literal_fences_come_out_of_markdown_unchanged(app_path):
    import marimo as mo

    for line, template in _md_templates(app_path):
        written = [m.group(2) for m in FENCE.finditer(template)]
        if not written:
            continue
        shown = [s.rstrip("\n") for s in text.shown_code(mo.md(template.replace(HOLE, "X")).text)]
        assert shown == [w.replace(HOLE, "X").rstrip("\n") for w in written], (
            f"{app_path.name}:{line}: a fenced block reaches the page changed"
        )


def test_the_detector_finds_an_interpolated_fence(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        'mo.md(f"```yaml\\n{manifest}\\n```")\n'
        'mo.md("```bash\\n" + command + "\\n```")\n'
        'mo.md(f"**{title}**\\n```python\\nx = 1\\n```")\n'
        'blocks = "".join(f"**{i}**\\n```bash\\n{line}\\n```" for i, line in lines)\n'
    )
    assert sorted(set(interpolated_fences(app))) == ["app.py:1", "app.py:2", "app.py:4"]


def test_keras_distribution_shows_its_layoutmap_keys_literally():
    """ "What each LayoutMap key matches" showed `.*dense.*/kernel` as ".dense./kernel" in
    italics: the point of the lesson (a key must fullmatch the whole path) was unreadable."""
    import html

    from core import lab
    from interop.keras_track import distribution as dist

    weights = [{"path": "mlp/dense_1/kernel"}, {"path": "mlp/dense_1/bias"}]
    rows = dist.audit(dist.Request(), weights)
    rendered = html.unescape(re.sub(r"<[^>]+>", "", lab.table(rows, "re.fullmatch per key").text))
    for key in (*dist.GOOD_KEYS, *dist.TRAP_KEYS, "mlp/dense_1/kernel"):
        assert key in rendered


def setup_display(path) -> str | None:
    """The bare expression an app's ``with app.setup:`` block ends with (marimo shows its value
    above the title), or None. The headless run catches the same in cells
    (core.lab.results.stray_outputs); the setup block's output is not among them."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.With) and ast.unparse(node.items[0].context_expr) == "app.setup":
            last = node.body[-1]
            return ast.unparse(last) if isinstance(last, ast.Expr) else None
    return None


@pytest.mark.parametrize("app_path", APPS, ids=[p.name for p in APPS])
def test_no_setup_block_shows_a_stray_value(app_path):
    assert setup_display(app_path) is None, "assign it, or call it earlier in the block"


def test_the_setup_detector_finds_the_assessment_apps_eight(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("with app.setup:\n    import x\n    ARGS = 1\n    lab.use_cpu_devices()\n")
    assert setup_display(app) == "lab.use_cpu_devices()"
