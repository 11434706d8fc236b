"""``course-run --local --wheelhouse DIR`` on a host with nothing of the course installed.

Standard library only: ``tpu_scripts/__main__.py`` calls ``prepare`` before it imports the
course run (which needs pydantic and the rest). The parts are installed into ``--site``
(default ``<runs-root>/site``; parts already there are skipped), then the checkout and the
site are put after the host's own PYTHONPATH entries, in this process and for the lessons it
starts, so the host's JAX stays first.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from tpu_scripts.wheelhouse import install

ROOT = pathlib.Path(__file__).resolve().parents[2]


def wants(argv: list[str]) -> bool:
    """A local course run given a wheelhouse."""
    given = any(a == "--wheelhouse" or a.startswith("--wheelhouse=") for a in argv)
    return argv[:1] == ["course-run"] and "--local" in argv and given


def site_for(argv: list[str]) -> pathlib.Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--site")
    parser.add_argument("--runs-root", default=str(ROOT / "runs"))
    known, _ = parser.parse_known_args(argv)
    return pathlib.Path(known.site or pathlib.Path(known.runs_root) / "site")


def activate(site: pathlib.Path) -> None:
    """The checkout and ``site`` after the host's PYTHONPATH: here and for child processes."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    added = [str(p) for p in (ROOT, site.resolve()) if str(p) not in entries]
    os.environ["PYTHONPATH"] = os.pathsep.join(entries + added)
    first = [os.path.abspath(p) for p in entries]
    at = max((i + 1 for i, p in enumerate(sys.path) if os.path.abspath(p) in first), default=1)
    for offset, path in enumerate(p for p in added if p not in sys.path):
        sys.path.insert(at + offset, path)


def prepare(argv: list[str]) -> int:
    """Install the wheelhouse named in ``argv`` and activate its site; 0, or 1 (refused)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--wheelhouse", action="append", default=[])
    known, _ = parser.parse_known_args(argv)
    site = site_for(argv)
    try:
        install.install([pathlib.Path(d) for d in known.wheelhouse], site)
    except install.Refused as exc:
        print(str(exc), file=sys.stderr)
        return 1
    activate(site)
    return 0
