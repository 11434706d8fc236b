"""The project speaks of the hosts a learner has (a Cloud TPU VM, a host without internet, a host
held for a limited time), never of how its authors reached a chip: no file cites a document
outside the repository about that (KINDS.md), a "borrowed" host or chip, or a "device call".

README.md and the docs pages are read like every other file (issue 45, item 6).
"""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Each phrase, and the words a learner reads instead.
TEAM_WORDS = {
    r"KINDS\.md": "cite a public source or a file in the repository",
    r"\bborrow(?:ed|ing)?\b": "a Cloud TPU VM, a host without internet, a host held for a while",
    r"\bdevice calls?\b": "a command (on a host that cuts commands off after some minutes)",
    r"one command a call": "a host held for a limited time",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in TEAM_WORDS), re.IGNORECASE)


def tracked_files(root: pathlib.Path = ROOT) -> list[str]:
    """The repository's tracked files (git ls-files), relative to ``root``."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listing.split("\0") if name]


def team_words(names, root: pathlib.Path = ROOT) -> list[str]:
    """Lines "path:line: text" for each line of ``names`` (text files) that uses a phrase of
    TEAM_WORDS, leaving this file out."""
    found = []
    for name in names:
        if name == "tests/test_host_words.py":
            continue
        path = root / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # a binary file, a submodule, a file deleted but not yet committed
        for number, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    return found


def test_no_tracked_file_speaks_of_the_authors_tools():
    found = team_words(tracked_files())
    assert not found, "say what a learner has instead (TEAM_WORDS):\n" + "\n".join(found)


def test_the_check_catches_each_phrase_in_any_file_the_docs_too(tmp_path):
    lines = {
        "a.py": "# the figure is in device/KINDS.md\n",
        "b.md": "On the borrowed v5e host it stopped.\n",
        "c.json": '{"why": "one part per device call"}\n',
        "d.py": "A chip runs one command a call (at most 10 minutes).\n",
        "e.py": "# a Cloud TPU VM without internet; KINDS = ('a', 'b')\n",
        "README.md": "The borrowed host.\n",
        "docs/x.md": "The borrowed host.\n",
    }
    (tmp_path / "docs").mkdir()
    for name, text in lines.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "f.bin").write_bytes(b"\xff\xfeborrowed")
    found = team_words([*lines, "f.bin"], tmp_path)
    assert [line.split(":")[0] for line in found] == [
        "a.py",
        "b.md",
        "c.json",
        "d.py",
        "README.md",
        "docs/x.md",
    ]
