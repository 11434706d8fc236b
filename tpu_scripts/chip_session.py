"""A plan of commands for a TPU host held for a limited time, run within one command's time
budget, continued by the next command.

A host held for a limited time (a TPU VM from a queue or a spot reservation, a shared machine
that cuts each command off after some minutes) may stop a command before a long plan is done,
and may be handed back between commands, so the next one can find a bare machine. This runs a
plan's steps in order until the budget would not hold the next one, and writes what it did to
OUT: bring ``OUT/state.json`` back as ``--state`` and the next command goes on from the first
step not done.

    python3 -m tpu_scripts.chip_session PLAN.json --state STATE.json --out OUT [--budget-s 570]
        [--redo NAME,...]

PLAN.json (checked before anything runs):

    {"setup": ["python3", "-m", "tpu_scripts", "wheelhouse", "install", ...],  (optional)
     "env": {"PYTHONPATH": "$PYTHONPATH:{root}:/tmp/site"},                     (optional)
     "steps": [{"name": "flash", "argv": ["python3", "tpu_scripts/flash_vs_jax.py", ...],
                "timeout_s": 420, "outputs": ["/tmp/flash/*.json"]}, ...]}

- ``setup`` runs once per machine (a marker under the system's temporary folder says it
  did): a fresh machine installs again, a warm one does not. Its seconds count in the budget.
  ``setup_inputs`` (optional globs under the root) join the marker: each matched file's path
  and size. A command that brings a new wheelhouse part (one part per transfer, under the host's
  transfer limit) runs setup again, which installs only that part.
- ``env`` is added to every command's environment; ``{root}`` is the checkout's root and
  ``$NAME`` the host's own value of NAME (os.path.expandvars).
- A step starts only when its ``timeout_s`` fits in what is left of ``--budget-s``; one that
  does not waits for the next command. A step that ran is done whatever its exit status (the
  status and the output's tail are kept); ``--redo`` runs named steps again. A step past its
  timeout is killed with its process group and kept as timed out.
- OUT: ``state.json`` (rewritten after every step), ``log.txt`` (each command's output, its
  tail past 200 kB), ``outputs.tar.gz`` (every file each step's ``outputs`` globs matched,
  as ``<step>/<its absolute path>``; at most 16 MiB, files past that are named in the state,
  not packed).

Exit status: 0 every step done, 10 steps remain (run again with OUT/state.json), 2 a plan or
state that does not validate (nothing runs). Standard library only: it runs before anything
of the course is installed.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXIT_REMAINING = 10
LOG_TAIL_BYTES = 200_000
STATE_TAIL_CHARS = 2_000
ARCHIVE_LIMIT_BYTES = 16 * 2**20


class PlanError(ValueError):
    """A plan or state that does not validate."""


def load_plan(path: pathlib.Path) -> dict:
    """The plan, checked: steps with unique names, argv lists of strings, positive timeouts."""
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanError(f"{path}: {exc}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list) or not plan["steps"]:
        raise PlanError(f"{path}: a plan is an object with a non-empty list 'steps'")
    unknown = sorted(set(plan) - {"setup", "setup_inputs", "env", "steps"})
    if unknown:
        raise PlanError(f"{path}: unknown keys {unknown}; known: setup, setup_inputs, env, steps")
    if "setup" in plan and not _is_argv(plan["setup"]):
        raise PlanError(f"{path}: 'setup' must be a non-empty list of strings")
    if "setup_inputs" in plan and ("setup" not in plan or not _is_argv(plan["setup_inputs"])):
        raise PlanError(f"{path}: 'setup_inputs' is a non-empty list of globs beside a 'setup'")
    env = plan.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise PlanError(f"{path}: 'env' must map names to strings")
    names = set()
    for number, step in enumerate(plan["steps"], 1):
        where = f"{path}: step {number}"
        if not isinstance(step, dict) or not isinstance(step.get("name"), str) or not step["name"]:
            raise PlanError(f"{where}: each step needs a 'name'")
        if step["name"] in names:
            raise PlanError(f"{where}: the name {step['name']!r} is used twice")
        names.add(step["name"])
        if not _is_argv(step.get("argv")):
            raise PlanError(f"{where} ({step['name']}): 'argv' must be a non-empty list of strings")
        timeout = step.get("timeout_s")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise PlanError(f"{where} ({step['name']}): 'timeout_s' must be a positive number")
        outputs = step.get("outputs", [])
        if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
            raise PlanError(f"{where} ({step['name']}): 'outputs' must be a list of globs")
    return plan


def _is_argv(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(a, str) for a in value)


def load_state(path: pathlib.Path | None) -> dict:
    """{"done": {name: {...}}, "calls": [...]}: the state a previous call wrote, or a new one."""
    if path is None or not path.exists():
        return {"done": {}, "calls": []}
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanError(f"{path}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("done"), dict):
        raise PlanError(f"{path}: not a chip_session state (no 'done')")
    state.setdefault("calls", [])
    return state


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _environment(plan: dict) -> dict:
    env = dict(os.environ)
    for name, value in plan.get("env", {}).items():
        env[name] = os.path.expandvars(value.replace("{root}", str(ROOT)))
    return env


def run_command(argv: list[str], env: dict, timeout_s: float, log) -> tuple[int | None, str]:
    """(exit status or None when killed at its timeout, its output's tail); the output also
    goes to ``log``. The command runs in its own process group, killed whole on timeout."""
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            text = f"could not start {argv[0]!r}: {exc}\n"
            log.write(text)
            return 127, text
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        size = output.seek(0, os.SEEK_END)
        output.seek(max(0, size - LOG_TAIL_BYTES))
        text = output.read().decode("utf-8", errors="replace")
    if code is None:
        text += f"\n[killed: past its timeout of {timeout_s:g} s]\n"
    log.write(text)
    return code, text


def setup_marker(plan: dict) -> pathlib.Path:
    """The marker that says this machine ran this plan's setup on these inputs: the sha256 of
    its argv and of each file its ``setup_inputs`` globs match (path under the root, size)."""
    inputs = sorted(
        (str(pathlib.Path(name).relative_to(ROOT)), os.path.getsize(name))
        for pattern in plan.get("setup_inputs", [])
        for name in glob.glob(str(ROOT / pattern))
        if os.path.isfile(name)
    )
    key = json.dumps([plan["setup"], inputs])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return pathlib.Path(tempfile.gettempdir()) / f"chip_session-setup-{digest}.done"


def archive_outputs(plan: dict, ran: list[str], out: pathlib.Path, state: dict) -> None:
    """outputs.tar.gz: each step of this call's files matched by its globs, as <step>/<path>;
    files past the archive's limit are named in the state instead."""
    left_out, total = [], 0
    path = out / "outputs.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for step in plan["steps"]:
            if step["name"] not in ran:
                continue
            for pattern in step.get("outputs", []):
                for found in sorted(glob.glob(pattern.replace("{root}", str(ROOT)))):
                    file = pathlib.Path(found)
                    if not file.is_file():
                        continue
                    size = file.stat().st_size
                    if total + size > ARCHIVE_LIMIT_BYTES:
                        left_out.append(f"{step['name']}: {found} ({size} bytes)")
                        continue
                    total += size
                    # the whole path under the step: two results.json never collide
                    archive.add(file, arcname=f"{step['name']}/{found.lstrip('/')}")
    state["calls"][-1]["archived_bytes"] = total
    state["calls"][-1]["left_out"] = left_out


def run(plan: dict, state: dict, out: pathlib.Path, budget_s: float, redo=(), clock=None) -> int:
    """Run the plan's steps not done (and ``redo``) while their timeouts fit the budget;
    write OUT. Returns 0 when every step is done, EXIT_REMAINING otherwise."""
    clock = clock or time.monotonic
    start = clock()
    out.mkdir(parents=True, exist_ok=True)
    for name in redo:
        state["done"].pop(name, None)
    call = {"started_utc": _now(), "budget_s": budget_s, "ran": [], "deferred": []}
    state["calls"].append(call)
    env = _environment(plan)

    def save() -> None:
        call["seconds"] = round(clock() - start, 1)
        temporary = out / "state.json.tmp"
        temporary.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(temporary, out / "state.json")

    with open(out / "log.txt", "a", encoding="utf-8") as log:
        if "setup" in plan:
            marker = setup_marker(plan)
            if marker.exists():
                call["setup"] = "already done on this machine"
            else:
                log.write(f"=== setup: {' '.join(plan['setup'])}\n")
                code, tail = run_command(plan["setup"], env, budget_s, log)
                call["setup"] = f"exit {code}"
                if code != 0:
                    call["setup_tail"] = tail[-STATE_TAIL_CHARS:]
                    save()
                    print(f"setup failed (exit {code}); nothing else ran", flush=True)
                    return EXIT_REMAINING
                marker.touch()
        for step in plan["steps"]:
            name = step["name"]
            if name in state["done"]:
                continue
            left = budget_s - (clock() - start)
            if step["timeout_s"] > left:
                call["deferred"].append(name)
                continue
            log.write(f"=== {name}: {' '.join(step['argv'])}\n")
            log.flush()
            began = clock()
            code, tail = run_command(step["argv"], env, step["timeout_s"], log)
            seconds = round(clock() - began, 1)
            state["done"][name] = {
                "exit": code,
                "timed_out": code is None,
                "seconds": seconds,
                "finished_utc": _now(),
                "tail": tail[-STATE_TAIL_CHARS:],
            }
            call["ran"].append(name)
            print(f"[{clock() - start:5.0f} s] {name}: exit {code} ({seconds} s)", flush=True)
            save()
    archive_outputs(plan, call["ran"], out, state)
    save()
    remaining = [s["name"] for s in plan["steps"] if s["name"] not in state["done"]]
    if remaining:
        print(f"not yet run: {', '.join(remaining)} (run again with {out}/state.json)")
        return EXIT_REMAINING
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tpu_scripts.chip_session",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", type=pathlib.Path)
    parser.add_argument("--state", type=pathlib.Path, help="a previous call's OUT/state.json")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--budget-s", type=float, default=570.0)
    parser.add_argument("--redo", default="", help="comma-separated steps to run again")
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        state = load_state(args.state)
        if not args.budget_s > 0:
            raise PlanError(f"--budget-s must be > 0, got {args.budget_s}")
        redo = [name for name in args.redo.split(",") if name]
        unknown = sorted(set(redo) - {step["name"] for step in plan["steps"]})
        if unknown:
            raise PlanError(f"--redo names steps the plan does not have: {unknown}")
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(plan, state, args.out, args.budget_s, redo)


if __name__ == "__main__":
    sys.exit(main())
