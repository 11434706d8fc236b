"""Run every app with all its flags at their lowest, then their highest allowed value.

Not a test (pytest does not collect it): a tool to run by hand, one app at a time, e.g.

    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_extremes.py --out-dir /tmp/sweep
    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_extremes.py attention vmap

"low" sets every numeric flag to its lower bound and every dropdown to its first option,
"high" every numeric flag to its upper bound and every dropdown to its last option; switches
and free text keep their defaults. Seeds are swept too (a check must hold at every seed).

A run is "ok" when it exits 0 with no traceback and no FAIL line, "refused" when an app's
guard stopped it cleanly (`STOPPED: <why>`, exit 0, no traceback: the control said no with the
reason), and "failed" otherwise (a traceback, an AssertionError, a FAIL line, a non-zero exit);
"timeout" past --timeout-s. Exit status 1 when a run failed.

The app runs exactly as `python apps/NAME.py FLAGS...` would: this file, run as
``python sweep_extremes.py --child APP low``, reads the app's own ``lab.Flags`` as the app
builds them (bounds and choices may be computed), puts the extreme values into ``sys.argv``
before the app parses it, prints that command line, and runs the app file as ``__main__``.
tests/test_sweep_extremes.py runs a selection of the same runs in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import runpy
import shlex
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
APPS_DIR = REPO / "apps"
SIDES = ("low", "high")
COMMAND_PREFIX = "# sweep: "  # the child prints the equivalent command line after this


def extreme_argv(flags, side: str) -> list[str]:
    """The command-line flags that put every numeric flag and dropdown at ``side``."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    argv = []
    for flag in flags.values():
        if isinstance(flag.default, bool):
            continue
        if flag.choices is not None:
            value = flag.choices[0 if side == "low" else -1]
        elif flag.lo is not None and flag.hi is not None:
            value = flag.lo if side == "low" else flag.hi
        else:  # free text keeps its default
            continue
        argv.append(f"{flag.option}={value}")
    return argv


def child(app: pathlib.Path, side: str, rest: list[str]) -> None:
    """Become `python APP <extreme flags> REST...` (see the module docstring)."""
    sys.path.insert(0, str(REPO))
    from core import lab

    app = app.resolve()
    original_init = lab.Flags.__init__

    def init(self, *flags, **kwargs):
        original_init(self, *flags, **kwargs)
        caller = sys._getframe(1).f_globals
        if caller.get("__name__") == "__main__" and caller.get("__file__") == str(app):
            argv = [*extreme_argv(self.flags, side), *rest]
            sys.argv = [sys.argv[0], *argv]
            print(COMMAND_PREFIX + shlex.join(["python", _shown(app), *argv]), flush=True)

    lab.Flags.__init__ = init
    sys.argv = [str(app)]
    sys.path[0] = str(app.parent)  # as `python APP` sets it
    runpy.run_path(str(app), run_name="__main__")


def _shown(app: pathlib.Path) -> str:
    try:
        return str(app.relative_to(REPO))
    except ValueError:
        return str(app)


def classify(returncode: int | None, stdout: str, stderr: str) -> str:
    """The outcome: "ok", "refused" (a clean STOPPED), "failed", "timeout" (returncode None)."""
    if returncode is None:
        return "timeout"
    output = stdout + stderr
    lines = stdout.splitlines()
    broken = (
        returncode != 0
        or "Traceback" in output
        or "AssertionError" in output
        or any(line.startswith("FAIL:") for line in lines)
    )
    if broken:
        return "failed"
    return "refused" if any(line.startswith("STOPPED: ") for line in lines) else "ok"


def command_line(stdout: str) -> str:
    return next(
        (
            line[len(COMMAND_PREFIX) :]
            for line in stdout.splitlines()
            if line.startswith(COMMAND_PREFIX)
        ),
        "",
    )


def summary(stdout: str, stderr: str) -> list[str]:
    """The lines that say what happened: checks, refusals, the exception."""
    keep = [
        line[:300]
        for line in stdout.splitlines()
        if line.startswith(("PASS:", "FAIL:", "STOPPED:"))
    ]
    errors = [line for line in (stdout + stderr).splitlines() if "Error" in line[:60]]
    return keep + [line[:300] for line in errors[-2:]]


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    base.update(JAX_PLATFORMS=base.get("JAX_PLATFORMS", "cpu"), JAX_NUM_CPU_DEVICES="8")
    return base


def run_one(app: pathlib.Path, side: str, timeout_s: float, runner=None) -> dict:
    """One extreme run of ``app``: {"app", "side", "outcome", "command", "seconds", ...}."""
    argv = [__file__, "--child", str(app), side]
    began = time.monotonic()
    try:
        if runner is None:
            result = subprocess.run(
                [sys.executable, *argv],
                capture_output=True, text=True, cwd=REPO, env=env(), timeout=timeout_s,
            )  # fmt: skip
        else:
            result = runner(argv, env=env(), cwd=REPO, timeout=timeout_s)
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as expired:
        returncode = None
        stdout = expired.stdout if isinstance(expired.stdout, str) else ""
        stderr = expired.stderr if isinstance(expired.stderr, str) else ""
    return {
        "app": app.stem,
        "side": side,
        "outcome": classify(returncode, stdout, stderr),
        "returncode": returncode,
        "command": command_line(stdout),
        "seconds": round(time.monotonic() - began, 1),
        "summary": summary(stdout, stderr),
        "tail": (stdout + stderr)[-3000:],
    }


RECORD = REPO / "tests" / "sweep_extremes_record.json"


def sweep_record(results: list[pathlib.Path], note: str) -> dict:
    """The sweep's record from results.jsonl files (a later run of an app's end replaces an
    earlier one): {"note", "counts", "runs": {"<app> <side>": {outcome, seconds, command,
    summary}}}. tests/test_sweep_extremes.py reads it to leave the slowest ends out of CI."""
    runs: dict[str, dict] = {}
    for path in results:
        for line in path.read_text(encoding="utf-8").splitlines():
            run = json.loads(line)
            runs[f"{run['app']} {run['side']}"] = {
                k: run[k] for k in ("outcome", "seconds", "command", "summary")
            }
    counts: dict[str, int] = {}
    for run in runs.values():
        counts[run["outcome"]] = counts.get(run["outcome"], 0) + 1
    return {"note": note, "counts": counts, "runs": dict(sorted(runs.items()))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("apps", nargs="*", help="app stems (default: every app in apps/)")
    parser.add_argument("--sides", default="low,high", help="comma-separated: low, high")
    parser.add_argument("--timeout-s", type=float, default=900, help="seconds for one run")
    parser.add_argument("--out-dir", type=pathlib.Path, help="write results.jsonl and log here")
    parser.add_argument(
        "--record",
        nargs="+",
        type=pathlib.Path,
        metavar="RESULTS",
        help=f"write {RECORD.relative_to(REPO)} from these results.jsonl files and stop",
    )
    parser.add_argument("--note", default="", help="with --record: where and how it ran")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        app, side, *rest = args.child
        child(pathlib.Path(app), side, rest)
        return 0
    if args.record:
        RECORD.write_text(json.dumps(sweep_record(args.record, args.note), indent=1) + "\n")
        return 0
    sides = [s for s in args.sides.split(",") if s]
    if not set(sides) <= set(SIDES):
        parser.error(f"--sides: choose from {', '.join(SIDES)}")
    paths = [APPS_DIR / f"{a.removesuffix('.py')}.py" for a in args.apps] or sorted(
        APPS_DIR.glob("*.py")
    )
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such app: {', '.join(missing)}")
    out = None
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        out = (args.out_dir / "results.jsonl").open("a")
    counts: dict[str, int] = {}
    for path in paths:
        for side in sides:
            record = run_one(path, side, args.timeout_s)
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
            print(
                f"{path.stem} {side}: {record['outcome']} in {record['seconds']:.0f} s"
                + (
                    f"  {record['summary'][-1]}"
                    if record["outcome"] != "ok" and record["summary"]
                    else ""
                ),
                flush=True,
            )
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()
    print("totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    return 1 if counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
