"""``key=value`` command-line options shared by every capstone command.

Each command declares the options it takes (name -> (type, default, help)); anything else
of the form ``key=value`` is a Config override (config.py), validated there. A command's
``--help`` lists both.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from capstones.byte_transformer import config as config_lib

REQUIRED = object()  # default of an option that must be given


@dataclasses.dataclass(frozen=True)
class Option:
    kind: type
    default: Any
    help: str


@dataclasses.dataclass(frozen=True)
class Parsed:
    options: dict[str, Any]  # the command's own options, converted
    overrides: dict[str, Any]  # Config fields, converted (apply with dataclasses.replace)

    def __getitem__(self, name: str) -> Any:
        return self.options[name]

    def config(self, base: config_lib.Config | None = None) -> config_lib.Config:
        """``base`` (default: the defaults) with the overrides; UsageError if invalid."""
        return make_config(base or config_lib.Config(), self.overrides)


def make_config(base: config_lib.Config, overrides: Mapping[str, Any]) -> config_lib.Config:
    """``base`` with ``overrides`` applied; an invalid combination is a UsageError."""
    try:
        return dataclasses.replace(base, **overrides)
    except ValueError as exc:
        raise UsageError(f"invalid config: {exc}") from None


class UsageError(ValueError):
    """A bad command line: printed without a traceback, exit status 2."""


def parse(
    argv: Sequence[str], options: Mapping[str, Option], config_overrides: bool = True
) -> Parsed:
    """Split ``key=value`` items into the command's options and Config overrides."""
    own: dict[str, Any] = {}
    rest: list[str] = []
    for item in argv:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got {item!r} (see --help)")
        if key in options:
            own[key] = _convert(key, text, options[key].kind)
        elif config_overrides and key in config_lib.field_types():
            rest.append(item)
        else:
            known = list(options) + (list(config_lib.field_types()) if config_overrides else [])
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"unknown option {key!r}{hint} (see --help)")
    for name, option in options.items():
        if name not in own:
            if option.default is REQUIRED:
                raise UsageError(f"missing required option {name}=... ({option.help})")
            own[name] = option.default
    try:
        overrides = config_lib.parse_overrides(rest)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Parsed(own, overrides)


def _convert(name: str, text: str, kind: type) -> Any:
    """config.convert (the same parsing as a Config override), as a UsageError."""
    try:
        return config_lib.convert(name, text, kind)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def choice(name: str, value: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a UsageError listing them."""
    if value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def help_text(
    command: str, summary: str, options: Mapping[str, Option], config_overrides: bool
) -> str:
    lines = [f"usage: python -m capstones.byte_transformer {command} [key=value ...]", "", summary]
    if options:
        lines += ["", "options:"]
        for name, option in options.items():
            default = "required" if option.default is REQUIRED else f"default {option.default!r}"
            lines.append(f"  {name:<17} {option.kind.__name__:<6} {default}: {option.help}")
    if config_overrides:
        lines += ["", "config overrides (key=value):", config_lib.help_table()]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: its options and ``run(parsed) -> exit status``."""

    summary: str
    options: Mapping[str, Option]
    run: Any  # Callable[[Parsed], int]
    config_overrides: bool = True
