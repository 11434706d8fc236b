"""A time or speed quoted as measured cites its benchmark record, or is not quoted.

The course's prose (the apps' text, comments and docstrings of the library, the README, the
docs) may say how fast something was on some machine only by pointing at a kept record
(``benchmarks/records/...``, ``records.cite``/``records.latest``) or by computing the figure
live (an f-string field). Otherwise a figure measured once, on one machine, under whatever
load it had, reads as a fact forever (issue 36: a torch.compile time, browser idle times and
a 6.9x ratio measured under load lived on in the text).

What counts, per sentence: a time (``32 s``, ``~10-50 ms``), a speed-up (``1.5x slower``), a
share of a step (``40-60% of the step``), a throughput (``tokens/s``, ``GB/s``) or a fault
count, in a sentence that says where or how it was measured (measured, CPU, cores, machine,
here, loaded, takes, compiles, faster, about, ``~``). A budget, limit or timeout (``within
30 s``, ``a timeout of 120 s``) is a setting, not a measurement; a figure an f-string computes
is live. Numerical margins of deterministic checks (errors over seeds) are not in its scope.
"""

from __future__ import annotations

import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY_GLOBS = (
    "apps/*.py",
    "core/**/*.py",
    "capstones/**/*.py",
    "interop/**/*.py",
    "tpu_scripts/**/*.py",
    "benchmarks/*.py",
)
MD_GLOBS = (
    "README.md",
    "docs/*.md",  # the manual's pages: a figure moved out of README stays checked
    "CONTRIBUTING.md",
    "apps/README.md",
    "docs/portfolio/*.md",
    "deploy/*.md",
)

_NUM = r"(?<![\w.\-/=:{])~?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?![A-Za-wyz_\d])"
_RANGE = rf"{_NUM}(?:\s*(?:-|to|–|->|→)\s*~?\d[\d,]*(?:\.\d+)?)?"
FIGURE = re.compile(
    rf"{_RANGE}\s?(?:s|ms|us|µs|ns|secs?|seconds?|minutes?|mins?|hours?)\b(?!/)"
    rf"|{_RANGE}\s?x\s+(?:faster|slower|longer|shorter|quicker|as fast|the speed)"
    rf"|{_RANGE}\s?%\s+(?:faster|slower|of the step|of the time|longer)"
    rf"|{_RANGE}\s?(?:tokens/s|GB/s|GiB/s|MB/s|req/s|rows/s|steps/s|[TGM]?FLOP/s)"
    rf"|{_RANGE}\s?(?:page )?faults\b|\bMFU\s+(?:of\s+)?{_NUM}"
)
CONTEXT = re.compile(
    r"\bmeasur(?:ed|es|ing)\b|\bCPUs?\b|\bcores?\b|\bmachines?\b|\bbox\b|\bhere\b|\bloaded\b"
    r"|\bidle\b|\btakes?\b|\btook\b|\btaking\b|\bcompil\w*|\bfaster\b|\bslower\b|\bseen\b"
    r"|\bcosts?\b|\bpress\b|\babout\b|~\s?\d",
    re.IGNORECASE,
)
# a setting right before the figure: "a timeout of 30 s", "within 2 s", "every 15-60 s"
SETTING = re.compile(
    r"\b(?:budget|limit|timeout|time-?out|deadline|at most|no more than|within|under|bound|cap"
    r"|every|after|up to|wait|waits|waiting|sleep|sleeps|pause|interval|--[\w-]+)\b[^.;:]{0,25}$",
    re.IGNORECASE,
)
# ... or right after it: "a 50 ms pause", "a 2 s timeout"
SETTING_AFTER = re.compile(
    r"^\s*(?:pause|timeout|time-?out|interval|budget|limit|window|sleep|deadline|period)\b",
    re.IGNORECASE,
)
CITES = re.compile(r"benchmarks/records/|records\.(?:cite|latest)")
SENTENCE = re.compile(r"(?<=[.;!?])\s+(?=[A-Z(*`])")


def _string_text(token: str) -> str:
    """A string literal's text; an f-string's replacement fields become ``{}`` (live)."""
    prefix, quote = re.match(r"([rbuRBUfF]*)('''|\"\"\"|'|\")", token).groups()
    body = token[len(prefix) + len(quote) : len(token) - len(quote)]
    if "f" in prefix.lower():
        body = body.replace("{{", "\0").replace("}}", "\1")
        previous = None
        while previous != body:
            previous, body = body, re.sub(r"\{[^{}]*\}", "{}", body)
        body = body.replace("\0", "{").replace("\1", "}")
    return body


def py_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of each run of comment lines and each run of adjacent string literals."""
    blocks: list[tuple[int, str]] = []
    parts: list[str] = []
    kind, start = None, 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            this, text = "comment", token.string.lstrip("#").strip()
        elif token.type == tokenize.STRING:
            this, text = "string", _string_text(token.string)
        elif token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            continue
        elif kind == "string" and token.type == tokenize.OP and token.string in "()":
            continue
        else:
            this, text = None, None
        if this != kind and parts:
            blocks.append((start, " ".join(parts)))
            parts = []
        kind = this
        if text is not None:
            if not parts:
                start = token.start[0]
            parts.append(text)
    if parts:
        blocks.append((start, " ".join(parts)))
    return blocks


def md_prose(text: str) -> list[tuple[int, str]]:
    """(line, paragraph) of a Markdown file (code blocks included: their comments are prose)."""
    blocks, lines, start = [], [], 1
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("```"):
            if lines:
                blocks.append((start, " ".join(lines)))
            lines = []
            continue
        if not lines:
            start = number
        lines.append(line.strip())
    if lines:
        blocks.append((start, " ".join(lines)))
    return blocks


def uncited_figures(text: str) -> list[tuple[str, str]]:
    """(figure, sentence) for each sentence of ``text`` that quotes a measured time or speed
    without citing a record."""
    found = []
    for sentence in SENTENCE.split(text):
        if CITES.search(sentence) or not CONTEXT.search(sentence):
            continue
        for match in FIGURE.finditer(sentence):
            before = sentence[max(0, match.start() - 40) : match.start()]
            if not SETTING.search(before) and not SETTING_AFTER.search(sentence[match.end() :]):
                found.append((match.group(0), " ".join(sentence.split())))
                break
    return found


def _course_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    files = [p for g in PY_GLOBS for p in root.glob(g) if not p.name.endswith("_test.py")]
    return sorted(files) + sorted(p for g in MD_GLOBS for p in root.glob(g))


def uncited_in_files(root: pathlib.Path = ROOT) -> list[str]:
    """``path:line: [figure] sentence`` for each uncited figure in the course's files."""
    found = []
    for path in _course_files(root):
        text = path.read_text(encoding="utf-8")
        blocks = md_prose(text) if path.suffix == ".md" else py_prose(text)
        for line, block in blocks:
            for figure, sentence in uncited_figures(block):
                found.append(f"{path.relative_to(root)}:{line}: [{figure}] {sentence[:160]}")
    return found


def test_no_prose_quotes_a_measured_figure_without_a_record():
    found = uncited_in_files()
    assert not found, (
        "figures quoted as measured without a record: cite benchmarks/records/<name>/ "
        "(core.perf.records.cite), compute them live, or say how to measure them instead:\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "its first step compiled for 32 s on this 2-core CPU (then 2.5 ms per step)",
        "level 0 compiles ~2x faster and runs ~1.5x slower (measured on the course's CPU)",
        "Every step page-faulted them in again, about 10^5 faults and 0.3 s of system CPU.",
        "Turning them off costs 40-60% of the step.",
        "Press **Train** (about 10 s at the default 30 steps).",
        "The loop decoded 406 tokens/s on this machine.",
    ],
)
def test_a_quoted_measurement_is_found(text):
    assert uncited_figures(text)


@pytest.mark.parametrize(
    "text",
    [
        "compiled in {} s on {} (this CPU), {}x faster than eager",  # f-string fields: live
        "2.06 ms per step on this CPU (benchmarks/records/keras_backends/)",
        "a hung child is killed after a timeout of 120 s on a loaded machine",
        "runs every cell in well under 30 s on two CPU cores",
        "explicit Euler, tau = 0.02 s",
        "USD per Mtok = USD per chip-hour / (tokens/s * 3600 s/h) * 1e6",
        "a 50 ms pause before each sample lets the other framework's threads go idle",
    ],
)
def test_a_setting_a_live_or_a_cited_figure_is_not(text):
    assert not uncited_figures(text)


def test_fstring_fields_are_live_and_comments_are_prose():
    source = 'x = f"took {t:.1f} s here"  # measured 3.2 s on this CPU\n'
    blocks = py_prose(source)
    assert [text for _, text in blocks] == ["took {} s here", "measured 3.2 s on this CPU"]
    assert not uncited_figures(blocks[0][1]) and uncited_figures(blocks[1][1])


def test_the_manual_s_pages_are_read(tmp_path):
    """A figure moved from README into a docs page is still checked (and README itself is)."""
    (tmp_path / "docs" / "portfolio").mkdir(parents=True)
    quoted = "The loop decoded 406 tokens/s on this machine.\n"
    for name in ("README.md", "docs/deployment.md", "docs/portfolio/guide.md"):
        (tmp_path / name).write_text("# A page\n\n" + quoted, encoding="utf-8")
    found = [line.split(":")[0] for line in uncited_in_files(tmp_path)]
    assert found == ["README.md", "docs/deployment.md", "docs/portfolio/guide.md"]
