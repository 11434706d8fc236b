"""A table cell reaches the page as its text: markdown acts on nothing in it but code spans."""

import html
import re

import pytest

from core.lab import tables

LITERALS = [
    ".*dense.*/kernel",  # keras_distribution's LayoutMap key: was ".dense./kernel" in italics
    "dense.*kernel",
    "key<fry>",  # flax_nnx's key repr: the browser took <fry> for a tag
    "runs/tpu/*/*/attention/results.json",
    "a_b_c*d*",
    "x~y~ and ~~z~~",
    "x^y^",
    "$x$ costs $5",
    "[a](b)",
    ":smile:",
    "{++x++} ++ctrl++ ==mark==",
    "a|b",
    "&amp; stays &amp;",
    "#1 \\ backslash !",
    "float32['b', 64]",
]


def _cells(rendered: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", c))
        for c in re.findall(r"<td>(.*?)</td>", rendered, flags=re.S)
    ]


@pytest.mark.parametrize("literal", LITERALS)
def test_a_cell_shows_its_text_as_it_is(literal):
    import marimo as mo

    rendered = mo.md(tables.table_markdown([{"key": literal}], literal=True)).text
    assert _cells(rendered) == [literal]


def test_without_literal_markdown_eats_the_key():
    import marimo as mo

    rendered = mo.md(tables.table_markdown([{"key": ".*dense.*/kernel"}])).text
    assert _cells(rendered) != [".*dense.*/kernel"]


def test_code_spans_stay_code():
    import marimo as mo

    rendered = mo.md(tables.table_markdown([{"cmd": "run `ls *.py` now"}], literal=True)).text
    assert "<code>ls *.py</code>" in rendered and _cells(rendered) == ["run ls *.py now"]


def test_printed_tables_stay_plain_text():
    text = tables.table_markdown([{"key": ".*dense.*/kernel", "p": "a|b"}])
    assert "| .*dense.*/kernel | a\\|b |" in text and "&#" not in text


def test_bold_stays_bold_and_its_text_literal():
    import marimo as mo

    rendered = mo.md(tables.table_markdown([{"v": "**yes**: a_b*c"}], literal=True)).text
    assert "<strong>yes</strong>" in rendered and _cells(rendered) == ["yes: a_b*c"]
