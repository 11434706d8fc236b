"""glibc malloc settings for JAX on CPU, and the page faults they remove.

Why: XLA:CPU allocates each train step's temporary buffers (hundreds of MiB for the byte
Transformer capstone's default step: ``compiled.memory_analysis()`` gives the figure) and
frees them at the end of the step. With glibc's defaults every block over the mmap threshold
is mmapped, page-faulted and zeroed on first touch, then unmapped again: a minor page fault
per page and the system CPU to match, every step, landing inside the ops, so every op in a
profile looks slow.
Three documented malloc tunables (mallopt(3), tunables(7)) keep freed memory in the heap:

    glibc.malloc.arena_max=1          one arena: JAX's and torch's threads share the reused
                                      memory instead of each filling its own
    glibc.malloc.mmap_max=0           never mmap a block: large blocks come from the heap
    glibc.malloc.trim_threshold=2**31-1  never give the heap's top back to the kernel

The cost: a process keeps its peak heap until it exits (RSS does not shrink after a large
step), and with one arena and no mmap the heap can grow to several times one step's
temporaries before it settles (threads take turns allocating and small blocks split the freed
large ones: the read_xprof_trace lesson's demo reports both settings' peak RSS for one temp
buffer). Budget memory for that. Two ways to apply the same settings:

- ``GLIBC_TUNABLES`` (``TUNABLES``) in the environment of a new process: read by the dynamic
  loader at start-up; the Makefile exports it for ``make lab``, ``make capstone`` and the tests.
- ``configure()`` in a running process: mallopt(3) through ctypes. Call it first thing, before
  JAX or torch start their threads (arena_max binds the arenas threads create later), as the
  capstone's ``__main__`` does.

``page_faults()`` reads this process's minor/major faults and CPU seconds (getrusage), so a
benchmark can report faults per step beside step time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import resource

# mallopt(3) parameter numbers from glibc's <malloc.h>
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
TRIM_THRESHOLD = 2**31 - 1  # the largest int mallopt accepts: never trim
SETTINGS = {"arena_max": 1, "mmap_max": 0, "trim_threshold": TRIM_THRESHOLD}
TUNABLES = ":".join(f"glibc.malloc.{name}={value}" for name, value in SETTINGS.items())
_PARAMETERS = {"arena_max": M_ARENA_MAX, "mmap_max": M_MMAP_MAX, "trim_threshold": M_TRIM_THRESHOLD}
DISABLE_ENV = "JAX_LAB_MALLOC_DEFAULTS"  # =1: leave glibc's defaults (to measure the difference)

_configured: dict | None = None


def is_glibc() -> bool:
    return platform.libc_ver()[0] == "glibc"


def configure() -> dict:
    """Apply SETTINGS with mallopt(3) unless already applied (here or via GLIBC_TUNABLES),
    unless the C library is not glibc, or unless $JAX_LAB_MALLOC_DEFAULTS=1. Returns what is
    in force: {"mechanism": "mallopt" | "GLIBC_TUNABLES" | "none", "settings": {...},
    "reason": str}. Safe to call more than once."""
    global _configured
    if _configured is not None:
        return _configured
    if os.environ.get(DISABLE_ENV) == "1":
        _configured = _state("none", {}, f"${DISABLE_ENV}=1: glibc's defaults")
    elif not is_glibc():
        _configured = _state("none", {}, f"C library is {platform.libc_ver()[0] or 'unknown'}")
    elif from_environment() == SETTINGS:
        _configured = _state("GLIBC_TUNABLES", SETTINGS, "set before the process started")
    else:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        failed = [n for n, p in _PARAMETERS.items() if libc.mallopt(p, SETTINGS[n]) != 1]
        if failed:
            _configured = _state("none", {}, f"mallopt refused {', '.join(failed)}")
        else:
            _configured = _state("mallopt", SETTINGS, "mallopt(3) at start-up")
    return _configured


def _state(mechanism: str, settings: dict, reason: str) -> dict:
    return {"mechanism": mechanism, "settings": dict(settings), "reason": reason}


def from_environment(environ=None) -> dict:
    """The glibc.malloc.* tunables $GLIBC_TUNABLES sets, as {name: int}."""
    value = (os.environ if environ is None else environ).get("GLIBC_TUNABLES", "")
    found = {}
    for item in filter(None, value.split(":")):
        name, _, number = item.partition("=")
        if name.startswith("glibc.malloc.") and number.lstrip("-").isdigit():
            found[name.removeprefix("glibc.malloc.")] = int(number)
    return found


def child_env(tuned: bool, **extra: str) -> dict[str, str]:
    """The environment of a fresh child process (core.runtime.child_env plus ``extra``) with
    these settings (``tuned``: GLIBC_TUNABLES, read by the loader before any thread exists)
    or with glibc's defaults (no GLIBC_TUNABLES, $JAX_LAB_MALLOC_DEFAULTS=1 so that
    ``configure()`` leaves them too): one side of a before/after comparison."""
    from core import runtime

    env = runtime.child_env(**extra)
    env.pop("GLIBC_TUNABLES", None)
    env.pop(DISABLE_ENV, None)
    if tuned:
        env["GLIBC_TUNABLES"] = TUNABLES
    else:
        env[DISABLE_ENV] = "1"
    return env


def in_force() -> dict:
    """What ``configure()`` set, or what the environment says when it was never called."""
    if _configured is not None:
        return _configured
    settings = from_environment()
    if settings:
        return _state("GLIBC_TUNABLES", settings, "set before the process started")
    return _state("none", {}, "glibc's defaults (configure() not called)")


def resident_anon_bytes() -> int | None:
    """This process's resident anonymous memory now (RssAnon of /proc/self/status, Linux), or
    None where the kernel does not say. A step that leaves it higher grew the heap: its faults
    were first touches of new memory, not the same pages faulted again."""
    try:
        for line in open("/proc/self/status").read().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return None


def page_faults() -> dict:
    """This process so far: minor and major page faults, user and system CPU seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "minor_faults": usage.ru_minflt,
        "major_faults": usage.ru_majflt,
        "user_s": usage.ru_utime,
        "system_s": usage.ru_stime,
    }
