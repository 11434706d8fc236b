"""jax.Array basics for the lesson "Meet your arrays and devices".

Dimension glossary used across core/: B batch, T sequence, D model width, R rows, C columns.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

DTYPES = ("float32", "bfloat16", "float16", "int32")


def check_tolerance(dtype: str, cols: int) -> float:
    """The bound for ``row_stats_RC`` in ``dtype`` vs NumPy float64 on rows of ``cols`` values.

    Not the dtype table alone: bfloat16 and float16 sums accumulate in their own precision,
    so the error grows with the row length (like sqrt(cols) for random rounding); 1e-6 more
    covers the float32 mean of an int32 row. No matmul: a TPU sums in float32 too, so the
    table's float32 value holds there (matmul=False).
    """
    return numerics.tolerance(dtype, matmul=False) * max(1, cols) ** 0.5 + 1e-6


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """What a learner should be able to read off any jax.Array."""

    shape: tuple[int, ...]
    dtype: str
    size: int
    nbytes: int  # bytes of the logical array (all shards together)
    devices: tuple[str, ...]
    sharding: str
    committed: bool  # placed explicitly (device_put / sharding) rather than by default

    def rows(self) -> list[dict]:
        return [{"property": k, "value": str(v)} for k, v in dataclasses.asdict(self).items()]


def describe(x: jax.Array) -> ArrayInfo:
    devices = tuple(str(d) for d in sorted(x.devices(), key=lambda d: d.id))
    return ArrayInfo(
        shape=tuple(x.shape),
        dtype=str(x.dtype),
        size=int(x.size),
        nbytes=int(x.nbytes),
        devices=devices,
        sharding=type(x.sharding).__name__,
        committed=bool(x.committed),
    )


def example_matrix(key: jax.Array, rows: int, cols: int, dtype: str) -> jax.Array:
    """A (rows, cols) array of the given dtype: N(0, 1) floats or integers in [-9, 9]."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"shape must be positive, got ({rows}, {cols})")
    if dtype == "int32":
        return jax.random.randint(key, (rows, cols), -9, 10, dtype=jnp.int32)
    return jax.random.normal(key, (rows, cols), dtype=jnp.float32).astype(dtype)


@jax.jit
def row_stats_RC(x_RC: jax.Array) -> jax.Array:
    """Per-row sum of squares and mean, computed in x's dtype (float for ints): (R, 2)."""
    x = x_RC if jnp.issubdtype(x_RC.dtype, jnp.floating) else x_RC.astype(jnp.float32)
    return jnp.stack([jnp.sum(x * x, axis=1), jnp.mean(x, axis=1)], axis=1)


def row_stats_reference(x_RC: np.ndarray) -> np.ndarray:
    """The same statistics in numpy float64: the independent reference."""
    x = np.asarray(x_RC, dtype=np.float64)
    return np.stack([np.sum(x * x, axis=1), np.mean(x, axis=1)], axis=1)


@dataclasses.dataclass(frozen=True)
class PlacementStep:
    description: str
    info: ArrayInfo | None
    error: str | None = None  # the message JAX raised, when the step is refused


def placement_walkthrough(x: jax.Array, device_a: int, device_b: int) -> list[PlacementStep]:
    """Where arrays live and where computations on them run.

    1. a fresh array is uncommitted, on the default device;
    2. ``device_put`` commits it to device ``device_a``;
    3. committed op uncommitted runs on the committed array's device;
    4. two arrays committed to different devices cannot be combined implicitly.
    """
    devices = jax.devices()
    for index in (device_a, device_b):
        if not 0 <= index < len(devices):
            raise ValueError(f"device index {index} out of range: {len(devices)} devices visible")
    fresh = jnp.asarray(x)
    steps = [
        PlacementStep("fresh array (jnp.asarray): uncommitted, default device", describe(fresh))
    ]
    on_a = jax.device_put(fresh, devices[device_a])
    steps.append(
        PlacementStep(f"jax.device_put(x, devices[{device_a}]): committed", describe(on_a))
    )
    mixed = on_a + jnp.ones_like(fresh)
    steps.append(
        PlacementStep("committed + uncommitted: runs where the committed one is", describe(mixed))
    )
    on_b = jax.device_put(fresh, devices[device_b])
    try:
        clash = on_a + on_b
        steps.append(PlacementStep(f"devices[{device_a}] + devices[{device_b}]", describe(clash)))
    except ValueError as exc:
        first_line = str(exc).splitlines()[0]
        steps.append(
            PlacementStep(f"devices[{device_a}] + devices[{device_b}]: refused", None, first_line)
        )
    return steps
