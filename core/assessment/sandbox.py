"""Run a learner's code answer in a process of its own: limited, confined, and never trusted.

``Child`` starts ``python -I -B -c <core/assessment/sandbox_child.py>`` (isolated mode: no
PYTHONPATH, no user site, not the current folder), which limits and confines itself before it
reads the answer (see that module). The hidden tests run HERE, in the grader: each call of
the learner's function is sent to the child as JSON and its return value comes back as JSON,
validated (pydantic, sizes and nesting bounded) before it is rebuilt, so the child can only
ever hand back return values, and those are judged by the grader's own tests.

Every way an answer can end is an outcome of that answer, never of the grader (after what
autograders do: nbgrader stops a cell past ``ExecutePreprocessor.timeout`` and grades on,
jupyter/nbgrader#70; a dead kernel must fail its tests, not pass them, #427; a crash is
reported as such, sagemathinc/cocalc#4951):

- ``timeout``: its process worked longer than ``Limits.time_s`` (start-up not counted);
- ``memory``: past ``Limits.memory_mib`` of address space (RLIMIT_AS), a MemoryError or an
  allocator's abort;
- ``exit``: ``sys.exit()``, ``quit()``, KeyboardInterrupt: stopped by the answer itself;
- ``ended``: the process ended on its own (``os._exit``);
- ``crashed``: killed by a signal (a segmentation fault);
- ``malformed``: a reply the grader cannot read (the answer wrote into the channel);
- ``grader``: the process could not start (not the answer's fault: grade it again).

An exception the function raises is not an outcome: it reaches the hidden tests as a
``LearnerError`` (a ValueError stays catchable as ValueError), as if it were raised here.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import json
import math
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Annotated, Literal

import pydantic

from core import curriculum
from core.assessment import sandbox_child as wire

CHILD_SOURCE = pathlib.Path(wire.__file__).read_text(encoding="utf-8")
MIB = 2**20
OUTPUT_KEPT = 16 * 1024  # bytes of the child's stderr kept (its last ones)
MEMORY_WORDS = ("MemoryError", "bad_alloc", "Out of memory", "out of memory",
                "RESOURCE_EXHAUSTED", "Cannot allocate memory")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one answer may use. ``time_s`` counts while the grader waits on the answer's
    process (loading the source, each call), not while the hidden tests compute their own
    references, nor while Python and JAX start (``start_s``, the grader's own time)."""

    time_s: float = 120.0
    memory_mib: int = 6144  # address space: JAX's CPU runtime alone maps about 1 GiB
    start_s: float = 300.0
    reply_mib: int = 64
    file_mib: int = 64  # the largest file the answer may write (in its own temporary folder)

    def __post_init__(self):
        if not (self.time_s > 0 and self.start_s > 0):
            raise ValueError(f"time limits must be positive: {self}")
        if self.memory_mib < 1024:  # JAX's CPU runtime alone maps about 1 GiB
            raise ValueError(f"a memory limit under 1024 MiB leaves JAX no room: {self}")


DEFAULT_LIMITS = Limits()
_limits = [DEFAULT_LIMITS]


def current_limits() -> Limits:
    """The limits answers are graded under (``use_limits`` sets them; the grader's CLI does)."""
    return _limits[0]


def use_limits(limits: Limits) -> None:
    _limits[0] = limits


class Stopped(BaseException):  # noqa: N818 (an outcome, not an error of the grader)
    """The answer's process stopped answering: ``status`` and what to tell the learner.

    A BaseException: a hidden test's ``except Exception`` must not take it for a result."""

    def __init__(self, status: str, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class LearnerError(Exception):
    """An exception raised by the learner's code in its process: its message (``str``) and
    ``text``, its type, message and line of the learner's source."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


def _learner_error(error: ChildError) -> LearnerError:
    where = f" (line {error.line} of your code)" if error.line else ""
    message, text = f"{error.message}{where}", f"{error.type}: {error.message}{where}"
    base = getattr(builtins, error.type, None)
    if error.builtin and isinstance(base, type) and issubclass(base, Exception):
        try:  # the hidden tests may expect ValueError: raise one that is also a LearnerError
            return type(error.type, (LearnerError, base), {})(message, text)
        except TypeError:  # a builtin that cannot be subclassed with another base
            pass
    return LearnerError(text, text)


# --- what the child may send back (validated before anything is rebuilt from it) ----------

_Frozen = pydantic.ConfigDict(extra="forbid", strict=True)
Index = Annotated[int, pydantic.Field(ge=0, le=4095)]
Dim = Annotated[int, pydantic.Field(ge=0, le=2**31)]
Text = Annotated[str, pydantic.Field(max_length=wire.MAX_TEXT)]


class ArrayV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["ndarray"]
    dtype: Literal[wire.DTYPES]  # type: ignore[valid-type]
    shape: list[Dim] = pydantic.Field(max_length=32)
    data: str
    scalar: bool = False

    @pydantic.model_validator(mode="after")
    def _sized(self):
        items = math.prod(self.shape)
        size = items * wire._dtype(self.dtype).itemsize
        if len(self.data) != 4 * math.ceil(size / 3):
            raise ValueError(f"{len(self.data)} base64 characters for {size} bytes")
        if self.scalar and self.shape:
            raise ValueError("a scalar has shape ()")
        return self


class MeshV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["mesh"]
    shape: list[Annotated[int, pydantic.Field(ge=1, le=4096)]] = pydantic.Field(max_length=8)
    axis_names: list[Annotated[str, pydantic.Field(max_length=64)]] = pydantic.Field(max_length=8)
    axis_types: list[Literal["Auto", "Explicit", "Manual"]] | None = None
    devices: list[Index] = pydantic.Field(max_length=4096)


class NamedV(pydantic.BaseModel):
    model_config = _Frozen
    mesh: MeshV
    spec: list[None | Text | list[Text]] = pydantic.Field(max_length=32)


class JaxV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["jax"]
    dtype: Literal[wire.DTYPES]  # type: ignore[valid-type]
    shape: list[Dim] = pydantic.Field(max_length=32)
    device: Index | None
    committed: bool
    named: NamedV | None
    shard_devices: list[Index] = pydantic.Field(max_length=4096)
    shards: list[ArrayV] = pydantic.Field(min_length=1, max_length=4096)


class NoneV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["none"]


class BoolV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["bool"]
    v: bool


class IntV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["int"]
    v: Annotated[int, pydantic.Field(ge=-(2**63), lt=2**63)]


class FloatV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["float"]
    v: Annotated[str, pydantic.Field(max_length=40, pattern=r"^(-?0x[0-9a-f.p+-]+|-?inf|nan)$")]


class StrV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["str"]
    v: Annotated[str, pydantic.Field(max_length=100_000)]


class OtherV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["other"]
    type: Text
    repr: Text


class ListV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["list", "tuple"]
    items: list[Value] = pydantic.Field(max_length=100_000)


class DictV(pydantic.BaseModel):
    model_config = _Frozen
    t: Literal["dict"]
    items: list[tuple[StrV | IntV, Value]] = pydantic.Field(max_length=100_000)


Value = Annotated[
    ArrayV | JaxV | MeshV | NoneV | BoolV | IntV | FloatV | StrV | OtherV | ListV | DictV,
    pydantic.Field(discriminator="t"),
]
ListV.model_rebuild()
DictV.model_rebuild()


class ChildError(pydantic.BaseModel):
    model_config = _Frozen
    kind: Literal["exception", "exit", "memory"]
    type: Annotated[str, pydantic.Field(max_length=200)]
    builtin: bool
    message: Text
    line: Annotated[int, pydantic.Field(ge=1)] | None


class Reply(pydantic.BaseModel):
    model_config = _Frozen
    ok: bool
    value: Value | None = None
    error: ChildError | None = None


class ReadyInfo(pydantic.BaseModel):
    model_config = _Frozen
    confinement: Text
    devices: Annotated[int, pydantic.Field(ge=1, le=4096)]


class Ready(pydantic.BaseModel):
    model_config = _Frozen
    ready: ReadyInfo


# --- where the child may read ---------------------------------------------------------------

SYSTEM_READ = (
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/localtime", "/dev/null", "/dev/zero", "/dev/urandom",
    "/dev/random", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
)  # fmt: skip


def _inside(path: pathlib.Path, root: pathlib.Path) -> bool:
    return path == root or root in path.parents


def read_roots(project_root: pathlib.Path = curriculum.REPO_ROOT) -> list[str]:
    """The folders and files the child may read: the Python installation (its prefixes and
    sys.path, the virtual environment even inside the project) and the system's libraries,
    never the project itself: a root that holds the project is replaced by its other
    entries, down to the project's folder."""
    project = project_root.resolve()
    prefixes = {pathlib.Path(p).resolve() for p in (sys.prefix, sys.exec_prefix)}
    wanted = {
        *prefixes,
        *(pathlib.Path(p).resolve() for p in (sys.base_prefix, sys.base_exec_prefix)),
        pathlib.Path(sys.executable).resolve().parent,
        *(pathlib.Path(p).resolve() for p in sys.path if p),
        *(pathlib.Path(p) for p in SYSTEM_READ),
    }
    roots = []
    for root in sorted(wanted):
        if not root.exists():
            continue
        if _inside(root, project) and not any(_inside(root, p) for p in prefixes):
            continue  # the project's own folders (the course, its solutions, its tests)
        roots.extend(_around(root, project))
    return sorted({str(r) for r in roots})


def import_path(project_root: pathlib.Path = curriculum.REPO_ROOT) -> list[str]:
    """The grader's sys.path without the project (a virtual environment inside it stays):
    what the child imports from, PYTHONPATH's entries included (``-I`` ignores PYTHONPATH,
    and an installation may keep JAX there)."""
    project = project_root.resolve()
    prefixes = [pathlib.Path(p).resolve() for p in (sys.prefix, sys.exec_prefix)]
    out = []
    for entry in sys.path:
        path = pathlib.Path(entry).resolve() if entry else None
        if path is None or not path.exists() or entry in out:
            continue
        if not _inside(path, project) or any(_inside(path, p) for p in prefixes):
            out.append(entry)
    return out


def _around(root: pathlib.Path, project: pathlib.Path) -> list[pathlib.Path]:
    """``root`` when it does not hold the project, else its entries that do not, recursively
    (Landlock can only add rights, so the project is left out by naming everything else)."""
    if not _inside(project, root) or root == project:
        return [root] if root != project else []
    out = []
    for entry in root.iterdir():
        if entry.resolve() == project:
            continue
        out.extend(_around(entry, project) if _inside(project, entry) else [entry])
    return out


# --- the child ---------------------------------------------------------------------------------


def _device_count() -> int:
    import jax

    from core import runtime

    devices = jax.devices()
    return len(devices) if devices[0].platform == "cpu" else runtime.DEFAULT_CPU_DEVICES


class Child:
    """One answer's process: ``with Child(limits) as child: f = child.load(source, name)``,
    then ``f(*args)`` runs the learner's function there. Leaving the block kills it."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self.confinement = "not started"
        self.deadline: float | None = None
        self.used_s = 0.0  # the answer's time so far: waiting on its process, not on the grader
        self._output = collections.deque(maxlen=OUTPUT_KEPT)
        self._buffer = b""

    def __enter__(self) -> Child:
        import jax

        self._devices = list(jax.devices())
        self.tmp = tempfile.mkdtemp(prefix="jax-tpu-lab-answer-")
        config = {
            "project_root": str(curriculum.REPO_ROOT.resolve()),
            "memory_bytes": self.limits.memory_mib * MIB,
            "file_bytes": self.limits.file_mib * MIB,
            "cpu_devices": _device_count(),
            "read": read_roots(),
            "path": import_path(),
            "write": [self.tmp],
        }
        # MALLOC_ARENA_MAX: glibc reserves up to 8 x cores arenas of 64 MiB of address space
        # for threads; on a many-core host RLIMIT_AS would count them against the answer.
        env = {"PATH": os.defpath, "HOME": self.tmp, "TMPDIR": self.tmp, "LANG": "C.UTF-8",
               "PYTHONIOENCODING": "utf-8", "JAX_PLATFORMS": "cpu",
               "MALLOC_ARENA_MAX": "2"}  # fmt: skip
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", CHILD_SOURCE, json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.tmp,
                env=env,
                start_new_session=True,  # its own process group: killed whole
            )
        except OSError as error:
            shutil.rmtree(self.tmp, ignore_errors=True)
            why = f"the process that runs answers did not start: {error}"
            raise Stopped("grader", why) from None
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        try:
            message = self._receive(time.monotonic() + self.limits.start_s, starting=True)
            ready = Ready.model_validate_json(message)
        except Stopped as stop:
            self.__exit__(None, None, None)
            raise Stopped("grader", f"the process that runs answers did not start: "
                          f"{stop.message}") from None  # fmt: skip
        except pydantic.ValidationError as error:
            self.__exit__(None, None, None)
            raise Stopped("grader", f"the answer process started wrongly: {error}") from None
        self.confinement = ready.ready.confinement
        return self

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()
        self._drain.join(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def output(self) -> str:
        """The last lines the answer's process wrote to stderr (its prints, warnings)."""
        return bytes(self._output).decode("utf-8", errors="replace")

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.process.stderr.read1(4096), b""):
            self._output.extend(chunk)

    # -- the protocol ------------------------------------------------------------------------

    def load(self, source: str, name: str):
        """Execute ``source`` in the child; returns a callable that calls its ``name``."""
        self._request({"op": "load", "source": source, "name": name})
        return self.call

    def call(self, *args, **kwargs):
        """The learner's function on ``args``: its return value, rebuilt here; its exception
        as a LearnerError; any other end as Stopped."""
        devices = self._wire_devices([*args, *kwargs.values()])
        message = {
            "op": "call",
            "args": [wire.encode(a, devices) for a in args],
            "kwargs": {k: wire.encode(v, devices) for k, v in kwargs.items()},
        }
        value = self._request(message)
        try:
            return wire.decode(value.model_dump(), devices)
        except Exception as error:  # valid JSON that does not rebuild (shards that lie)
            raise self._stop("malformed", f"its return value does not rebuild: {error}") from None

    def _wire_devices(self, values) -> list:
        """The devices the child's device i stands for in this call: those of the platform a
        mesh among ``values`` is built on (an item builds its mesh on the CPU's devices where
        the default backend has too few: bank.common.mesh_devices), else the default's."""
        import jax

        for value in values:
            if isinstance(value, jax.sharding.Mesh):
                return list(jax.devices(value.devices.flat[0].platform))
        return self._devices

    def _request(self, message: dict):
        started = time.monotonic()  # the clock runs while the answer's process works only
        self.deadline = started + self.limits.time_s - self.used_s
        try:
            self._send(json.dumps(message).encode() + b"\n")
            line = self._receive(self.deadline)
        finally:
            self.used_s += time.monotonic() - started
        try:
            reply = Reply.model_validate_json(line)
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise self._stop("malformed", f"{where}: {first['msg']}") from None
        if reply.ok:
            return reply.value
        if reply.error is None:
            raise self._stop("malformed", "a failure without its error")
        if reply.error.kind == "exit":
            said = f"({reply.error.message})" if reply.error.type == "SystemExit" else ""
            raise self._stop("exit", f"your code raised {reply.error.type}{said}")
        if reply.error.kind == "memory":
            raise self._stop("memory", f"MemoryError: {reply.error.message}")
        raise _learner_error(reply.error)

    def _stop(self, status: str, detail: str) -> Stopped:
        messages = {
            "timeout": f"timed out: your code was stopped after {self.limits.time_s:g} s, the "
            "time limit of one answer",
            "memory": f"out of memory: your code used more than its {self.limits.memory_mib} "
            "MiB and was stopped",
            "exit": "your code ended its own process",
            "ended": "the process running your code ended before the hidden tests finished",
            "crashed": "the process running your code crashed",
            "malformed": "the process running your code sent a reply the grader cannot read "
            "(does your code write to file descriptors it did not open?)",
        }
        return Stopped(status, f"{messages[status]} ({detail})")

    def _send(self, data: bytes) -> None:
        fd = self.process.stdin.fileno()
        os.set_blocking(fd, False)
        while data:
            remaining = self._remaining(self.deadline)
            if not select.select([], [fd], [], remaining)[1]:
                raise self._timed_out()
            try:
                data = data[os.write(fd, data) :]
            except BrokenPipeError:
                raise self._ended() from None

    def _remaining(self, deadline: float | None) -> float:
        return max(0.0, (deadline or math.inf) - time.monotonic())

    def _timed_out(self) -> Stopped:
        os.killpg(self.process.pid, signal.SIGKILL)
        return self._stop("timeout", "the hidden tests that had not finished count as failed")

    def _receive(self, deadline: float | None, starting: bool = False) -> bytes:
        fd = self.process.stdout.fileno()
        limit = self.limits.reply_mib * MIB
        while b"\n" not in self._buffer:
            remaining = self._remaining(deadline)
            if not select.select([fd], [], [], remaining)[0]:
                if starting:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    raise Stopped("grader", f"not ready after {self.limits.start_s:g} s")
                raise self._timed_out()
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if starting:
                    code = self.process.wait()
                    raise Stopped("grader", f"it ended (status {code}): {self.output()[-2000:]}")
                raise self._ended()
            self._buffer += chunk
            if len(self._buffer) > limit:
                os.killpg(self.process.pid, signal.SIGKILL)
                raise self._stop("malformed", f"a reply over {self.limits.reply_mib} MiB")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _ended(self) -> Stopped:
        try:  # its output closed: it is ending (or closed it and runs on: then it is killed)
            code = self.process.wait(timeout=max(1.0, min(30.0, self._remaining(self.deadline))))
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self._drain.join(timeout=5)
        said = self.output()
        if code < 0:
            name = signal.Signals(-code).name
            if any(word in said for word in MEMORY_WORDS):
                return self._stop("memory", f"killed by {name} after an allocation failed")
            why = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort",
                   "SIGKILL": "killed from outside, e.g. by the system's memory killer",
                   "SIGBUS": "a bus error", "SIGFPE": "an arithmetic fault"}  # fmt: skip
            return self._stop("crashed", f"{name}: {why.get(name, 'a signal')}")
        return self._stop("ended", f"exit status {code}: os._exit() or a library's exit")
