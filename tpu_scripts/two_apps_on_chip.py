"""Two lesson apps on one TPU chip: what the second app of `make lab` does while the first holds
the chip, checked with real processes on a TPU VM (no sockets needed: no marimo server).

    python -m tpu_scripts.two_apps_on_chip --app STAGED_SCRIPT --out DIR [--record NAME]

`make lab` serves each app in its own kernel process. The first app that computes holds the
chip (libtpu's lock, for the life of its process), so a second app opened meanwhile cannot start
JAX's TPU backend. ``core.runtime.use_cpu_devices`` (called by every app before its first
computation) sees the lock, runs the app on the CPU and prints who holds the chip;
``core.lab.phase_line`` puts the same notice under the app's title. This command shows it:

    1. a holder process opens the TPU (``jax.devices()``) and waits;
    2. the exported app (``python -m tpu_scripts export``) runs while the chip is held: it must
       pass on the CPU, its receipt must say "cpu", and its stderr must carry the notice
       naming the holder's pid, with no traceback;
    3. the holder exits; the same app runs again: it must pass on the TPU, with no notice.

It writes DIR/two_apps.json (both runs: exit status, receipt backend, status, the notice line)
and, with --record NAME, a benchmark record written by one more process on the (free) chip.
This process never imports JAX (it would take the chip itself). Exit status 0 when both runs
behaved, 1 when one did not, 3 on a host without a TPU (nothing to show there).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

from core import runtime

NOTICE_MARK = "The TPU is held by process"  # runtime.ChipBusy.notice's opening words
HOLDER_SOURCE = (
    "import os, sys, jax\n"
    "devices = jax.devices()\n"
    "print('HOLDING', os.getpid(), devices[0].platform, devices[0].device_kind, flush=True)\n"
    "sys.stdin.read()  # hold the chip until the parent closes our stdin\n"
)
HOLDER_START_S = 120  # libtpu's start and jax's import on the chip's host
APP_TIMEOUT_S = 240
EXIT_BEHAVED, EXIT_MISBEHAVED, EXIT_NO_TPU = 0, 1, 3


def judge(run: dict, held_by: int | None) -> list[str]:
    """What is wrong with one app run (empty: it behaved). ``held_by``: the holder's pid while
    the chip was held, None after it was released. ``run``: returncode, stderr, results (the
    app's results.json or None)."""
    problems = []
    results = run.get("results") or {}
    backend = (results.get("receipt") or {}).get("backend")
    if run["returncode"] != 0:
        problems.append(f"the app exited {run['returncode']}")
    if results.get("status") != "passed":
        problems.append(f"the app's status is {results.get('status')!r}, not 'passed'")
    if "Traceback (most recent call last)" in run["stderr"]:
        problems.append("the app printed a traceback")
    notice = notice_line(run["stderr"])
    if held_by is not None:
        if backend != "cpu":
            problems.append(f"held chip: the app ran on {backend!r}, not the CPU")
        if notice is None:
            problems.append("held chip: no notice saying who holds the TPU")
        elif f"process {held_by}" not in notice:
            problems.append(f"held chip: the notice does not name the holder {held_by}: {notice}")
    else:
        if backend != "tpu":
            problems.append(f"free chip: the app ran on {backend!r}, not the TPU")
        if notice is not None:
            problems.append(f"free chip: the app still says the TPU is held: {notice}")
    return problems


def notice_line(stderr: str) -> str | None:
    """The device notice in an app's stderr, or None."""
    return next((line.strip() for line in stderr.splitlines() if NOTICE_MARK in line), None)


def run_app(script: pathlib.Path, out: pathlib.Path) -> dict:
    """Run the exported app into ``out``; its exit status, stderr tail and results."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(script), "--out", str(out)],
            env=runtime.child_env(),
            capture_output=True,
            text=True,
            timeout=APP_TIMEOUT_S,
        )
        returncode, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, stderr = -1, f"timed out after {APP_TIMEOUT_S} s\n{exc.stderr or ''}"
    results_file = out / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else None
    return {
        "returncode": returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stderr": stderr if isinstance(stderr, str) else stderr.decode(errors="replace"),
        "results": results,
    }


def summary(run: dict) -> dict:
    """What two_apps.json keeps of one run (not the whole results document)."""
    results = run.get("results") or {}
    return {
        "returncode": run["returncode"],
        "seconds": run["seconds"],
        "status": results.get("status"),
        "backend": (results.get("receipt") or {}).get("backend"),
        "checks": [c.get("line") or c.get("name") for c in results.get("checks", [])][:5],
        "notice": notice_line(run["stderr"]),
        "stderr_tail": run["stderr"][-1500:],
    }


def start_holder() -> tuple[subprocess.Popen, int, str]:
    """A process that opens the TPU and keeps it until its stdin closes: (process, pid, the
    device kind it reported)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SOURCE],
        env=runtime.child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + HOLDER_START_S
    while time.monotonic() < deadline:
        line = holder.stdout.readline()
        if line.startswith("HOLDING"):
            _, pid, platform, kind = line.split(maxsplit=3)
            if platform != "tpu":
                holder.kill()
                raise RuntimeError(f"the holder opened {platform!r}, not the TPU")
            return holder, int(pid), kind.strip()
        if not line and holder.poll() is not None:
            break
    holder.kill()
    raise RuntimeError("the holder process did not open the TPU in time")


def write_record(name: str, out: pathlib.Path, document: dict) -> str:
    """The record, written by a fresh process on the free chip (this one never imports JAX)."""
    figures = {
        "held_chip_app_passed_on_cpu": float(not document["held"]["problems"]),
        "free_chip_app_passed_on_tpu": float(not document["released"]["problems"]),
        "held_chip_app_seconds": document["held"]["seconds"],
        "free_chip_app_seconds": document["released"]["seconds"],
    }
    notes = (
        f"app {document['app']}; held by pid {document['holder_pid']}; notice: "
        f"{document['held']['notice']}"
    )
    source = (
        "import json, sys\nfrom core.perf import records\n"
        "args = json.loads(sys.argv[1])\n"
        "print(records.write_record(args['name'], args['command'], args['figures'],"
        " args['notes'], root=args['root']))\n"
    )
    payload = {
        "name": name,
        "command": document["command"],
        "figures": figures,
        "notes": notes,
        "root": str(out / "records"),
    }
    done = subprocess.run(
        [sys.executable, "-c", source, json.dumps(payload)],
        env=runtime.child_env(),
        capture_output=True,
        text=True,
        timeout=HOLDER_START_S,
    )
    if done.returncode != 0:
        return f"not written: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_scripts.two_apps_on_chip")
    parser.add_argument("--app", required=True, help="an exported lesson script (export)")
    parser.add_argument("--out", required=True, help="result directory")
    parser.add_argument("--record", default="", help="also write benchmark record NAME")
    args = parser.parse_args(argv)
    script, out = pathlib.Path(args.app), pathlib.Path(args.out)
    if not script.is_file():
        print(f"error: no exported app at {script} (python -m tpu_scripts export)", file=sys.stderr)
        return 2
    if not runtime.host_has_tpu():
        print("REFUSED: this host has no TPU chip; nothing to hold", file=sys.stderr)
        return EXIT_NO_TPU
    if (busy := runtime.busy_tpu()) is not None:
        print(f"error: the chip is already held: {busy.notice()}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    holder, pid, kind = start_holder()
    print(f"holder: pid {pid} holds the TPU ({kind})", flush=True)
    try:
        held = run_app(script, out / "held")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    held = {**summary(held), "problems": judge(held, pid)}
    print(f"held chip: exit {held['returncode']}, {held['backend']}", flush=True)
    released = run_app(script, out / "released")
    released = {**summary(released), "problems": judge(released, None)}
    print(f"free chip: exit {released['returncode']}, {released['backend']}", flush=True)
    words = sys.argv[1:] if argv is None else argv
    document = {
        "command": "python -m tpu_scripts.two_apps_on_chip " + " ".join(words),
        "app": script.stem,
        "device_kind": kind,
        "holder_pid": pid,
        "held": held,
        "released": released,
    }
    behaved = not document["held"]["problems"] and not document["released"]["problems"]
    document["behaved"] = behaved
    if args.record:
        document["record"] = write_record(args.record, out, document)
    (out / "two_apps.json").write_text(json.dumps(document, indent=1) + "\n")
    for phase in ("held", "released"):
        for problem in document[phase]["problems"]:
            print(f"PROBLEM ({phase}): {problem}")
    print(("BEHAVED" if behaved else "MISBEHAVED") + f": {out / 'two_apps.json'}")
    return EXIT_BEHAVED if behaved else EXIT_MISBEHAVED


if __name__ == "__main__":
    sys.exit(main())
