"""``key=value`` command-line options shared by every capstone command.

Each command declares the options it takes (name -> (type, default, help)); anything else
of the form ``key=value`` is a Config override (config.py), validated there. A command's
``--help`` lists both.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import sys
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
    named: dict[str, Any] = {}  # preset=NAME's values; explicit overrides win over them
    for item in argv:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got {item!r} (see --help)")
        if config_overrides and key == "preset" and "preset" not in options:
            if text not in config_lib.PRESETS:
                raise UsageError(
                    f"unknown preset {text!r}; presets: {', '.join(config_lib.PRESETS)}"
                )
            named = dict(config_lib.PRESETS[text])
        elif key in options:
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
    return Parsed(own, named | overrides)


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


PROG = "python -m capstones.byte_transformer"
HELP_WORDS = ("-h", "--help", "help")


def help_text(
    command: str,
    summary: str,
    options: Mapping[str, Option],
    config_overrides: bool,
    prog: str = PROG,
) -> str:
    lines = [f"usage: {prog} {command} [key=value ...]", "", summary]
    if options:
        lines += ["", "options:"]
        for name, option in options.items():
            default = "required" if option.default is REQUIRED else f"default {option.default!r}"
            lines.append(f"  {name:<17} {option.kind.__name__:<6} {default}: {option.help}")
    if config_overrides:
        presets = ", ".join(config_lib.PRESETS)
        lines += [
            "",
            f"preset=NAME starts from a named config ({presets}; config.PRESETS), and the",
            "config overrides given with it win over its values.",
            "",
            "config overrides (key=value):",
            config_lib.help_table(),
        ]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: its options and ``run(parsed) -> exit status``."""

    summary: str
    options: Mapping[str, Option]
    run: Any  # Callable[[Parsed], int]
    config_overrides: bool = True


# --- a capstone's command line: COMMAND [key=value ...] --------------------------------------


def usage(prog: str, registry: Mapping[str, tuple[str, str]]) -> str:
    """The command list of a ``{command: (module, one-line summary)}`` registry."""
    width = max(map(len, registry)) + 1
    lines = [f"usage: {prog} COMMAND [key=value ...]", "", "commands:"]
    lines += [f"  {name:<{width}} {summary}" for name, (_, summary) in registry.items()]
    lines += ["", f"{prog} COMMAND --help: the command's options"]
    return "\n".join(lines)


def load_command(package: str, registry: Mapping[str, tuple[str, str]], name: str) -> Command:
    """The Command ``name`` from its module's COMMANDS (modules load only when they run)."""
    module_name, _ = registry[name]
    return importlib.import_module(f"{package}.{module_name}").COMMANDS[name]


def dispatch(
    argv: Sequence[str],
    *,
    prog: str,
    package: str,
    registry: Mapping[str, tuple[str, str]],
    prepare=None,
    overrides_note: str = "",
) -> int:
    """Run ``COMMAND [key=value ...]``: usage (exit 2 without a command), the command's
    --help, or its run; an unknown command or a UsageError prints to stderr and exits 2.
    ``prepare()`` runs before the command's module loads (process-wide settings);
    ``overrides_note`` ends the --help of commands that take config overrides."""
    argv = list(argv)
    if not argv or argv[0] in HELP_WORDS:
        print(usage(prog, registry))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in registry:
        print(f"unknown command {name!r}\n\n{usage(prog, registry)}", file=sys.stderr)
        return 2
    if prepare is not None:
        prepare()
    spec = load_command(package, registry, name)
    if any(item in ("-h", "--help") for item in rest):
        text = help_text(name, spec.summary, spec.options, spec.config_overrides, prog)
        print(text + (overrides_note if spec.config_overrides else ""))
        return 0
    try:
        parsed = parse(rest, spec.options, spec.config_overrides)
        return int(spec.run(parsed) or 0)
    except UsageError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
