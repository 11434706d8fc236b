"""Run the apps on a host that lacks the optional frameworks and loopback sockets.

Not a test (pytest does not collect it): a tool to run by hand after adding a lesson that uses
torch, gymnasium, keras, ... or a server, to fill tests/test_host_lacks.py's REQUIRES:

    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_host_lacks.py            # candidates
    JAX_PLATFORMS=cpu .venv/bin/python tests/tools/sweep_host_lacks.py attention pod_slices

The candidates are the apps whose imports (the project's own, followed at module level and
inside functions: tpu_scripts.wheelhouse.imports) reach an optional framework or a module that
opens sockets. Each runs headless (`python apps/NAME.py`) with every optional framework and
every AF_INET socket taken away (tests/fixtures/host_lacks/sitecustomize.py). An app that
prints a traceback or exits non-zero there needs a lab.require in the cell that uses what is
missing. Exit status 1 when any does.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core import runtime  # noqa: E402
from tpu_scripts.wheelhouse import imports  # noqa: E402

SOCKET_MODULES = ("socket", "http.server", "socketserver", "urllib.request", "http.client")
SOCKET_PACKAGES = ("uvicorn", "locust", "gcp_storage_emulator", "prometheus_client")


def _reachable(app: pathlib.Path) -> set[pathlib.Path]:
    """The project's files an app can import (at module level or inside a function)."""
    seen, todo = set(), [(app, imports._package_of(app, ROOT))]
    while todo:
        current, package = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in imports._direct(current, package):
            parts = name.split(".")
            if parts[0] not in imports.FIRST_PARTY:
                continue
            for i in range(1, len(parts) + 1):
                module = ".".join(parts[:i])
                if (found := imports.module_file(module, ROOT)) is not None:
                    inner = module if found.name == "__init__.py" else module.rpartition(".")[0]
                    todo.append((found, inner))
    return seen


def _opens_sockets(path: pathlib.Path) -> bool:
    names = imports._direct(path, imports._package_of(path, ROOT))
    text = path.read_text(encoding="utf-8")
    return (
        any(n == m or n.startswith(m + ".") for n in names for m in SOCKET_MODULES)
        or any(n.split(".")[0] in SOCKET_PACKAGES for n in names)
        or "distributed.initialize" in text
    )


def candidates() -> list[str]:
    found = []
    for app in imports.app_files(ROOT):
        files = _reachable(app)
        reached = {
            name.split(".")[0]
            for path in files
            for name in imports._direct(path, imports._package_of(path, ROOT))
        }
        if reached & set(runtime.OPTIONAL_MODULES) or any(map(_opens_sockets, files)):
            found.append(app.stem)
    return found


def run(stem: str) -> tuple[int | None, str]:
    env = runtime.child_env(
        JAX_PLATFORMS="cpu",
        JAX_NUM_CPU_DEVICES="8",
        PYTHONPATH=runtime.python_path(ROOT / "tests" / "fixtures" / "host_lacks", ROOT),
        LAB_BLOCK_MODULES=",".join(runtime.OPTIONAL_MODULES),
        LAB_BLOCK_SOCKETS="1",
    )
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "apps" / f"{stem}.py")],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return done.returncode, done.stdout + done.stderr


def main(argv: list[str]) -> int:
    bad = 0
    for stem in argv or candidates():
        code, output = run(stem)
        stopped = [line for line in output.splitlines() if line.startswith("STOPPED: ")]
        failed = code != 0 or "Traceback" in output
        bad += failed
        last = output.strip().splitlines()[-1][:160] if failed and output.strip() else ""
        verdict = "FAILS" if failed else ("stopped" if stopped else "ran")
        print(f"{stem}: {verdict} (exit {code}) {stopped[0][:160] if stopped else last}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
