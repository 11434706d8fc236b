"""Tables as text: numbers and cells formatted as a person reads them, tables as markdown.

No marimo here: the results bundles (core.lab.results) and the tools that read them
(tpu_scripts course-run, compare) format tables without the UI. core.lab re-exports it all.
"""

from __future__ import annotations

import math
import re
from typing import Any

YES_NO = ("yes", "no")
_CODE_SPAN = re.compile(r"(`[^`\n]*`)")  # split() keeps the spans at odd indices
# What a cell may mark up on purpose: `code` (shown as it is) and **bold** (its text literal).
_MARKUP = re.compile(r"(`[^`\n]*`|\*\*[^*\n]+?\*\*)")
# What marimo's markdown (with its pymdownx extensions) acts on in running text: emphasis,
# strike and sub/superscript, links, raw HTML, math, emoji, critic marks, keys, escapes.
_ACTIVE = re.compile(r"[\\*_~^\[\]<>&$:{}+=!#|]")


def format_number(value: float, digits: int = 4) -> str:
    """A float as a person reads it: ``digits`` significant digits, thousands grouped.

    Small magnitudes (errors, tolerances) keep 3 digits in scientific form, so 3.2e-07 does
    not round to 0; 0 is "0"; nan and inf are spelled out.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude < 1e-3:
        return f"{value:.3g}"
    if magnitude < 10**digits:
        return f"{value:.{digits}g}"
    if magnitude < 1e15:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def format_value(value: Any, words: tuple[str, str] = YES_NO, digits: int = 4) -> str:
    """One table cell as text: bools as ``words`` (true, false), floats by format_number,
    ints as they are. NumPy/JAX scalars count as the Python value they hold."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()  # numpy scalar, 0-d numpy or jax array
    if isinstance(value, bool):
        return words[0] if value else words[1]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_number(value, digits)
    return str(value)


def literal_html(text: str) -> str:
    """``text`` for a markdown page, shown as it is: every character markdown or HTML would
    act on becomes its HTML character reference (``.*dense.*/kernel`` stays that, not
    ".dense./kernel" in italics; ``key<fry>`` is not swallowed as a tag)."""
    return _ACTIVE.sub(lambda m: f"&#{ord(m.group())};", text)


def table_markdown(
    rows: list[dict],
    caption: str = "",
    *,
    words: dict[str, tuple[str, str]] | None = None,
    digits: int = 4,
    literal: bool = False,
) -> str:
    """The markdown source of ``table`` (see there). With ``literal`` (the page's table), a
    cell's text reaches the page as it is (``literal_html``) but for `code spans` and
    **bold**; without it (printed text, results.md) only ``|`` is escaped."""
    if not rows:
        return f"{caption}\n\n*(no rows)*" if caption else "*(no rows)*"
    columns = list(rows[0])
    words = words or {}
    unknown = sorted(set(words) - set(columns))
    if unknown:
        raise ValueError(f"words names columns the table does not have: {unknown}")

    def cell(text: str) -> str:
        # Escape outside `code spans` only: inside one the table parser keeps a |, and a
        # backslash there would show.
        if not literal:
            parts = _CODE_SPAN.split(text.replace("\n", " "))
            return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))
        parts = _MARKUP.split(text.replace("\n", " "))
        return "".join(
            literal_html(p)
            if i % 2 == 0
            else p
            if p.startswith("`")
            else f"**{literal_html(p[2:-2])}**"
            for i, p in enumerate(parts)
        )

    def value(row: dict, column: str) -> str:
        if column not in row:
            return ""
        return cell(format_value(row[column], words.get(column, YES_NO), digits))

    lines = [
        "| " + " | ".join(cell(str(c)) for c in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(value(row, c) for c in columns) + " |" for row in rows),
    ]
    return (f"{caption}\n\n" if caption else "") + "\n".join(lines)
