"""Test support: a fake ``gcloud compute tpus tpu-vm`` whose workers are local JAX processes.

Not used by the tools themselves. ``install(bin_dir, root)`` writes an executable ``gcloud``
into ``bin_dir`` (put it first on PATH); it runs this module with the project's Python. Every
call appends its argv as one JSON line to ``$FAKE_TPU_ROOT/gcloud.jsonl``. The slice has
``$FAKE_TPU_WORKERS`` workers (default 2), worker ``i`` a home folder
``$FAKE_TPU_ROOT/worker-<i>/``:

- ``scp LOCAL... VM:DIR/ --worker=all`` copies into every worker's ``~/DIR``;
  ``scp VM:PATH LOCAL --worker=N --recurse`` copies worker N's ``~/PATH`` back (exit 1 if
  it is not there, as gcloud does);
- ``ssh VM --worker=all --command=CMD`` runs CMD with bash in every worker's home at once,
  as ``rehearse.py`` runs its processes: the rehearsal's variables (process id, count, a
  coordinator on a free local port, ``$FAKE_TPU_DEVICES`` CPU devices, default 4), so the
  workers are JAX processes of one job. ``~/jax-tpu-lab/.venv`` is the project's venv (a
  link); a command that installs with pip is logged and skipped (the venv has the project),
  except an offline one from a staged wheelhouse (``wheelhouse install``), which runs.
  Each worker's output is printed under a ``--- worker <i>`` line; the exit code is the first
  failing worker's. If one worker fails, the others get ``GRACE_S`` to finish, then are
  killed (they would wait in a collective for the dead one);
- ``describe VM --format=json`` prints the VM (acceleratorType ``$FAKE_TPU_TYPE``, default
  v5litepod-16; runtimeVersion ``$FAKE_TPU_RUNTIME``) until ``delete`` marks it deleted,
  then fails with NOT_FOUND.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

GRACE_S = 10.0
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def install(bin_dir: str | os.PathLike, python: str = sys.executable) -> pathlib.Path:
    """Write ``bin_dir/gcloud`` (executable) that runs this fake with ``python``."""
    bin_dir = pathlib.Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f'#!/bin/sh\nexec "{python}" "{pathlib.Path(__file__).resolve()}" "$@"\n')
    gcloud.chmod(0o755)
    return gcloud


def calls(root: str | os.PathLike) -> list[list[str]]:
    """Every argv the fake received, in order (after ``gcloud``)."""
    log = pathlib.Path(root) / "gcloud.jsonl"
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _split(argv: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    positionals, flags = [], {}
    for word in argv:
        if word.startswith("--"):
            key, has_value, value = word[2:].partition("=")
            flags[key] = value if has_value else True
        else:
            positionals.append(word)
    return positionals, flags


def _workers(flag, count: int) -> list[int]:
    if flag in (None, True, "all"):
        return list(range(count))
    indices = []
    for part in str(flag).split(","):
        first, _, last = part.partition("-")
        indices += list(range(int(first), int(last or first) + 1))
    return indices


def _home(root: pathlib.Path, worker: int) -> pathlib.Path:
    home = root / f"worker-{worker}"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _copy(source: pathlib.Path, target: pathlib.Path) -> None:
    if source.is_dir():
        destination = target / source.name if target.is_dir() else target
        shutil.copytree(source, destination, dirs_exist_ok=True)
    else:
        if target.is_dir():
            target = target / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def scp(root: pathlib.Path, positionals: list[str], flags: dict, count: int) -> int:
    *sources, target = positionals
    if ":" in target:  # upload to every named worker
        remote = target.split(":", 1)[1]
        for worker in _workers(flags.get("worker"), count):
            folder = _home(root, worker) / remote
            if remote.endswith("/") and not folder.is_dir():
                print(f"ERROR: scp: {remote}: No such file or directory", file=sys.stderr)
                return 1
            for source in sources:
                _copy(pathlib.Path(source), folder)
        return 0
    (source,) = sources  # download from one worker
    remote = source.split(":", 1)[1]
    (worker,) = _workers(flags.get("worker", "0"), count)
    path = _home(root, worker) / remote
    if not path.exists():
        print(f"ERROR: scp: {remote}: No such file or directory", file=sys.stderr)
        return 1
    pathlib.Path(target).mkdir(parents=True, exist_ok=True)
    _copy(path, pathlib.Path(target))
    return 0


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ssh(root: pathlib.Path, flags: dict, count: int) -> int:
    command = str(flags.get("command", ""))
    if "pip install" in command and "wheelhouse install" not in command:
        print("fake gcloud: install step logged and skipped (the project venv is used)")
        return 0
    workers = _workers(flags.get("worker"), count)
    venv = pathlib.Path(sys.prefix)
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = []
    for worker in workers:
        home = _home(root, worker)
        lab = home / "jax-tpu-lab"
        lab.mkdir(exist_ok=True)
        if not (lab / ".venv").exists():
            (lab / ".venv").symlink_to(venv, target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update(
            HOME=str(home),
            PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
            JAX_PLATFORMS="cpu",
            JAX_NUM_CPU_DEVICES=os.environ.get("FAKE_TPU_DEVICES", "4"),
        )
        if len(workers) > 1:
            env.update(
                REHEARSE_COORDINATOR=coordinator,
                REHEARSE_NUM_PROCESSES=str(len(workers)),
                REHEARSE_PROCESS_ID=str(workers.index(worker)),
                REHEARSE_DEVICES_PER_PROCESS=env["JAX_NUM_CPU_DEVICES"],
            )
        out = open(home / ".ssh_output", "w+", encoding="utf-8")
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        procs.append((worker, proc, out))
    failed_at = None
    while any(proc.poll() is None for _, proc, _ in procs):
        if failed_at is None and any(proc.poll() not in (None, 0) for _, proc, _ in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            break
        time.sleep(0.05)
    code = 0
    for worker, proc, out in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.seek(0)
        print(f"--- worker {worker} (exit {proc.returncode})")
        print(out.read().rstrip())
        out.close()
        if proc.returncode != 0 and code == 0:
            code = proc.returncode if proc.returncode > 0 else 1
    return code


def describe(root: pathlib.Path, name: str, flags: dict) -> int:
    if (root / f"deleted-{name}").exists():
        print(f"ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: {name}", file=sys.stderr)
        return 1
    vm = {
        "name": f"projects/fake-project/locations/{flags.get('zone', '')}/nodes/{name}",
        "acceleratorType": os.environ.get("FAKE_TPU_TYPE", "v5litepod-16"),
        "runtimeVersion": os.environ.get("FAKE_TPU_RUNTIME", "v2-alpha-tpuv5-lite"),
        "state": "READY",
        "health": "HEALTHY",
    }
    print(json.dumps(vm, indent=2) if flags.get("format") == "json" else vm)
    return 0


def main(argv: list[str]) -> int:
    root = pathlib.Path(os.environ["FAKE_TPU_ROOT"])
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "gcloud.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:3] != ["compute", "tpus", "tpu-vm"] or len(argv) < 4:
        print(f"fake gcloud: unsupported command {argv}", file=sys.stderr)
        return 2
    count = int(os.environ.get("FAKE_TPU_WORKERS", "2"))
    positionals, flags = _split(argv[3:])
    verb = positionals[0]
    if verb == "scp":
        return scp(root, positionals[1:], flags, count)
    if verb == "ssh":
        return ssh(root, flags, count)
    if verb == "describe":
        return describe(root, positionals[1], flags)
    if verb == "delete":
        (root / f"deleted-{positionals[1]}").touch()
        return 0
    if verb == "create":
        (root / f"deleted-{positionals[1]}").unlink(missing_ok=True)
        return 0
    print(f"fake gcloud: unsupported verb {verb}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
