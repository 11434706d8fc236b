"""Words a lesson shows the learner: counts with the right singular or plural, and text that
must reach the page exactly as it is (code, files, regexes, globs, paths).

Markdown rewrites what it is given: ``*`` and ``_`` become emphasis (the LayoutMap key
``.*dense.*/kernel`` shows as ".dense./kernel" in italics), and marimo's ``mo.md`` re-indents
list-like lines even inside a fenced block (a YAML list item moves, a blank line appears, and
the manifest no longer loads). So:

- ``code(value)``: an inline code span for markdown (a regex, a glob, a path, a command);
  markdown shows its text literally, backticks inside it included.
- ``code_block(text, language)``: a whole file or command as a highlighted block that never
  passes through markdown; the page shows ``text`` character for character. A headless run
  records it (``core.lab.results``), so the bundle holds the file as it was shown.
- ``shown_code(html)``: the text of each code block in rendered HTML, as a browser shows it
  (what tests compare with the source).
"""

from __future__ import annotations

import dataclasses
import html
import numbers
import re

# Pygments lexer names for the languages the course shows (anything else is plain text).
LANGUAGES = ("bash", "diff", "dockerfile", "json", "jsonl", "python", "text", "toml", "yaml")
LEXERS = {"jsonl": "json"}  # JSON lines: one JSON object a line, highlighted as JSON


def plural(count: numbers.Integral, singular: str, plural_form: str | None = None) -> str:
    """``count`` and the noun that agrees with it: "1 chip", "16 chips", "2 batches".

    The plural defaults to ``singular + "s"``; pass ``plural_form`` for any other
    ("batch" -> "batches"). Integers get thousands separators ("1,024 rows").
    """
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise TypeError(f"plural counts whole things: got {count!r} ({type(count).__name__})")
    count = int(count)  # numpy integers too
    noun = singular if count == 1 else (plural_form or singular + "s")
    return f"{count:,} {noun}"


def code(value) -> str:
    """``value`` as a markdown inline code span, shown literally: "`.*dense.*/kernel`".

    The fence is one backtick longer than the longest run of backticks inside, and a space
    pads a value that starts or ends with a backtick (CommonMark strips one such space).
    A value with a line break cannot be one span (use ``code_block``).
    """
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"an inline code span is one line; got {text!r} (use code_block)")
    if not text:
        raise ValueError("an inline code span needs text (an empty one shows as backticks)")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def highlighted_html(text: str, language: str = "text") -> str:
    """``text`` as the highlighted HTML block marimo draws for a fenced block (the same
    ``codehilite`` classes, so the same look), built by Pygments with no markdown on the way:
    no line is moved, no tab expanded, no blank line added or dropped."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    lexer = get_lexer_by_name(
        LEXERS.get(language, language), stripnl=False, stripall=False, ensurenl=False
    )
    formatter = HtmlFormatter(cssclass=f"language-{language} codehilite", wrapcode=True)
    shown = highlight(text, lexer, formatter)
    if not text.endswith("\n"):  # some lexers end every text with a newline: not ours
        shown = re.sub(r"\n((?:</span>)*)</code></pre>", r"\1</code></pre>", shown, count=1)
    return shown


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """A file or command as the page shows it (marimo draws it through ``_mime_``)."""

    source: str  # the text the app meant to show
    language: str
    html: str  # the highlighted block

    def _mime_(self) -> tuple[str, str]:
        return (
            "text/html",
            f'<span class="markdown prose dark:prose-invert contents">{self.html}</span>',
        )


def code_block(source: str, language: str = "text", title: str = "") -> CodeBlock:
    """A file, manifest or command shown verbatim: what the learner copies is ``source``
    exactly. ``title`` names it in a headless run's results (``code/NN.<ext>``).

    No marimo here (interop and the command-line tools import this module): the block is an
    object marimo shows, in a cell's output, ``mo.vstack``, ``mo.accordion`` or a callout.
    """
    from core.lab import results

    source = str(source)
    block = CodeBlock(source, language, highlighted_html(source, language))
    results.record_code(title, language, source, shown_code(block.html)[0])
    return block


def shown_code(rendered: str) -> list[str]:
    """The text of every <pre> block in ``rendered`` HTML as a browser shows it: tags dropped,
    entities decoded, and the one newline that directly follows ``<pre>`` dropped (HTML's
    rule)."""
    texts = []
    for raw in re.findall(r"<pre\b[^>]*>(.*?)</pre>", rendered, flags=re.S):
        raw = raw.removeprefix("\n")
        texts.append(html.unescape(re.sub(r"<[^>]*>", "", raw)))
    return texts
