"""What every lesson app shares: flags that mirror controls, devices, mode, check badges.

A lesson declares its controls once as ``Flag`` specs; the same spec gives the headless
command-line flag (``python apps/x.py --size 64``), its bounds and the marimo control, so
the UI and the exported TPU script cannot drift apart.

    FLAGS = lab.Flags(
        lab.Flag("size", 8, "rows and columns", lo=1, hi=256),
        lab.Flag("dtype", "float32", "element type", choices=("float32", "bfloat16")),
    )
    args = FLAGS.parse()          # argparse namespace (defaults outside script mode)
    size = FLAGS.control("size", args)   # mo.ui.slider bounded by the spec
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from core import curriculum, runtime
from core.flags import Flag, FlagSet, unrecognized  # noqa: F401 (Flag: apps declare lab.Flag)

# What a headless run found: lab.table, Check and guard record into it (core/lab/results.py).
from core.lab import results
from core.lab.results import report  # noqa: F401 (re-exported: an app names a key number)
from core.lab.tables import (  # noqa: F401 (re-exported; marimo-free, the results use them too)
    YES_NO,
    format_number,
    format_value,
    table_markdown,
)

# The process helpers live in core.runtime (no marimo); lessons reach them as lab.*.
from core.runtime import (  # noqa: F401 (re-exported)
    DEFAULT_CPU_DEVICES,
    child_backend_note,
    child_env,
    child_note,
    cpu_device,
    enable_float64,
    float64_note,
    holds_tpu,
    host_has_tpu,
    on_child_backend,
    use_cpu_devices,
)


def phase_line(slug: str) -> str:
    """The line under a lesson's title (``curriculum.phase_line``, derived from the course
    map), with the device notice when this app runs on the CPU because another process holds
    the TPU (a second app of `make lab` on a TPU VM: ``runtime.tpu_notice``), how far the
    learner got in the lesson's exercises, if it asks any (read when the lesson opens), and the
    phase's goal in the map's words (``frame.goal``). One line: a title cell's markdown holds it
    at its own indentation."""
    from core.exercises import progress  # imports the assessment grader: not at lab's import
    from core.lab import frame

    line = curriculum.phase_line(slug) + progress.header_mark(slug) + _device_notice()
    return f"{line} — {frame.goal(slug)}"


def lesson_end(slug: str):
    """The section that closes lesson ``slug`` (``frame.lesson_end``): its TPU results beside
    the CPU's, the previous and next lessons as links, and its primary sources."""
    from core.lab import frame

    return frame.lesson_end(slug)


def track_line(slug: str) -> str:
    """A track app's title line (``curriculum.track_line``), with the device notice."""
    return curriculum.track_line(slug) + _device_notice()


def _device_notice() -> str:
    notice = runtime.tpu_notice()
    return f" — **On the CPU, not the TPU.** {notice}" if notice else ""


def mode() -> str | None:
    """marimo's run mode: "edit", "run" (served), "script" (python app.py), "test" (pytest)."""
    import marimo as mo

    return mo.app_meta().mode


def interactive() -> bool:
    """True in the editor or a served app, where expensive cells wait for a run button."""
    return mode() in ("edit", "run")


class Flags(FlagSet):
    """The flags of one lesson: parse them headless, build controls from them."""

    def parse(
        self, argv: Sequence[str] | None = None, *, strict: bool | None = None
    ) -> argparse.Namespace:
        """Parse ``argv`` (default: sys.argv in script/edit/run mode; nothing under pytest).

        A script run (`python apps/x.py`, an exported script) is ``strict``: an argument its
        app does not have exits with status 2, as argparse does, naming the nearest flag
        (`--sed 5`: "did you mean --seed?"), since running the defaults instead would hide
        the typo. Elsewhere marimo and pytest own part of argv, so unknown arguments are
        ignored. A value out of bounds exits with status 2 and the reason.
        """
        # `python apps/x.py`: the setup cell runs at import, outside marimo's runtime (mode
        # None), in the __main__ module; a served or tested app has a mode, an imported one
        # another module name.
        headless = (
            argv is None
            and mode() in (None, "script")
            and sys._getframe(1).f_globals.get("__name__") == "__main__"
        )
        if argv is None:
            argv = [] if mode() == "test" else sys.argv[1:]
        parser = self.script_parser() if headless else self.parser()
        args, unknown = parser.parse_known_args(list(argv))
        if unknown and (headless if strict is None else strict):
            parser.error(unrecognized(unknown, parser))
        for flag in self.flags.values():
            if not isinstance(flag.default, bool) and (
                reason := flag.check(getattr(args, flag.name))
            ):
                parser.error(reason)
        if headless:
            out = vars(args).pop("out")
            if out is not None and pathlib.Path(out).exists() and not pathlib.Path(out).is_dir():
                parser.error(f"--out {out}: exists and is not a folder")
            lesson = pathlib.Path(getattr(sys.modules.get("__main__"), "__file__", "app")).stem
            results.start(lesson, vars(args), out)
        return args

    def control(self, name: str, args: argparse.Namespace, label: str | None = None):
        """The marimo control for flag ``name``, starting at its parsed value."""
        import marimo as mo

        flag = self.flags[name]
        value = getattr(args, name)
        label = label or flag.label
        if isinstance(flag.default, bool):
            return mo.ui.switch(value=value, label=label)
        if flag.choices is not None:
            return mo.ui.dropdown(
                options=[str(c) for c in flag.choices], value=str(value), label=label
            )
        step = (
            flag.step if flag.step is not None else (1 if isinstance(flag.default, int) else None)
        )
        return mo.ui.slider(flag.lo, flag.hi, step=step, value=value, label=label, show_value=True)


class Check:
    """A lesson's check: measured errors against their tolerances, one PASS/FAIL verdict.

    ``errors`` is one error or {name: error} (from ``core.numerics``); ``tolerance`` is one
    bound for all or {name: bound}; ``facts`` are yes/no conditions that must hold too
    ({"shapes match": True}). Headless it prints ``PASS: what. max error ...`` (or FAIL) once;
    in the UI its ``badge`` shows the same, with the error table when there is more than one
    error. A test cell calls ``check.assert_passed()``.

        check = lab.Check("vmap equals a Python loop (NumPy float64)", error, 1e-5)
    """

    def __init__(
        self,
        what: str,
        errors: float | dict[str, float],
        tolerance: float | dict[str, float],
        facts: dict[str, bool] | None = None,
    ):
        self.what = what
        self.errors = dict(errors) if isinstance(errors, dict) else {"error": float(errors)}
        if not self.errors:
            raise ValueError("a check needs at least one measured error")
        names = list(self.errors)
        # A numerics.Tolerance carries why it has its value (float32 on a TPU): said in the line.
        given = tolerance.values() if isinstance(tolerance, dict) else [tolerance]
        self.reasons = sorted({getattr(t, "reason", "") for t in given} - {""})
        if isinstance(tolerance, dict):
            if set(tolerance) != set(names):
                raise ValueError(f"tolerances {sorted(tolerance)} do not match errors {names}")
            self.tolerances = {name: float(tolerance[name]) for name in names}
        else:
            self.tolerances = dict.fromkeys(names, float(tolerance))
        self.facts = dict(facts or {})
        # `not error > bound` would let NaN pass: compare the way that fails on NaN.
        self.failed = [n for n in names if not self.errors[n] <= self.tolerances[n]]
        self.failed += [fact for fact, holds in self.facts.items() if not holds]
        self.passed = not self.failed
        worst = max(names, key=lambda n: self.errors[n] / max(self.tolerances[n], 1e-300))
        self.error, self.tolerance = self.errors[worst], self.tolerances[worst]
        if mode() == "script":
            print(self.line())
            results.record_check(self)

    def line(self) -> str:
        """``PASS: what. max error 3.1e-07 (tolerance 1e-05)`` and what failed, if anything."""
        verdict = "PASS" if self.passed else "FAIL"
        text = f"{verdict}: {self.what}. max error {self.error:.3g}"
        reasons = f": {'; '.join(self.reasons)}" if self.reasons else ""
        text += f" (tolerance {self.tolerance:.1g}{reasons})"
        return text + (f"; failed: {', '.join(self.failed)}" if self.failed else "")

    def rows(self) -> list[dict]:
        rows = [
            {
                "measured": name,
                "error": f"{error:.3g}",
                "tolerance": f"{self.tolerances[name]:.1g}",
                "pass": "yes" if name not in self.failed else "no",
            }
            for name, error in self.errors.items()
        ]
        rows += [
            {"measured": fact, "error": "", "tolerance": "must hold", "pass": "yes" if ok else "no"}
            for fact, ok in self.facts.items()
        ]
        return rows

    @property
    def badge(self):
        """The callout: green PASS or red FAIL, with the table when several things are checked."""
        import marimo as mo

        verdict, rest = self.line().split(": ", 1)
        parts = [mo.md(f"**{verdict}**: {rest}")]
        if len(self.errors) + len(self.facts) > 1:
            parts.append(table(self.rows()))
        return mo.callout(mo.vstack(parts), kind="success" if self.passed else "danger")

    def _display_(self):  # marimo shows a Check as its badge
        return self.badge

    def assert_passed(self) -> None:
        assert self.passed, self.line() + "\n" + "\n".join(map(str, self.rows()))


def guard(problem: str | None, *context, headline: str | None = None) -> None:
    """Stop the cell (and every cell that depends on it) when ``problem`` is not None.

    In the UI the learner sees ``context`` (tables, charts) above a warning callout that says
    why (``headline`` in bold first, when given: "**`vmap(f)` cannot work.** <problem>");
    headless it prints ``STOPPED: problem`` and the run goes on to exit 0.
    """
    _stop_cell(problem, context, headline, sys._getframe(1).f_globals)


def _stop_cell(problem: str | None, context, headline: str | None, cell_globals: dict) -> None:
    """guard's work, with the globals of the cell that asked (``guard``'s or ``require``'s
    caller: the names to unbind are that cell's, never core.lab's own)."""
    if problem is None:
        return
    import marimo as mo

    if mode() == "script":
        print(f"STOPPED: {problem}")
        results.record_stop(problem)
    text = f"**{headline}** {problem}" if headline else problem
    _unbind_calling_cell(cell_globals)
    mo.stop(True, mo.vstack([*context, mo.callout(mo.md(text), kind="warn")]))


def _unbind_calling_cell(cell_globals: dict) -> None:
    """Unbind the names the running cell defines, before it stops.

    marimo keeps what a stopped cell bound before ``mo.stop``, and when another control that a
    cell below reads moves, it runs that cell with it (marimo issue #7293): move_to_tpu, with a
    refused project id, then ran its commands on a None TPU VM and showed a traceback. With the
    names unbound, marimo holds the cells below as "ancestor stopped" until the refusal is
    fixed (tests/test_browser.py moves a second control under a refusal).
    """
    try:
        from marimo._runtime.context import get_context

        context = get_context()
        cell_id = context.execution_context.cell_id
        names = context.graph.cells[cell_id].defs
    except Exception:  # not inside a marimo run (a plain call, a test): nothing bound
        return
    for name in names:
        cell_globals.pop(name, None)


def require(*modules: str, sockets: bool = False, why: str = "", programs=()) -> None:
    """Stop (``guard``) where this host lacks what the cell needs: optional frameworks
    (``modules``: "torch", "gymnasium", ...), ``programs`` ("hadolint") and, with ``sockets``,
    a loopback socket (servers, jax.distributed). The refusal names what is missing and how to
    get it (``runtime.host_lacks``); ``why`` says what needs it.

        lab.require("torch", why="the reference is torch's scaled_dot_product_attention")
    """
    _stop_cell(
        runtime.host_lacks(modules, sockets, why, programs),
        (),
        "This host lacks what this part needs.",
        sys._getframe(1).f_globals,  # the calling cell's, as guard passes its caller's
    )


def table(
    rows: list[dict],
    caption: str = "",
    *,
    words: dict[str, tuple[str, str]] | None = None,
    digits: int = 4,
):
    """A small static table (markdown): lighter to render than mo.ui.table for a few rows.

    Cells go through format_value: bools read "yes"/"no" unless ``words`` gives a column its
    own pair (``words={"check": ("PASS", "FAIL")}``), floats get ``digits`` significant digits.
    A cell shows its text as it is (a regex, a glob, a path: ``tables.literal_html``), but
    for `code spans`; a ``|`` cannot split the table.
    """
    import marimo as mo

    results.record_table(rows, caption)
    return mo.md(table_markdown(rows, caption, words=words, digits=digits, literal=True))
