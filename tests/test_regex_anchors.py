"""No pattern of the course's code ends in a bare ``$`` (issue 36, item 11).

Python's ``$`` also matches just before a trailing newline, so ``re.match(r"^[a-z]+$", s)``
accepts ``"ml\\n"``: a GCP label, a bucket or an account id checked that way passes, and the
newline reaches the gcloud command line. End a pattern with ``\\Z`` or use ``re.fullmatch``;
``$`` is right only with ``re.MULTILINE`` (one match per line). pydantic's ``pattern=`` runs
the Rust regex engine, where ``$`` is the end of the text, unless the pattern needs a
look-around, which sends it to Python's ``re``.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess

import pytest

from core import curriculum
from core.tpu import billing, cloud_tpu, iam

CALLS = {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"}


def _ends_with_bare_dollar(pattern: str) -> bool:
    if not pattern.endswith("$"):
        return False
    backslashes = len(pattern[:-1]) - len(pattern[:-1].rstrip("\\"))
    return backslashes % 2 == 0  # "\$" is a literal dollar sign


def _multiline(call: ast.Call) -> bool:
    others = [*call.args[1:], *(k.value for k in call.keywords)]
    return any("MULTILINE" in (text := ast.unparse(arg)) or text.endswith("re.M") for arg in others)


def anchors(source: str) -> list[tuple[int, str]]:
    """(line, pattern) of every Python-re pattern in ``source`` that ends in a bare ``$``
    without re.MULTILINE, and every pydantic ``pattern=`` that does and needs Python's re."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in CALLS
            and isinstance(func.value, ast.Name)
            and func.value.id == "re"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and _ends_with_bare_dollar(node.args[0].value)
            and not _multiline(node)
        ):
            found.append((node.lineno, node.args[0].value))
        for keyword in node.keywords:
            value = keyword.value
            if (
                keyword.arg == "pattern"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and _ends_with_bare_dollar(value.value)
                and any(look in value.value for look in ("(?=", "(?!", "(?<=", "(?<!"))
            ):
                found.append((node.lineno, value.value))
    return found


def _course_modules() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"],
        cwd=curriculum.REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in listed if not f.endswith("_test.py") and not f.startswith("tests/")]


def test_the_scanner_finds_a_dollar_anchor_and_passes_the_safe_forms():
    assert anchors('import re\nre.match(r"^[a-z]+$", s)\n') == [(2, "^[a-z]+$")]
    assert anchors('import re\nX = re.compile(r"^[a-z]+$")\n') == [(2, "^[a-z]+$")]
    assert anchors('import re\nre.match(r"^[a-z]+\\Z", s)\n') == []
    assert anchors('import re\nre.fullmatch(r"[a-z]+", s)\n') == []
    assert anchors('import re\nre.match(r"costs \\$", s)\n') == []
    assert anchors('import re\nre.findall(r"^x$", s, flags=re.MULTILINE)\n') == []
    assert anchors('import re\nre.compile(r"^x$", re.M)\n') == []
    assert anchors('F(pattern=r"^[a-f]{64}$")\n') == []  # pydantic: Rust regex, `$` is the end
    assert anchors('F(pattern=r"^(?!x)[a-f]+$")\n') == [(1, "^(?!x)[a-f]+$")]
    assert _ends_with_bare_dollar("^a$") and not _ends_with_bare_dollar("a\\$")


def test_no_pattern_ends_in_a_bare_dollar():
    found = {}
    for path in _course_modules():
        source = (curriculum.REPO_ROOT / pathlib.Path(path)).read_text(encoding="utf-8")
        if hits := anchors(source):
            found[path] = hits
    assert not found, f"end these with \\Z or use re.fullmatch: {found}"


@pytest.mark.parametrize(
    "make",
    [
        lambda: iam.Plan(bucket="my-tpu-checkpoints\n"),
        lambda: iam.Plan(project="my-tpu-project\n"),
        lambda: iam.Plan(job="tpu-job\n"),
        lambda: cloud_tpu.TpuVm(name="jax-tpu-lab\n"),
        lambda: cloud_tpu.TpuVm(project="my-tpu-project\n"),
        lambda: cloud_tpu.TpuVm(runtime_version="v2-alpha-tpuv5-lite\n"),
        lambda: cloud_tpu.TpuVm(labels=(("team\n", "ml"),)),
        lambda: cloud_tpu.TpuVm(labels=(("team", "ml\n"),)),
        lambda: cloud_tpu.parse_labels(["team=ml\n"]),
        lambda: billing.Budget("012345-6789AB-CDEF01\n", "my-tpu-project", 5.0),
        lambda: billing.Budget("012345-6789AB-CDEF01", "p", 5.0, email="a@example.com\n"),
    ],
)
def test_validators_refuse_a_trailing_newline(make):
    """Each of these reached a gcloud command line with the newline in it."""
    with pytest.raises(ValueError):
        make()
