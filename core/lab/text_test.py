import numpy as np
import pytest

from core.lab import text


@pytest.mark.parametrize(
    ("count", "singular", "plural_form", "expected"),
    [
        (1, "chip", None, "1 chip"),
        (16, "chip", None, "16 chips"),
        (0, "run", None, "0 runs"),
        (-1, "step", None, "-1 steps"),
        (1, "batch", "batches", "1 batch"),
        (2, "batch", "batches", "2 batches"),
        (1024, "row", None, "1,024 rows"),
    ],
)
def test_plural_agrees_with_the_count(count, singular, plural_form, expected):
    assert text.plural(count, singular, plural_form) == expected


def test_plural_accepts_numpy_integers():
    assert text.plural(np.int64(3), "head") == "3 heads"
    assert text.plural(np.int32(1), "head") == "1 head"


@pytest.mark.parametrize("count", [1.0, 2.5, True, "3", np.float32(2.0)])
def test_plural_refuses_what_is_not_a_whole_count(count):
    with pytest.raises(TypeError, match="whole things"):
        text.plural(count, "chip")


def _inline_code(rendered: str) -> list[str]:
    """The text of each <code> element of rendered markdown, as a browser shows it."""
    import html
    import re

    return [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", rendered, flags=re.S)]


LITERALS = [
    ".*dense.*/kernel",  # a LayoutMap key: markdown made it ".dense./kernel" in italics
    "dense.*kernel",
    "runs/tpu/*/*/attention/results.json",  # a glob
    "**/*_test.py",
    "__init__.py",
    "a_b_c*d*",
    "`tick`",
    "x``y`",
    "<b>&amp;</b>",
    "--seed=5 --dtype=bfloat16",
]


@pytest.mark.parametrize("literal", LITERALS)
def test_code_span_shows_the_literal_text_through_markdown(literal):
    import marimo as mo

    rendered = mo.md(f"key {text.code(literal)} matches").text
    assert _inline_code(rendered) == [literal]


def test_plain_markdown_eats_what_a_code_span_keeps():
    import marimo as mo

    eaten = mo.md("key .*dense.*/kernel matches").text
    assert ".*dense.*/kernel" not in eaten and "<em>" in eaten


@pytest.mark.parametrize("bad", ["", "two\nlines"])
def test_code_span_refuses_what_cannot_be_one_span(bad):
    with pytest.raises(ValueError):
        text.code(bad)


FILES = {
    # a JobSet-like manifest: list items under keys, nested lists, a blank line, a document
    # separator, quotes and markup characters
    "yaml": (
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nspec:\n  replicatedJobs:\n"
        "  - name: workers\n    replicas: 1\n    template:\n      spec:\n        containers:\n"
        "        - args:\n          - --steps=2\n          - '*.py'\n\n---\nsteps:\n- name: a <b>\n"
    ),
    "dockerfile": "FROM python:3.11-slim\n\tRUN pip install -r requirements.lock \\\n"
    '    && useradd app\n\n\nCMD ["python", "-m", "core.serving"]\n',
    "json": '{\n  "a": [\n    1,\n    {"b": "*x*"}\n  ]\n}',
    "bash": "\n  gcloud compute tpus tpu-vm create vm \\\n    --zone=us-central2-b\n"
    "# - a comment\n",
    "text": "- a list-like line\n    - indented\n1. numbered\n",
}


@pytest.mark.parametrize("language", sorted(FILES))
def test_code_block_shows_the_text_character_for_character(language):
    source = FILES[language]
    block = text.code_block(source, language)
    assert text.shown_code(block.html) == [source]


def test_the_yaml_shown_loads_as_the_source_does():
    import yaml

    shown = text.shown_code(text.code_block(FILES["yaml"], "yaml").html)[0]
    assert list(yaml.safe_load_all(shown)) == list(yaml.safe_load_all(FILES["yaml"]))


def test_markdown_fences_are_what_code_block_replaces():
    """The defect: marimo's mo.md re-indents list-like lines inside a fenced block."""
    import marimo as mo

    shown = text.shown_code(mo.md(f"```yaml\n{FILES['yaml']}\n```").text)
    assert shown and shown[0].rstrip("\n") != FILES["yaml"].rstrip("\n")


def test_code_block_refuses_an_unknown_language():
    with pytest.raises(ValueError, match="language"):
        text.code_block("x", "cobol")


def test_marimo_shows_a_code_block_in_a_stack_as_it_is():
    import marimo as mo

    block = text.code_block(FILES["yaml"], "yaml")
    assert text.shown_code(mo.vstack([mo.md("**jobset.yaml**"), block]).text) == [FILES["yaml"]]
