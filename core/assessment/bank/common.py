"""What the items of several phases share: running the program an item shows (``run_source``
keeps what it prints, ``run_program`` swallows it and can profile it), formatting its arrays,
drawing an option with the item's own generator, citing the sources of spec figures, and the
devices an item's mesh is built on (``mesh_devices``)."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from core.tpu import specs


def mesh_devices(count: int) -> tuple[list, str]:
    """(the devices to build an item's mesh of ``count`` on, a note for its prompt): the default
    backend's when it has ``count``, with no note; else the CPU backend's when it has them (a
    TPU host with one chip has the lab's 8 virtual CPU devices beside it: runtime.
    use_cpu_devices), with a note saying so; else ([], ""), too few everywhere. A block's
    shape, a collective's bytes and a sharded step's result depend on the mesh's shape, not
    on the kind of device it is built of."""
    import jax

    default = list(jax.devices())
    if len(default) >= count:
        return default, ""
    try:
        cpu = list(jax.devices("cpu"))
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU backend out
        cpu = []
    if len(cpu) < count:
        return [], ""
    note = (
        f"this process's default backend ({jax.default_backend().upper()}) has {len(default)} "
        f"device{'s' if len(default) != 1 else ''}, so the {count}-device mesh is built on "
        f"this host's {len(cpu)} CPU devices (what is asked depends on the mesh's shape, not on "
        "the kind of device)"
    )
    return cpu, note


def run_source(source: str) -> tuple[dict[str, Any], str]:
    """Execute a program's source as shown to the learner: (its namespace, what it printed)."""
    namespace: dict[str, Any] = {"__name__": "assessment_program"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "<assessment program>", "exec"), namespace)  # noqa: S102
    return namespace, printed.getvalue().strip()


def run_program(source: str, filename: str, hook: Callable | None = None) -> dict[str, Any]:
    """Execute a diagnose item's program text (stdout swallowed); return its namespace.

    ``hook`` is installed with ``sys.setprofile`` while the program runs (the previous
    profiler is restored after)."""
    namespace: dict[str, Any] = {"__name__": "diagnose_program"}
    code = compile(source, filename, "exec")
    previous = sys.getprofile()
    with contextlib.redirect_stdout(io.StringIO()):
        if hook is not None:
            sys.setprofile(hook)
        try:
            exec(code, namespace)  # noqa: S102 (the program is this module's own text)
        finally:
            sys.setprofile(previous)
    return namespace


def format_array(values) -> str:
    return np.array2string(np.asarray(values, dtype=np.float64), precision=4, separator=", ")


def pick(generator: np.random.Generator, options):
    """One of ``options`` (a sequence), drawn with the item's own generator."""
    options = list(options)
    return options[int(generator.integers(len(options)))]


def cite(*figures: specs.Figure) -> str:
    """The sources of spec figures as the learner reads them: "key: text", each once."""
    keys = dict.fromkeys(f.source for f in figures)
    return "; ".join(f"{key}: {specs.SOURCES[key]}" for key in keys)
