"""README is the front door and docs/*.md the manual: README opens with the two commands, shows
the phase table of the course map and links every page; the commands README and the pages show
exist, each is documented on one page only, and every relative link resolves.

Every check reads README.md and every page of docs/ (``manual``), so a command or figure moved
from README into a page stays checked; each check is shown to catch a violation planted in a
page of a copy of the manual.
"""

import collections
import pathlib
import re
import shlex
import shutil

import pytest

from core import curriculum
from core.tpu import cloud_tpu

ROOT = curriculum.REPO_ROOT
README = (ROOT / "README.md").read_text(encoding="utf-8")
README_MAX_LINES = 200  # a front door: what the project is, the two commands, where to go next


def manual(root: pathlib.Path = ROOT) -> dict[str, str]:
    """README.md and every page of docs/ (docs/*.md; the portfolio guides, schemas and seeds in
    its folders have checks of their own), by path relative to ``root``."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8") for path in paths}


def planted_copy(tmp_path: pathlib.Path, page: str, text: str) -> pathlib.Path:
    """A copy of README.md and docs/*.md under ``tmp_path``, the checkout's folders and other
    files linked beside them (never a page: the plant must not reach the checkout), with
    ``text`` added to the page ``page`` (created when missing)."""
    (tmp_path / "docs").mkdir()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in pages:
        shutil.copy2(path, tmp_path / path.relative_to(ROOT))
    for folder in (ROOT, ROOT / "docs"):
        for entry in folder.iterdir():
            link = tmp_path / entry.relative_to(ROOT)
            if entry not in pages and not link.exists() and entry.name not in (".git", ".venv"):
                link.symlink_to(entry)
    target = tmp_path / page
    assert not target.is_symlink() and target.resolve().is_relative_to(tmp_path.resolve())
    with target.open("a", encoding="utf-8") as out:
        out.write(text)
    return tmp_path


def code_lines(text: str) -> list[str]:
    """The command lines of a page's fenced blocks, comments and blank lines dropped."""
    lines, in_block = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
        elif in_block and not line.lstrip().startswith("#"):
            command = line.split(" #")[0].strip()
            if command:
                lines.append(command)
    return lines


def prose(text: str) -> str:
    """A page without its fenced blocks."""
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.DOTALL | re.MULTILINE)


# --- README, the front door --------------------------------------------------------------


def test_readme_opens_with_the_two_commands():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make lab", "make test"]
    # Nothing comes between the title and the two commands.
    assert README.split("\n\n")[1].startswith("```bash\nmake lab")


def test_readme_is_short_and_links_every_page():
    assert len(README.splitlines()) <= README_MAX_LINES, "move the manual into a docs/ page"
    pages = [name for name in manual() if name.startswith("docs/")]
    assert len(pages) >= 8
    for page in pages:
        assert f"]({page})" in README, f"README's table does not link {page}"


def test_readme_phase_table_matches_the_map():
    for number, phase in enumerate(curriculum.PHASES, start=1):
        row = (
            f"| {number} | {phase.title} | "
            + ", ".join(f"`{lesson.slug}`" for lesson in phase.lessons)
            + " |"
        )
        assert row in README, f"README phase table is out of date at phase {number}"


# --- the manual: README and the docs pages -------------------------------------------------


def make_targets_missing(root: pathlib.Path = ROOT) -> list[str]:
    """``page: make TARGET`` for each ``make TARGET`` the manual shows (in a code block or a code
    span) that the Makefile lacks."""
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    missing = []
    for name, text in manual(root).items():
        shown = [line for line in code_lines(text) if line.startswith("make ")]
        shown += re.findall(r"`(make [^`]+)`", prose(text))
        for target in sorted({line.split()[1] for line in shown if len(line.split()) > 1}):
            if f"\n{target}:" not in makefile:
                missing.append(f"{name}: make {target}")
    return missing


def test_every_make_target_the_manual_names_exists():
    assert not make_targets_missing()


def test_the_target_check_reads_the_pages(tmp_path):
    root = planted_copy(tmp_path, "docs/course.md", "\nRun `make no-such-target`.\n")
    assert make_targets_missing(root) == ["docs/course.md: make no-such-target"]


def pages_showing(needle: str, pages: dict[str, str]) -> list[str]:
    return [name for name, text in pages.items() if needle in text]


def test_the_tpu_vm_commands_come_from_core():
    """The gcloud commands the manual shows are the ones core/tpu/cloud_tpu.py builds, on one
    page."""
    vm = cloud_tpu.TpuVm()  # the defaults the manual uses
    steps = cloud_tpu.workflow(vm, "out/virtual_devices_tpu.py", app="apps/virtual_devices.py")
    pages = manual()
    for step, command in steps:
        if command.startswith("gcloud"):
            assert len(pages_showing(command, pages)) == 1, f"out of date for step {step!r}"


@pytest.mark.parametrize(
    "package,prefix,target",
    [("byte_transformer", "$B", "capstone"), ("pallas_kernel", "$K", "pallas-capstone")],
)
def test_the_manual_shows_every_capstone_command_once(package, prefix, target):
    import importlib

    cli = importlib.import_module(f"capstones.{package}.cli")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"\n{target}:" in makefile
    pages = manual()
    for command in cli.REGISTRY:
        shown = pages_showing(f"{prefix} {command} ", pages)
        assert len(shown) == 1, f"{prefix} {command}: shown on {shown or 'no page'}"


def test_the_capstone_check_reads_the_pages(tmp_path):
    root = planted_copy(tmp_path, "README.md", "")
    page = root / "docs" / "capstone.md"
    page.write_text(page.read_text(encoding="utf-8").replace("$B serve ", "$B"), encoding="utf-8")
    assert pages_showing("$B serve ", manual(root)) == []
    assert pages_showing("$B serve ", manual()) == ["docs/capstone.md"]


def assessment_problems(pages: dict[str, str]) -> tuple[int, list[str]]:
    """(how many ``python -m core.assessment`` lines the pages show, the ones that do not
    parse)."""
    from core.assessment import __main__ as grader

    lines = [
        (name, line)
        for name, text in pages.items()
        for line in code_lines(text)
        if line.startswith(".venv/bin/python -m core.assessment ")
    ]
    bad = []
    for name, line in lines:
        try:
            grader.build_parser().parse_args(shlex.split(line)[3:])
        except SystemExit:
            bad.append(f"{name}: {line}")
    return len(lines), bad


def test_the_assessment_commands_parse():
    """Every `python -m core.assessment ...` line the manual shows is a valid command."""
    count, bad = assessment_problems(manual())
    assert count >= 5 and not bad, bad


def test_the_assessment_check_reads_the_pages(tmp_path):
    line = ".venv/bin/python -m core.assessment grade --no-such-flag\n"
    root = planted_copy(tmp_path, "docs/planted.md", f"```bash\n{line}```\n")
    count, bad = assessment_problems(manual(root))
    assert bad == [f"docs/planted.md: {line.strip()}"]


def commands_on_several_pages(pages: dict[str, str]) -> dict[str, list[str]]:
    """Each command line shown in the fenced blocks of more than one page, with its pages: a
    command is documented once, where its task is."""
    where = collections.defaultdict(set)
    for name, text in pages.items():
        for line in code_lines(text):
            where[line].add(name)
    return {line: sorted(names) for line, names in where.items() if len(names) > 1}


def test_each_command_is_documented_on_one_page():
    assert not commands_on_several_pages(manual())


def test_the_once_check_catches_a_copied_command(tmp_path):
    copied = code_lines(manual()["docs/capstone.md"])[2]
    root = planted_copy(tmp_path, "docs/planted.md", f"```bash\n{copied}\n```\n")
    assert commands_on_several_pages(manual(root)) == {
        copied: ["docs/capstone.md", "docs/planted.md"]
    }


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(root: pathlib.Path = ROOT) -> list[str]:
    """``page: target`` for each relative link of the manual (outside code) whose file is
    missing, or whose #anchor names no heading of that Markdown file."""
    broken = []
    for name, text in manual(root).items():
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(text)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            file = (root / name).parent / path if path else root / name
            if not file.exists():
                broken.append(f"{name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", prose(file.read_text(encoding="utf-8")), re.M)
                if anchor not in {heading_anchor(h) for h in headings}:
                    broken.append(f"{name}: {target}")
    return broken


def test_every_relative_link_resolves():
    assert not broken_links()


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path):
    root = planted_copy(
        tmp_path,
        "docs/course.md",
        "\nSee [gone](no_such_page.md), [the lab](course.md#no-such-heading) and "
        "[home](../README.md#the-course).\n",
    )
    assert broken_links(root) == [
        "docs/course.md: no_such_page.md",
        "docs/course.md: course.md#no-such-heading",
    ]


def test_heading_anchors_follow_github():
    assert heading_anchor("Two apps, one chip: `make lab` on a TPU VM") == (
        "two-apps-one-chip-make-lab-on-a-tpu-vm"
    )
    assert heading_anchor("Keep the TPU's results: `course-record`") == (
        "keep-the-tpus-results-course-record"
    )
