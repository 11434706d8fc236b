"""Validation of what comes from outside (issue 36, items 10 and 11): no pattern of the
course's code ends in a bare ``$``, and JSON read from a file or a peer fails only as a named
ValueError.

Python's ``$`` also matches just before a trailing newline, so ``re.match(r"^[a-z]+$", s)``
accepts ``"ml\\n"``: a GCP label, a bucket or an account id checked that way passes, and the
newline reaches the gcloud command line. End a pattern with ``\\Z`` or use ``re.fullmatch``;
``$`` is right only with ``re.MULTILINE`` (one match per line). pydantic's ``pattern=`` runs
the Rust regex engine, where ``$`` is the end of the text, unless the pattern needs a
look-around, which sends it to Python's ``re``.

``json.loads`` raises three kinds: JSONDecodeError for a syntax error, a bare ValueError for
an integer past Python's int max str digits, and RecursionError for nesting past the
recursion limit. ``except json.JSONDecodeError`` alone let the last two end the grader with a
traceback (a 5000-digit seed, arrays nested 100,000 deep); ``core.documents.parse_json``
names all three.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess

import pytest

from core import curriculum, documents
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


def _scan(finder) -> dict[str, list]:
    """{module: what ``finder`` found in its source} over the course's modules."""
    found = {}
    for path in _course_modules():
        source = (curriculum.REPO_ROOT / pathlib.Path(path)).read_text(encoding="utf-8")
        if hits := finder(source):
            found[path] = hits
    return found


def test_no_pattern_ends_in_a_bare_dollar():
    found = _scan(anchors)
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


# --- JSON from outside ----------------------------------------------------------------------

HOSTILE = {
    "syntax": "{not json",
    "digits": '{"seed": ' + "9" * 5000 + "}",
    "nesting": "[" * 100_000 + "]" * 100_000,
    "bytes": b"\xff\xfe{",
}


def catches_only_decode_errors(source: str) -> list[int]:
    """Lines of ``try`` statements that catch json.JSONDecodeError but let a bare ValueError
    or a RecursionError through (no handler names ValueError, RecursionError, Exception or
    nothing at all)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Try):
            continue
        names = [ast.unparse(h.type) if h.type is not None else "" for h in node.handlers]
        if not any("JSONDecodeError" in n for n in names):
            continue
        everything = any(n in ("", "Exception", "BaseException") for n in names)
        values = everything or any(
            "ValueError" in n.replace("JSONDecodeError", "").replace("UnicodeDecodeError", "")
            for n in names
        )
        recursion = everything or any("RecursionError" in n for n in names)
        if not (values and recursion):
            found.append(node.lineno)
    return found


def test_the_scanner_tells_the_narrow_catch_from_the_broad_ones():
    narrow = "try:\n    json.loads(t)\nexcept json.JSONDecodeError:\n    pass\n"
    assert catches_only_decode_errors(narrow) == [1]
    assert catches_only_decode_errors(narrow.replace("JSONDecodeError:", "JSONDecodeError:\n"
                                      "    pass\nexcept ValueError:")) == [1]  # fmt: skip
    for broad in ("(ValueError, RecursionError)", "Exception", "(json.JSONDecodeError, "
                  "RecursionError, ValueError)"):  # fmt: skip
        assert catches_only_decode_errors(narrow.replace("json.JSONDecodeError", broad)) == []
    two = narrow + "except (ValueError, RecursionError):\n    pass\n"
    assert catches_only_decode_errors(two) == []


def test_no_module_catches_only_json_decode_errors():
    found = _scan(catches_only_decode_errors)
    assert not found, (
        f"use core.documents.parse_json (or catch ValueError and RecursionError): {found}"
    )


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_parse_json_names_every_failure(kind):
    with pytest.raises(ValueError, match="^the answers file is not "):
        documents.parse_json(HOSTILE[kind], "the answers file")


def test_read_json_names_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(HOSTILE["nesting"])
    with pytest.raises(ValueError, match="deep.json is not usable JSON: nested too deeply"):
        documents.read_json(path)
