"""A persistent XLA compilation cache shared by one test session's processes, where it works.

The suite runs every lesson app twice (headless and in a browser) and many tests compile the
same programs in separate processes; XLA:CPU compilation is most of that time. With
``JAX_COMPILATION_CACHE_DIR`` set before the workers start, every JAX process of the session
(xdist workers, app subprocesses, served kernels) reads what another already compiled.

On some CPUs XLA:CPU rejects its own cached executables on reload (jax-ml/jax#38445: LLVM
tuning attributes read as required host features) and logs an error line per entry, which
tests that assert a clean stderr would see. So the cache is only switched on after a probe: a
program compiled in one process must be read back, as a recorded cache hit, in a second one.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ENV_DIR = "JAX_COMPILATION_CACHE_DIR"
ENV_DISABLE = "JAX_LAB_TEST_COMPILATION_CACHE"  # "0" turns the shared cache off
# Cache every program: the lessons' CPU compiles take 0.05-2 s each, under JAX's 1 s default.
SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}
PROBE_TIMEOUT_S = 120

_PROBE = """
import jax, jax.numpy as jnp
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("/cache_hits") else None)
x = jnp.arange(12.0).reshape(3, 4)
jax.block_until_ready(jax.jit(lambda a: jnp.tanh(a @ a.T).sum())(x))
print("CACHE_HITS", len(hits))
"""


def probe_hits(cache_dir: pathlib.Path, env: dict[str, str]) -> int | None:
    """Cache hits of the probe program run in a fresh process, or None if the process failed."""
    probe_env = {**env, ENV_DIR: str(cache_dir), **SETTINGS, "JAX_PLATFORMS": "cpu"}
    try:
        run = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=probe_env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None
    for line in run.stdout.splitlines():
        if run.returncode == 0 and line.startswith("CACHE_HITS "):
            return int(line.split()[1])
    return None


def enable(cache_dir: pathlib.Path, environ=os.environ) -> str:
    """Set the cache variables in ``environ`` when the probe reads back; return what happened.

    Leaves a cache the caller configured alone, and does nothing when ENV_DISABLE is "0".
    """
    if ENV_DIR in environ:
        return f"compilation cache: {environ[ENV_DIR]} (set by the caller)"
    if environ.get(ENV_DISABLE) == "0":
        return f"compilation cache: off ({ENV_DISABLE}=0)"
    probe_dir = cache_dir / "probe"
    try:
        probe_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a read-only checkout: run without the cache
        return f"compilation cache: off ({cache_dir} cannot be written: {error.strerror})"
    env = dict(environ)
    if not any(probe_dir.iterdir()):
        probe_hits(probe_dir, env)  # compiles the probe program into the empty cache
    hits = probe_hits(probe_dir, env)
    if not hits:
        return "compilation cache: off (a compiled program was not read back in a new process)"
    environ[ENV_DIR] = str(cache_dir)
    environ.update(SETTINGS)
    return f"compilation cache: {cache_dir}"
