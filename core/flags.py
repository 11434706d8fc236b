"""A lesson's flags: the command-line options that mirror its controls (``core.lab.Flags``).

The standard library only (no marimo, no JAX): tpu_scripts/export.py builds an app's flags from
its source with these classes to write its --help without starting the app.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Flag:
    """One control of a lesson, and the command-line flag that mirrors it.

    Numeric flags are bounded by [lo, hi]; string flags take one of ``choices``; a bool
    default makes an on/off switch (``--name`` / ``--no-name``).
    """

    name: str
    default: Any
    help: str
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] | None = None

    def __post_init__(self):
        if isinstance(self.default, bool):
            return
        if self.choices is not None:
            if self.default not in self.choices:
                raise ValueError(
                    f"flag {self.name}: default {self.default!r} not in {self.choices}"
                )
        elif isinstance(self.default, (int, float)):
            if self.lo is None or self.hi is None:
                raise ValueError(f"flag {self.name}: a numeric control needs lo and hi bounds")
            if not self.lo <= self.default <= self.hi:
                raise ValueError(
                    f"flag {self.name}: default {self.default} outside [{self.lo}, {self.hi}]"
                )
        elif not isinstance(self.default, str):
            raise TypeError(f"flag {self.name}: unsupported default type {type(self.default)}")

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    def check(self, value: Any) -> str | None:
        """The reason ``value`` is out of bounds, or None when it is fine."""
        if self.choices is not None and value not in self.choices:
            return f"{self.option} must be one of {', '.join(map(str, self.choices))}"
        if self.lo is not None and self.hi is not None and not self.lo <= value <= self.hi:
            return f"{self.option} must be between {self.lo} and {self.hi}, got {value}"
        return None


class FlagSet:
    """The flags of one lesson and their command-line parser (core.lab.Flags adds parsing
    a run's arguments and the controls)."""

    def __init__(self, *flags: Flag, description: str = ""):
        self.flags = {flag.name: flag for flag in flags}
        self.description = description

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            description=self.description,
            allow_abbrev=False,  # never swallow another program's option by prefix
        )
        for flag in self.flags.values():
            if isinstance(flag.default, bool):
                parser.add_argument(
                    flag.option,
                    action=argparse.BooleanOptionalAction,
                    default=flag.default,
                    help=flag.help,
                )
                continue
            kind = type(flag.default)
            bounds = f" [{flag.lo}..{flag.hi}]" if flag.lo is not None else ""
            parser.add_argument(
                flag.option,
                type=kind,
                default=flag.default,
                choices=flag.choices,
                help=f"{flag.help}{bounds} (default: {flag.default})",
            )
        return parser

    def script_parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        """The parser of a script run (`python apps/x.py`, an exported script): the flags and
        ``--out DIR``; ``prog`` names the program in its usage line (default: argv[0]). Its
        help is what `python x.py --help` prints (tpu_scripts/export.py reads it from here)."""
        parser = self.parser()
        if prog is not None:
            parser.prog = prog
        parser.add_argument(
            "--out",
            default=None,
            metavar="DIR",
            help="write the results (results.json, results.md, charts/) into DIR",
        )
        return parser


def unrecognized(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments" message, with the nearest flag for each typo."""
    known = [option for option in parser._option_string_actions if option.startswith("--")]
    hints = []
    for word in unknown:
        if word.startswith("--"):
            near = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.6)
            hints += [f"did you mean {near[0]}?"] if near else []
    message = f"unrecognized arguments: {' '.join(unknown)}"
    return message + (f" ({'; '.join(hints)})" if hints else "")
