"""Sweep every lesson app's flags for cells that run past a refused combination.

Not a test (pytest does not collect it): a tool to run by hand, one app at a time, e.g.

    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_refusals.py            # every app
    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_refusals.py attention vmap
    ... --budget-s 300 --timeout-s 120 --json /tmp/sweep.json --static-only
    ... --selection guards    # a quick pass: only the flag pairs that meet in a guard

For each app it does two things.

1. Static: reads the app's dataflow graph (marimo's own) and lists every cell that reads a
   value a *guard* reads (a guard is a cell that prints `STOPPED:` and calls `mo.stop`) but is
   not downstream of that guard. Such a cell runs even when the guard refuses; it is a bug
   when it fails on the refused values, which step 2 finds out.
2. Dynamic: runs the app headless with flag combinations built from its `lab.Flags`:
   - pairs of flags that meet in one condition or call of a guard (`a % b`, `a >= b`,
     `Config(width=..., heads=...)`): one at its low bound and the other at its high bound and
     back, and for `a % b` each small divisor b (2..8, or b's choices);
   - each flag alone at its low bound, one step either side of its default, its high bound
     (numeric), every other choice (choices), flipped (switches), "" (free text).
   Seeds are left at their default. Runs go in that order until the per-app budget is spent
   (the rest are reported as skipped). A run FAILS when it raises, prints a traceback or exits
   non-zero; it is reported as "stopped" when it printed `STOPPED:`, "ran" otherwise, and
   "timeout" past --timeout-s (too slow to sweep; not a failure).

Runs happen in one worker process per app (`app.run()` on a freshly imported module with the
flags in sys.argv: mode "script", as `python apps/x.py` gives), since a fresh Python process
per run would cost ~10 s of imports on two cores. Every failure is then confirmed with a real
`python apps/NAME.py FLAGS` subprocess; only confirmed failures count. Exit status: 1 when a
confirmed failure was found, else 0.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback

REPO = pathlib.Path(__file__).resolve().parents[2]
APPS_DIR = REPO / "apps"
SMALL_DIVISORS = range(2, 9)
MAX_CONFIRM = 2  # subprocess confirmations per app (each costs a full `python apps/x.py`)


# ---------------------------------------------------------------- app source (no execution)


def control_names(tree: ast.Module) -> dict[str, str]:
    """Variable -> flag name, from `var = FLAGS.control("flag", ARGS, ...)` anywhere."""
    names = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("FLAGS.control")
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            names[node.targets[0].id] = node.value.args[0].value
    return names


def is_guard(source: str) -> bool:
    return "mo.stop(" in source and "STOPPED" in source


def _flags_in(
    node: ast.AST, controls: dict[str, str], flags: set[str], local: dict[str, set[str]]
) -> set[str]:
    """Flag names an expression reads: `control.value`, `ARGS.flag`, or a local set from them."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            if sub.value.id == "ARGS" and sub.attr in flags:
                found.add(sub.attr)
            elif sub.value.id in controls:
                found.add(controls[sub.value.id])
        elif isinstance(sub, ast.Name):
            if sub.id in controls:
                found.add(controls[sub.id])
            found |= local.get(sub.id, set())
    return found & flags


def guard_relations(tree: ast.Module, flags: set[str]) -> list[tuple[str, str, str]]:
    """(kind, a, b) for flags meeting in a guard: "mod" (a % b), "pair" (a compare/call b)."""
    from tpu_scripts import export  # after main() put the repository on sys.path

    controls = control_names(tree)
    relations = []
    for cell in export.app_cells(tree):
        if not is_guard(ast.unparse(cell)):
            continue
        local: dict[str, set[str]] = {}
        for node in ast.walk(cell):  # locals assigned from flags (`_total = p.value * d.value`)
            if isinstance(node, ast.Assign):
                read = _flags_in(node.value, controls, flags, local)
                for target in node.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            local.setdefault(name.id, set()).update(read)
        for node in ast.walk(cell):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                for a in _flags_in(node.left, controls, flags, local):
                    for b in _flags_in(node.right, controls, flags, local):
                        relations.append(("mod", a, b))
            if isinstance(node, (ast.Compare, ast.Call, ast.BoolOp, ast.BinOp)):
                read = sorted(_flags_in(node, controls, flags, local))
                relations += [("pair", a, b) for a, b in itertools.combinations(read, 2)]
    return list(dict.fromkeys(relations))


# ---------------------------------------------------------------- combinations


def _is_seed(name: str) -> bool:
    return "seed" in name


def single_values(flag) -> tuple[list, list]:
    """(cheap values, high values) for one flag, each different from its default."""
    d = flag.default
    if isinstance(d, bool):
        return [not d], []
    if flag.choices is not None:
        return [c for c in flag.choices if c != d][:6], []
    if isinstance(d, str):
        return [""], []
    lo, hi = flag.lo, flag.hi
    if isinstance(d, int):
        cheap = [lo, d - 1, d + 1]
    else:
        cheap = [lo]
    cheap = [v for v in cheap if lo <= v <= hi and v != d]
    high = [hi] if hi != d and hi not in cheap else []
    return list(dict.fromkeys(cheap)), high


def _extremes(flag) -> tuple:
    if flag.choices is not None:
        return flag.choices[0], flag.choices[-1]
    return flag.lo, flag.hi


def combinations(flags: dict, relations, selection: str = "all") -> list[dict]:
    """Flag overrides to run, most informative first (see the module docstring).

    ``selection`` "guards": only the pairs that meet in a guard (a quick second pass)."""
    combos: list[dict] = []

    def add(override: dict):
        if (
            override
            and all(flags[k].default != v for k, v in override.items())
            and override not in combos
        ):
            combos.append(override)

    numeric = {
        n
        for n, f in flags.items()
        if not isinstance(f.default, (bool, str)) or f.choices is not None
    }
    for kind, a, b in relations:
        if a not in numeric or b not in numeric or _is_seed(a) or _is_seed(b):
            continue
        fa, fb = flags[a], flags[b]
        if kind == "mod":
            divisors = (
                fb.choices
                if fb.choices is not None
                else [v for v in SMALL_DIVISORS if fb.lo <= v <= fb.hi]
            )
            for v in divisors:
                if isinstance(fa.default, int) and isinstance(v, int) and v and fa.default % v:
                    add({b: v})
                elif fa.choices is not None:  # the dividend is a dropdown: an odd choice
                    odd = [
                        c
                        for c in fa.choices
                        if isinstance(c, int) and isinstance(v, int) and v and c % v
                    ]
                    if odd:
                        add({a: odd[0], b: v})
                elif isinstance(fa.default, int) and fa.lo <= fa.default + 1 <= fa.hi:
                    add({a: fa.default + 1, b: v})
        else:
            (alo, ahi), (blo, bhi) = _extremes(fa), _extremes(fb)
            add({a: alo, b: bhi})
            add({a: ahi, b: blo})
    if selection == "guards":
        return combos
    high = []
    for name, flag in flags.items():
        if _is_seed(name):
            continue
        cheap, expensive = single_values(flag)
        for v in cheap:
            add({name: v})
        high += [{name: v} for v in expensive]
    for override in high:
        add(override)
    return combos


def argv_of(flags: dict, override: dict) -> list[str]:
    argv = []
    for name, value in override.items():
        flag = flags[name]
        if isinstance(flag.default, bool):
            argv.append(flag.option if value else "--no-" + flag.option[2:])
        else:
            argv += [flag.option, str(value)]
    return argv


# ---------------------------------------------------------------- worker (one app, in-process)


def _load(path: pathlib.Path, argv: list[str]):
    sys.argv = [str(path), *argv]
    spec = importlib.util.spec_from_file_location(f"sweep_{path.stem}_{time.monotonic_ns()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def static_suspects(module) -> list[dict]:
    """Cells that read what a guard reads but do not depend on it (see the docstring)."""
    from marimo._ast.app import InternalApp

    graph = InternalApp(module.app).graph
    cells = graph.cells
    setup = {
        cid
        for cid, c in cells.items()
        if c.code.lstrip().startswith("with app.setup") or cid == "setup"
    }
    defined_by_cells = set().union(*(cells[c].defs for c in cells if c not in setup))
    suspects = []
    for gid, guard in cells.items():
        if not is_guard(guard.code):
            continue
        inputs = guard.refs & defined_by_cells
        downstream, upstream = graph.descendants(gid), graph.ancestors(gid)
        for cid, cell in cells.items():
            if cid in setup or cid == gid or cid in downstream or cid in upstream:
                continue
            shared = cell.refs & inputs
            if shared:
                name = getattr(cell, "name", None) or cell.code.strip().splitlines()[0][:60]
                suspects.append(
                    {
                        "guard": guard.code.strip().splitlines()[0][:60]
                        if not getattr(guard, "name", None)
                        else guard.name,
                        "cell": name,
                        "reads": sorted(shared),
                    }
                )
    return suspects


def worker(path: pathlib.Path, start: int, results: pathlib.Path, static: bool):
    """Run combos [start:] of one app, appending one JSON line per run to ``results``."""
    base = _load(path, [])
    flags = base.FLAGS.flags
    tree = ast.parse(path.read_text(encoding="utf-8"))
    relations = guard_relations(tree, set(flags))
    selection = os.environ.get("SWEEP_SELECTION", "all")
    combos = ([{}] if selection == "all" else []) + combinations(flags, relations, selection)
    with results.open("a") as out:
        if start == 0:
            header = {
                "kind": "plan",
                "combos": [argv_of(flags, c) for c in combos],
                "relations": relations,
            }
            if static:
                header["static"] = static_suspects(base)
            out.write(json.dumps(header) + "\n")
            out.flush()
        for index in range(start, len(combos)):
            argv = argv_of(flags, combos[index])
            buffer = io.StringIO()
            began = time.perf_counter()
            error = None
            try:
                with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                    _load(path, argv).app.run()
            except SystemExit as exc:
                if exc.code not in (0, None):
                    error = f"SystemExit({exc.code})"
            except BaseException:  # noqa: BLE001 - the point is to catch what the app raises
                error = traceback.format_exc(limit=-3)
            text = buffer.getvalue()
            out.write(
                json.dumps(
                    {
                        "kind": "run",
                        "index": index,
                        "argv": argv,
                        "seconds": round(time.perf_counter() - began, 1),
                        "error": error,
                        "traceback_printed": "Traceback" in text,
                        "stopped": [
                            line for line in text.splitlines() if line.startswith("STOPPED:")
                        ][:3],
                        "check": [
                            line[:120]
                            for line in text.splitlines()
                            if line.startswith(("PASS:", "FAIL:"))
                        ][:4],
                        "tail": text[-1500:] if error or "Traceback" in text else "",
                    }
                )
                + "\n"
            )
            out.flush()


# ---------------------------------------------------------------- parent


def sweep_app(
    path: pathlib.Path,
    budget_s: float,
    timeout_s: float,
    static: bool,
    static_only: bool,
    selection: str = "all",
) -> dict:
    env = {
        **os.environ,
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "JAX_NUM_CPU_DEVICES": "8",
    }
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}
    env["SWEEP_SELECTION"] = selection
    report = {
        "app": path.stem,
        "plan": None,
        "runs": [],
        "timeouts": [],
        "crashes": [],
        "skipped": [],
    }
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sweep_refusals_") as tmp:
        results = pathlib.Path(tmp) / "results.jsonl"
        start, seen = 0, 0
        while True:
            mode = ["--static-only"] if static_only else (["--static"] if static else [])
            stderr_path = pathlib.Path(tmp) / f"stderr-{start}.txt"
            with stderr_path.open("w") as stderr_file:  # a file: a full pipe would block the worker
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        str(path),
                        "--start",
                        str(start),
                        "--results",
                        str(results),
                        *mode,
                    ],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr_file,
                )
            last, killed = time.monotonic(), False
            while proc.poll() is None:
                time.sleep(0.5)
                lines = results.read_text().splitlines() if results.exists() else []
                if len(lines) > seen:
                    seen, last = len(lines), time.monotonic()
                over_budget = time.monotonic() - began > budget_s
                if time.monotonic() - last > timeout_s or over_budget:
                    proc.kill()
                    proc.wait()
                    killed = True
                    break
            lines = results.read_text().splitlines() if results.exists() else []
            records = [json.loads(line) for line in lines]
            plan = next((r for r in records if r["kind"] == "plan"), None)
            runs = [r for r in records if r["kind"] == "run"]
            if plan is None:
                report["worker_error"] = stderr_path.read_text()[-3000:]
                return report
            report["plan"] = plan
            done = (
                {r["index"] for r in runs}
                | set(report["timeouts"])
                | {c["index"] for c in report["crashes"]}
            )
            remaining = [i for i in range(len(plan["combos"])) if i not in done]
            if static_only or not remaining:
                break
            if time.monotonic() - began > budget_s:
                report["skipped"] = [plan["combos"][i] for i in remaining]
                break
            # The worker hung (killed above) or died on combo remaining[0]: note it, go on after it.
            if killed:
                report["timeouts"].append(remaining[0])
            else:
                report["crashes"].append(
                    {
                        "index": remaining[0],
                        "returncode": proc.returncode,
                        "tail": stderr_path.read_text()[-1500:],
                    }
                )
            start = remaining[0] + 1
            if start >= len(plan["combos"]):
                break
        report["runs"] = runs
    return report


def confirm(path: pathlib.Path, argv: list[str], timeout_s: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(JAX_PLATFORMS=env.get("JAX_PLATFORMS", "cpu"), JAX_NUM_CPU_DEVICES="8")
    try:
        result = subprocess.run(
            [sys.executable, str(path), *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"confirmed": False, "returncode": None, "tail": "timeout"}
    output = result.stdout + result.stderr
    bad = result.returncode != 0 or "Traceback" in output
    return {"confirmed": bad, "returncode": result.returncode, "tail": output[-1500:]}


def error_line(run: dict) -> str:
    """The exception's own line (`ValueError: ...`) from a run's traceback."""
    lines = (run["error"] or run["tail"] or "").strip().splitlines()
    for line in reversed(lines):
        head = line.split(":", 1)[0].strip()
        if (
            ":" in line
            and head
            and head.replace(".", "").replace("_", "").isalnum()
            and head[0].isupper()
        ):
            if head.endswith(("Error", "Exception", "Exit", "Interrupt")) or "Error" in head:
                return line.strip()[:200]
    return (lines[-1] if lines else "").strip()[:200]


def classify(run: dict) -> str:
    if run["error"] or run["traceback_printed"]:
        return "FAIL"
    if any(line.startswith("FAIL:") for line in run["check"]):
        return "check-FAIL"  # not a refusal bug, but a check that fails on legal values
    return "stopped" if run["stopped"] else "ran"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "apps", nargs="*", help="app stems or .py paths (default: every app in apps/)"
    )
    parser.add_argument("--budget-s", type=float, default=300, help="seconds of runs per app")
    parser.add_argument("--timeout-s", type=float, default=120, help="seconds for one run")
    parser.add_argument("--json", type=pathlib.Path, help="write the full results here")
    parser.add_argument(
        "--static-only", action="store_true", help="only list cells not under their guard"
    )
    parser.add_argument(
        "--selection",
        choices=("all", "no-baseline", "guards"),
        default="all",
        help="all: defaults + guard pairs + each flag alone; no-baseline: without the "
        "default run; guards: only the pairs that meet in a guard",
    )
    parser.add_argument(
        "--no-confirm", action="store_true", help="skip the subprocess confirmation"
    )
    parser.add_argument("--worker", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--static", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if args.static_only:
            base = _load(args.worker, [])
            with args.results.open("a") as out:
                out.write(
                    json.dumps(
                        {
                            "kind": "plan",
                            "combos": [],
                            "relations": [],
                            "static": static_suspects(base),
                        }
                    )
                    + "\n"
                )
            return 0
        worker(args.worker, args.start, args.results, args.static)
        return 0
    sys.path.insert(0, str(REPO))
    paths = [
        pathlib.Path(a).resolve() if a.endswith(".py") else APPS_DIR / f"{a}.py" for a in args.apps
    ] or sorted(APPS_DIR.glob("*.py"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such app: {', '.join(missing)}")
    reports, failures = [], 0
    for path in paths:
        report = sweep_app(
            path, args.budget_s, args.timeout_s, True, args.static_only, args.selection
        )
        plan = report["plan"] or {}
        for suspect in plan.get("static", []):
            print(
                f"{path.stem}: static: cell {suspect['cell']!r} reads {suspect['reads']} "
                f"but does not depend on guard {suspect['guard']!r}"
            )
        if "worker_error" in report:
            print(f"{path.stem}: WORKER ERROR\n{report['worker_error']}")
        counts: dict[str, int] = {}
        confirmed_here = 0
        for run in report["runs"]:
            kind = classify(run)
            if kind == "FAIL":
                if args.no_confirm or confirmed_here >= MAX_CONFIRM:
                    run["confirm"] = None
                    kind = "FAIL (unconfirmed)"
                else:
                    run["confirm"] = confirm(path, run["argv"], args.timeout_s)
                    confirmed_here += 1
                    if not run["confirm"]["confirmed"]:
                        kind = "fail (in-process only)"
                failures += kind != "fail (in-process only)"
                print(f"{path.stem}: {kind} {' '.join(run['argv'])} -> {error_line(run)}")
            counts[kind] = counts.get(kind, 0) + 1
        for index in report["timeouts"]:
            print(f"{path.stem}: timeout {' '.join(plan['combos'][index])}")
        for crash in report["crashes"]:
            argv = plan["combos"][crash["index"]]
            crash["confirm"] = None if args.no_confirm else confirm(path, argv, args.timeout_s)
            if crash["confirm"] is None or crash["confirm"]["confirmed"]:
                failures += 1
            print(
                f"{path.stem}: worker died (exit {crash['returncode']}) on {' '.join(argv)}; "
                f"confirmed: {crash['confirm'] and crash['confirm']['confirmed']}"
            )
        for run in report["runs"]:
            if classify(run) == "check-FAIL":
                print(f"{path.stem}: check-FAIL {' '.join(run['argv'])} -> {run['check']}")
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(
            f"{path.stem}: {len(report['runs'])} runs ({summary}); "
            f"{len(report['timeouts'])} timeouts; "
            f"{len(report['skipped'])} skipped (budget)",
            flush=True,
        )
        reports.append(report)
        if args.json:
            args.json.write_text(json.dumps(reports, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
