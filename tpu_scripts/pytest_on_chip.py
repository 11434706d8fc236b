"""`pytest core/` on a TPU chip, in one command: python -m tpu_scripts.pytest_on_chip --out DIR.

Runs the chosen test paths in the suite's chip mode (JAX_TPU_LAB_TEST_BACKEND=tpu, one
process: a chip serves one process at a time) and writes to DIR:

    junit.xml      pytest's JUnit report (every test, its outcome, a skip's reason)
    pytest.log     the whole output
    summary.json   the counts read from junit.xml, the summary line, the command, the exit code

The run stops before ``--budget`` seconds (default 510: under 9 minutes, so a host that cuts
commands off at 10 minutes holds it with its start and transfers): pytest gets SIGINT,
writes its report for the tests that ran, and the summary says the run was cut. With
pytest-timeout installed one test may take at most ``--per-test`` seconds. Standard library
only (a TPU VM's image may bring just Python 3.11, JAX, libtpu and pytest).

A cut run continues in the next command: ``--after DIR/junit.xml`` (repeatable) leaves out
every test an earlier report holds, by exact node id (pytest's own ``--deselect`` matches
prefixes: deselecting ``test_p[1]`` would drop ``test_p[10]`` too). The records combine the
reports: ``course-record --pytest-summary A/junit.xml --pytest-summary B/junit.xml``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from core import runtime
from tpu_scripts import pytest_continue

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# The groups of issue 37's first chip run (182 failed, 385 passed, 5 skipped in 496 s).
DEFAULT_PATHS = (
    "core/numerics_test.py",
    "core/kernels",
    "core/lm",
    "core/nn",
    "core/distributed",
    "core/perf",
)
BUDGET_SECONDS = 510
PER_TEST_SECONDS = 120
GRACE_SECONDS = 30  # after SIGINT, for pytest to write junit.xml and its summary
DONE_ENV = pytest_continue.DONE_ENV
# With -q (as here) pytest prints its last line bare, "5 failed, 183 passed in 43.44s"; without,
# between "=" rules. The line holds the run's time ("in 43.44s"): a test's own output is not it.
SUMMARY_LINE = re.compile(
    r"(?:=+ )?(\d+ (?:passed|failed|skipped|errors?|deselected)\b.* in [\d.]+s\b.*?)(?: =+)?"
)


def chip_env() -> dict[str, str]:
    """The child's environment (``runtime.child_env``: without pytest's markers): chip mode,
    JAX's TPU beside its CPU backend (a caller's platforms are kept where they name the TPU),
    no compilation cache probe (two extra processes; the chip's run compiles once anyway)."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    names_tpu = "tpu" in [p.strip() for p in platforms.split(",")]
    env = runtime.child_env(  # a caller's JAX_PLATFORMS=cpu would leave the chip unused
        JAX_TPU_LAB_TEST_BACKEND="tpu", JAX_PLATFORMS=platforms if names_tpu else "tpu,cpu"
    )
    env.setdefault("JAX_LAB_TEST_COMPILATION_CACHE", "0")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def pytest_command(paths, out: pathlib.Path, per_test: float | None, python=sys.executable):
    """The pytest command line: one process (no xdist), JUnit XML into ``out``, skip reasons
    listed, the 20 slowest tests named; ``per_test`` seconds per test (pytest-timeout)."""
    command = [python, "-m", "pytest", *paths, "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["-q", "-rfEs", "--durations=20", f"--junitxml={out / 'junit.xml'}"]
    if per_test:
        command.append(f"--timeout={per_test:g}")  # signal method: fails the test, not the run
    return command


def counts_from_junit(path: pathlib.Path) -> dict[str, int] | None:
    """tests, failures, errors, skipped summed over the report's test suites (None: no
    readable report)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {key: 0 for key in ("tests", "failures", "errors", "skipped")}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def node_ids(junit: pathlib.Path, root: pathlib.Path = REPO_ROOT) -> list[str]:
    """The node ids of the tests a JUnit report holds, less the one a cut left unnamed
    (ValueError: unreadable, or a test whose file is not under ``root``). JUnit names a test
    by ``classname`` (the file's dotted path, then any classes) and ``name`` (the function
    with its parameters)."""
    try:
        report = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ValueError(f"{junit}: not a readable junit xml ({exc})") from None
    found = []
    for case in report.iter("testcase"):
        if not case.get("classname"):  # the test a SIGINT cut short: it runs again
            continue
        parts = case.get("classname").split(".")
        for cut in range(len(parts), 0, -1):
            file = "/".join(parts[:cut]) + ".py"
            if (root / file).is_file():
                found.append("::".join([file, *parts[cut:], case.get("name", "")]))
                break
        else:
            raise ValueError(f"{junit}: no test file under {root} for {case.get('classname')!r}")
    return found


def summary_line(log: str) -> str:
    """pytest's last summary line ("3 failed, 120 passed, 8 skipped in 96.20s"), or ""."""
    found = [m.group(1) for line in log.splitlines() if (m := SUMMARY_LINE.fullmatch(line.strip()))]
    return found[-1] if found else ""


def run(
    command, env, log_path: pathlib.Path, budget: float, grace: float = GRACE_SECONDS
) -> tuple[int, bool]:
    """Run ``command`` into ``log_path`` for at most ``budget`` seconds (then SIGINT, then
    SIGKILL after ``grace`` seconds). Returns (exit code, whether it was cut)."""
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            return child.wait(timeout=budget), False
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)  # pytest writes its report for what ran
            try:
                return child.wait(timeout=grace), True
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait(), True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tpu_scripts.pytest_on_chip", description=__doc__.splitlines()[0]
    )
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="test paths")
    parser.add_argument("--out", required=True, help="folder for junit.xml, pytest.log, summary")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds in all")
    parser.add_argument("--per-test", type=float, default=PER_TEST_SECONDS)
    parser.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="JUNIT",
        help="an earlier run's junit.xml: its tests are left out (continue a cut run)",
    )
    args = parser.parse_args(argv)
    if not 30 <= args.budget <= 540:
        parser.error(f"--budget must be 30..540 seconds (under a 600 s limit): {args.budget:g}")
    missing = [p for p in args.paths if not (REPO_ROOT / p.split("::")[0]).exists()]
    if missing:
        parser.error(f"no such test path: {', '.join(missing)}")
    done: list[str] = []
    for junit in args.after:
        try:
            done += node_ids(pathlib.Path(junit))
        except ValueError as exc:
            parser.error(f"--after {exc}")
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    has_timeout = importlib.util.find_spec("pytest_timeout") is not None
    command = pytest_command(args.paths, out, args.per_test if has_timeout else None)
    env = chip_env()
    if done:
        (out / "done.txt").write_text("\n".join(done) + "\n", encoding="utf-8")
        env[DONE_ENV] = str(out / "done.txt")
        command += ["-p", "tpu_scripts.pytest_continue"]  # its hook reads that file
    started = time.monotonic()
    code, cut = run(command, env, out / "pytest.log", args.budget)
    line = summary_line((out / "pytest.log").read_text(encoding="utf-8", errors="replace"))
    summary = {
        "command": " ".join(command[1:]),
        "paths": args.paths,
        "after": args.after,
        "left_out": len(done),
        "exit_code": code,
        "cut_at_budget": cut,
        "seconds": round(time.monotonic() - started, 1),
        "per_test_timeout": args.per_test if has_timeout else None,
        "summary_line": line,
        "counts": counts_from_junit(out / "junit.xml"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(line or f"no pytest summary line: see {out / 'pytest.log'}")
    if cut:
        print(f"CUT at {args.budget:g} s: the counts cover the tests that ran")
    return code


if __name__ == "__main__":
    sys.exit(main())
