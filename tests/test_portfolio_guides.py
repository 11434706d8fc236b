"""The capstones' portfolio guides (docs/portfolio/<slug>.md) say what the seeds ask and show
only commands that exist.

Each guide exists, holds every point of its capstone verbatim as a heading, says which parts
need a TPU, shows the course-run round trip and ends with a checklist. Every command it shows
is parsed by the real command line, without running anything:

- ``python -m capstones.<pkg> SUB key=value ...``: SUB is in the CLI's registry and the
  options parse (capstones/byte_transformer/args.py: unknown keys, bad values and missing
  required options are refused);
- ``python -m tpu_scripts SUB ...``: tpu_scripts' argparse parser accepts it; course-run's
  lessons resolve and every named VM (accelerator type, zone) is valid;
- ``python tpu_scripts/X.py ...``: that script's own parser accepts it;
- any other ``python -m capstones...`` module: it exists and its ``--help`` names every flag;
- ``make TARGET``: the Makefile has the target.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import re
import shlex

import pytest

from core import curriculum
from core.tpu import cloud_tpu

CAPSTONES = {capstone.slug: capstone for capstone in curriculum.CAPSTONES}
SHELL_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "2>&1", "<"}
TPU_SCRIPTS = {  # python tpu_scripts/X.py ...: the module whose build_parser() parses it
    "tpu_scripts/byte_transformer_tpu.py": "tpu_scripts.byte_transformer_tpu",
    "tpu_scripts/pallas_kernel_tpu.py": "tpu_scripts.pallas_kernel_tpu",
}


@functools.cache
def guide_text(slug: str) -> str:
    return curriculum.portfolio_guide(slug)


def command_lines(markdown: str) -> list[str]:
    """The shell commands a guide shows: each logical line of a fenced block (joined across
    trailing backslashes, comments dropped) and each inline code span outside the blocks."""
    lines: list[str] = []
    prose: list[str] = []
    in_block, pending = False, ""
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            prose.append(line)
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    lines += re.findall(r"`([^`\n]+)`", "\n".join(prose))
    return [line.strip() for line in lines if line.strip()]


def invocations(line: str) -> list[tuple[str, list[str]]]:
    """(program, argv) for each ``python -m MODULE ...`` / ``python SCRIPT.py ...`` / ``make
    TARGET`` in one command line; argv stops at the first shell operator or redirection."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: not a command line (prose in backticks)
        return []
    found = []
    for i, token in enumerate(tokens):
        rest = tokens[i + 1 :]
        end = next(
            (j for j, t in enumerate(rest) if t in SHELL_OPERATORS or t.startswith((">", "2>"))),
            len(rest),
        )
        rest = rest[:end]
        if token.endswith("python") and rest[:1] == ["-m"] and len(rest) > 1:
            found.append((rest[1], rest[2:]))
        elif token.endswith("python") and rest and rest[0].endswith(".py"):
            found.append((rest[0], rest[1:]))
        elif token == "make" and rest:
            found.append(("make", rest[:1]))
    return found


def guide_invocations(slug: str) -> list[tuple[str, list[str]]]:
    return [found for line in command_lines(guide_text(slug)) for found in invocations(line)]


def _argparse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """parser's complaint about argv (None when it parses); argparse's exit is caught."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        return stderr.getvalue().strip() or f"exit {exc.code}"
    return None


def capstone_problem(package: str, argv: list[str]) -> str | None:
    """Why ``python -m capstones.<package> argv`` would be refused (None: it parses)."""
    from capstones.byte_transformer import args as args_lib

    cli = importlib.import_module(f"capstones.{package}.cli")
    if not argv or argv[0] not in cli.REGISTRY:
        return f"no subcommand {argv[:1]}; the CLI has {sorted(cli.REGISTRY)}"
    spec = cli.command(argv[0])
    try:
        args_lib.parse(argv[1:], spec.options, spec.config_overrides)
    except args_lib.UsageError as exc:
        return str(exc)
    return None


def tpu_scripts_problem(argv: list[str]) -> str | None:
    """Why ``python -m tpu_scripts argv`` would be refused before it runs (None: it parses)."""
    from tpu_scripts import __main__ as tpu_main
    from tpu_scripts import course_run_cli

    argv = argv[: argv.index("--")] if "--" in argv else argv  # after --: the script's own
    parser = tpu_main.build_parser()
    if problem := _argparse_error(parser, argv):
        return problem
    parsed = parser.parse_args(argv)
    if getattr(parsed, "accelerator_type", None):
        try:
            cloud_tpu.TpuVm(
                name=parsed.name, accelerator_type=parsed.accelerator_type, zone=parsed.zone
            )
        except ValueError as exc:
            return str(exc)
    if parsed.command == "course-run":
        # The wheel is built by the guide's step 0; everything else is validated as given.
        parsed.wheel, parsed.dry_run = None, True
        try:
            course_run_cli.options_from_args(parsed)
        except course_run_cli.UsageError as exc:
            return str(exc)
    return None


@functools.cache
def module_help(module: str) -> str:
    """``python -m module --help``'s text, in this process (its ``main(["--help"])``)."""
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            importlib.import_module(module).main(["--help"])
    except SystemExit as exc:
        return stdout.getvalue() if exc.code in (0, None) else ""
    return stdout.getvalue()


def invocation_problem(program: str, argv: list[str]) -> str | None:
    if program in ("capstones.byte_transformer", "capstones.pallas_kernel"):
        return capstone_problem(program.split(".")[1], argv)
    if program == "tpu_scripts":
        return tpu_scripts_problem(argv)
    if program in TPU_SCRIPTS:
        return _argparse_error(importlib.import_module(TPU_SCRIPTS[program]).build_parser(), argv)
    if program.startswith("capstones."):
        text = module_help(program)
        if not text:
            return f"python -m {program} --help fails"
        missing = [a for a in argv if a.startswith("--") and a not in text]
        return f"--help does not name {missing}" if missing else None
    if program == "make":
        makefile = (curriculum.REPO_ROOT / "Makefile").read_text(encoding="utf-8")
        return None if f"\n{argv[0]}:" in makefile else f"no Makefile target {argv[0]!r}"
    return None  # pip, gcloud, pytest, curl: not this project's command lines


@pytest.mark.parametrize("slug", CAPSTONES)
def test_guide_exists_and_is_the_capstones(slug):
    capstone = CAPSTONES[slug]
    assert capstone.guide == curriculum.REPO_ROOT / "docs" / "portfolio" / f"{slug}.md"
    assert capstone.guide.is_file(), f"{capstone.guide} is missing"
    assert guide_text(slug).startswith(f"# Portfolio guide: {capstone.title}\n")


@pytest.mark.parametrize("slug", CAPSTONES)
def test_every_point_is_a_heading_verbatim(slug):
    headings = {
        line[4:].strip() for line in guide_text(slug).splitlines() if line.startswith("### ")
    }
    for point in CAPSTONES[slug].points:
        assert point in headings, f"{slug} guide: no '### {point}' heading"


@pytest.mark.parametrize("slug", CAPSTONES)
def test_each_point_has_evidence_and_a_rubric(slug):
    sections = guide_text(slug).split("\n### ")[1:]
    by_point = {section.split("\n", 1)[0].strip(): section for section in sections}
    for point in CAPSTONES[slug].points:
        body = by_point[point]
        for word in ("Evidence", "Passes:", "Incomplete:", "Defect:"):
            assert word in body, f"{slug} guide, {point!r}: no {word!r}"


@pytest.mark.parametrize("slug", CAPSTONES)
def test_guide_says_what_needs_a_tpu_and_shows_the_round_trip(slug):
    text = guide_text(slug)
    assert "## What runs on CPU, what needs a TPU" in text
    assert "CPU checks establish semantics" in text
    assert "## The TPU round trip" in text
    assert "## Closing checklist" in text
    programs = [(p, a[:1]) for p, a in guide_invocations(slug)]
    for sub in ("course-run", "compare", "launch"):
        assert ("tpu_scripts", [sub]) in programs, f"{slug} guide never runs tpu_scripts {sub}"
    # the evidence of a claimed TPU run, and where it lands
    for phrase in ("runs/tpu/", "run.json", "tpu_result.json", "teardown.log", "claim_tpu=true"):
        assert phrase in text, f"{slug} guide does not mention {phrase!r}"


@pytest.mark.parametrize("slug", CAPSTONES)
def test_every_command_the_guide_shows_exists(slug):
    shown = guide_invocations(slug)
    assert len(shown) >= 10, f"{slug} guide: only {len(shown)} commands found"
    problems = [
        f"{program} {shlex.join(argv)}: {problem}"
        for program, argv in shown
        if (problem := invocation_problem(program, argv))
    ]
    assert not problems, f"{slug} guide shows commands that would be refused:\n" + "\n".join(
        problems
    )


def test_the_command_check_catches_a_wrong_command():
    """The checks above can fail: a typo in a subcommand, an option or a flag is reported."""
    wrong = (
        ("capstones.byte_transformer", ["cache_report", "run_dir=x"]),
        ("capstones.byte_transformer", ["eval", "rundir=x"]),
        ("capstones.pallas_kernel", ["agreement", "quick=maybe"]),
        ("tpu_scripts", ["course-run", "--local", "--lessons", "capstone_transformr"]),  # a typo
        ("tpu_scripts", ["launch", "fetch", "--name", "x", "--accelerator-type", "v9-8", "a"]),
        ("tpu_scripts", ["launch", "teardown", "--name", "x"]),
        ("tpu_scripts/byte_transformer_tpu.py", ["--steps", "3"]),  # --out is required
        ("make", ["capstones"]),
    )
    for program, argv in wrong:
        assert invocation_problem(program, argv), f"{program} {argv} was not refused"
    line = "python -m tpu_scripts compare runs/tpu/vm/day --markdown out.md > log 2>&1 && make lab"
    assert invocations(line) == [
        ("tpu_scripts", ["compare", "runs/tpu/vm/day", "--markdown", "out.md"]),
        ("make", ["lab"]),
    ]


@pytest.mark.parametrize("slug", CAPSTONES)
def test_capstone_app_shows_its_guide(slug):
    source = (curriculum.REPO_ROOT / CAPSTONES[slug].app).read_text(encoding="utf-8")
    assert f'curriculum.portfolio_guide("{slug}")' in source
