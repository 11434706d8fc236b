"""Meshes, PartitionSpecs and shard layouts for "Practice with four virtual CPU devices".

A mesh arranges some of the devices in a grid with named axes (``("x",)`` or ``("x", "y")``);
a ``PartitionSpec`` says, per array dimension, which mesh axes split it (``None``: not
split). ``jax.device_put(x, NamedSharding(mesh, spec))`` then cuts ``x`` into blocks, one
per device; a dimension split over mesh axes of total size n must be divisible by n (the
lesson's contract; JAX pads uneven splits only inside some computations).

Dimension glossary (see core/lessons/setup/arrays_devices.py): R rows, C columns, H hidden units.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

P = jax.sharding.PartitionSpec

AXIS_NAMES = {1: ("x",), 2: ("x", "y")}  # mesh axis names by mesh rank
DIM_NAMES = ("rows", "cols")  # how the lesson names the array's two dimensions
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


# --- meshes -------------------------------------------------------------------------------


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order."""
    if n < 1:
        raise ValueError(f"need a positive integer, got {n}")
    return [d for d in range(1, n + 1) if n % d == 0]


def valid_mesh_sizes(device_count: int) -> list[int]:
    """Mesh sizes that use a whole number of equal groups of the devices: the divisors."""
    if device_count < 1:
        raise ValueError(f"device count must be >= 1, got {device_count}")
    return divisors(device_count)


def mesh_shapes(size: int) -> list[tuple[int, ...]]:
    """Every mesh shape with ``size`` devices: the 1-D ``(size,)`` then each 2-D ``(a, b)``."""
    return [(size,)] + [(a, size // a) for a in divisors(size)]


def mesh_shape_name(shape: Sequence[int]) -> str:
    """``(4,)`` -> ``"4"``, ``(2, 2)`` -> ``"2x2"`` (the form of the --mesh-shape flag)."""
    return "x".join(str(n) for n in shape)


def parse_mesh_shape(name: str) -> tuple[int, ...]:
    """``"2x2"`` -> ``(2, 2)``; the inverse of :func:`mesh_shape_name`."""
    if not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)?", name):
        raise ValueError(f"mesh shape must look like 4 or 2x2, got {name!r}")
    return tuple(int(n) for n in name.split("x"))


def axis_names_for(shape: Sequence[int]) -> tuple[str, ...]:
    """The lesson's axis names for a mesh of this rank: ``("x",)`` or ``("x", "y")``."""
    if len(shape) not in AXIS_NAMES:
        raise ValueError(f"the lesson uses 1-D or 2-D meshes, got shape {tuple(shape)}")
    return AXIS_NAMES[len(shape)]


def make_mesh(
    shape: Sequence[int],
    axis_names: Sequence[str] | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> jax.sharding.Mesh:
    """A mesh of the first ``prod(shape)`` devices, with Auto axis types.

    ``jax.make_mesh`` defaults to Explicit axis types, where a matmul over a sharded
    contracting dimension is an error; Auto lets XLA choose the communication, which is
    what this lesson looks at.
    """
    shape = tuple(int(n) for n in shape)
    axis_names = tuple(axis_names) if axis_names is not None else axis_names_for(shape)
    devices = list(jax.devices() if devices is None else devices)
    size = math.prod(shape)
    if size < 1 or size > len(devices):
        raise ValueError(f"a mesh of shape {shape} needs {size} devices; {len(devices)} available")
    return jax.make_mesh(
        shape,
        axis_names,
        axis_types=(jax.sharding.AxisType.Auto,) * len(shape),
        devices=devices[:size],
    )


def axis_sizes(mesh: jax.sharding.Mesh | Mapping[str, int]) -> dict[str, int]:
    """``{"x": 2, "y": 2}`` for a mesh (or the mapping itself)."""
    return dict(mesh.shape) if isinstance(mesh, jax.sharding.Mesh) else dict(mesh)


# --- partition specs ----------------------------------------------------------------------


def _entry_axes(entry) -> tuple[str, ...]:
    """The mesh axes one PartitionSpec entry splits over: None -> (), "x" -> ("x",)."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def spec_name(spec: jax.sharding.PartitionSpec) -> str:
    """A readable, copyable name: ``P()``, ``P('x')``, ``P(None, 'x')``, ``P(('x', 'y'))``."""
    parts = []
    for entry in spec:
        axes = _entry_axes(entry)
        if not axes:
            parts.append("None")
        elif len(axes) == 1:
            parts.append(repr(axes[0]))
        else:
            parts.append("(" + ", ".join(map(repr, axes)) + ")")
    return "P(" + ", ".join(parts) + ")"


def valid_partition_specs(mesh_axis_names: Sequence[str]) -> dict[str, jax.sharding.PartitionSpec]:
    """The specs of a 2-D array the lesson offers on a mesh with these axes, by name.

    Each mesh axis shards at most one dimension; a dimension may be split over several
    axes at once (``P(('x', 'y'))``: rows over all x*y devices).
    """
    names = tuple(mesh_axis_names)
    if names not in AXIS_NAMES.values():
        raise ValueError(f"mesh axes must be one of {list(AXIS_NAMES.values())}, got {names}")
    specs = [P()]
    for axis in names:
        specs += [P(axis), P(None, axis)]
    if len(names) == 2:
        x, y = names
        specs += [P(x, y), P(y, x), P((x, y)), P(None, (x, y))]
    return {spec_name(spec): spec for spec in specs}


def describe_spec(spec: jax.sharding.PartitionSpec) -> str:
    """What ``spec`` does to a (rows, cols) array, in words."""
    entries = list(spec) + [None] * (len(DIM_NAMES) - len(spec))
    words = []
    for dim_name, entry in zip(DIM_NAMES, entries, strict=False):
        axes = _entry_axes(entry)
        words.append(f"{dim_name} split over {'×'.join(axes)}" if axes else f"{dim_name} whole")
    if not any(_entry_axes(entry) for entry in entries):
        return "replicated: every device holds the whole array"
    return ", ".join(words)


def _dim_label(dim: int, ndim: int) -> str:
    return DIM_NAMES[dim] if ndim == len(DIM_NAMES) else f"dim {dim}"


def divisibility_problem(
    shape: Sequence[int],
    mesh: jax.sharding.Mesh | Mapping[str, int],
    spec: jax.sharding.PartitionSpec,
) -> str | None:
    """Why ``spec`` cannot shard an array of ``shape`` over ``mesh`` evenly, or None.

    The message is for the learner: "rows=6 can't be split evenly over x=4 devices: pick
    rows divisible by 4".
    """
    sizes = axis_sizes(mesh)
    shape = tuple(shape)
    name = spec_name(spec)
    if len(spec) > len(shape):
        return f"{name} has {len(spec)} entries but the array has only {len(shape)} dimensions."
    used: list[str] = []
    for entry in spec:
        for axis in _entry_axes(entry):
            if axis not in sizes:
                return (
                    f"{name} splits over mesh axis '{axis}', but this mesh only has axes "
                    f"{tuple(sizes)}: pick a mesh with that axis or another spec."
                )
            if axis in used:
                return (
                    f"{name} uses mesh axis '{axis}' twice: a mesh axis can split only one "
                    "dimension."
                )
            used.append(axis)
    for dim, entry in enumerate(spec):
        axes = _entry_axes(entry)
        parts = math.prod(sizes[axis] for axis in axes)
        if axes and shape[dim] % parts:
            label = _dim_label(dim, len(shape))
            over = "×".join(axes)
            return (
                f"{label}={shape[dim]} can't be split evenly over {over}={parts} devices: "
                f"pick {label} divisible by {parts}."
            )
    return None


def shard(x, mesh: jax.sharding.Mesh, spec: jax.sharding.PartitionSpec) -> jax.Array:
    """``x`` placed on ``mesh`` as ``spec`` says; ValueError (the learner's reason) if uneven."""
    if problem := divisibility_problem(np.shape(x), mesh, spec):
        raise ValueError(problem)
    return jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))


# --- reading a layout ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShardRow:
    """One device's piece of an array."""

    device: int  # device id
    index: tuple[tuple[int, int], ...]  # (start, stop) per dimension of the full array
    shape: tuple[int, ...]  # shape of the shard on that device
    nbytes: int  # bytes that device holds for this array
    replica: int  # 0 for the first copy of a block, 1.. for further copies

    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(start, stop) for start, stop in self.index)

    def index_text(self, name: str = "x") -> str:
        """``x[0:4, 0:12]``: the slice of the full array this device holds."""
        return name + "[" + ", ".join(f"{start}:{stop}" for start, stop in self.index) + "]"


def shard_layout(array: jax.Array) -> list[ShardRow]:
    """Which device holds which block of ``array``, read from ``addressable_shards``."""
    rows = []
    for piece in array.addressable_shards:
        index = tuple(
            tuple(int(i) for i in s.indices(n)[:2])
            for s, n in zip(piece.index, array.shape, strict=True)
        )
        rows.append(
            ShardRow(
                device=int(piece.device.id),
                index=index,
                shape=tuple(piece.data.shape),
                nbytes=int(piece.data.nbytes),
                replica=int(piece.replica_id),
            )
        )
    return sorted(rows, key=lambda row: row.device)


def holders_by_block(layout: Sequence[ShardRow]) -> dict[tuple[tuple[int, int], ...], list[int]]:
    """Each distinct block of the array -> the devices that hold a copy of it."""
    blocks: dict[tuple[tuple[int, int], ...], list[int]] = {}
    for row in layout:
        blocks.setdefault(row.index, []).append(row.device)
    return blocks


def element_owners(layout: Sequence[ShardRow]) -> list[dict]:
    """One record per element of a 2-D array: row, col, the devices holding it, its block.

    Fuel for a picture with one cell per element; sorted by (row, col).
    """
    records = []
    for index, devices in holders_by_block(layout).items():
        if len(index) != 2:
            raise ValueError(f"element_owners draws 2-D arrays, got a {len(index)}-D layout")
        (row_start, row_stop), (col_start, col_stop) = index
        held_by = ", ".join(str(d) for d in sorted(devices))
        for row in range(row_start, row_stop):
            for col in range(col_start, col_stop):
                records.append(
                    {
                        "row": row,
                        "col": col,
                        "held by": held_by,
                        "copies": len(devices),
                        "block rows": f"{row_start}:{row_stop}",
                        "block cols": f"{col_start}:{col_stop}",
                    }
                )
    return sorted(records, key=lambda r: (r["row"], r["col"]))


def max_shard_error(array: jax.Array, reference: np.ndarray) -> float:
    """max over devices of |shard data - reference[that shard's slice]|, in float64."""
    reference = np.asarray(reference, dtype=np.float64)
    worst = 0.0
    for piece in array.addressable_shards:
        expected = reference[piece.index]
        got = np.asarray(piece.data, dtype=np.float64)
        if got.shape != expected.shape:
            raise ValueError(
                f"shard on device {piece.device.id} has shape {got.shape}, slice {expected.shape}"
            )
        worst = max(worst, numerics.max_abs_error(got, expected))
    return worst


# --- the computation ----------------------------------------------------------------------


def example_inputs(
    key: jax.Array, rows: int, cols: int, hidden: int
) -> tuple[jax.Array, jax.Array]:
    """``x_RC`` ~ N(0, 1) and weights ``w_CH`` ~ N(0, 1/cols), both float32."""
    if min(rows, cols, hidden) < 1:
        raise ValueError(f"rows, cols and hidden must be positive, got {rows}, {cols}, {hidden}")
    key_x, key_w = jax.random.split(key)
    x_RC = jax.random.normal(key_x, (rows, cols), dtype=jnp.float32)
    w_CH = jax.random.normal(key_w, (cols, hidden), dtype=jnp.float32) / np.sqrt(cols)
    return x_RC, w_CH


@jax.jit
def layer_RH(x_RC: jax.Array, w_CH: jax.Array) -> jax.Array:
    """tanh(x) @ w: elementwise work (needs no neighbours) then a contraction over C."""
    return jnp.tanh(x_RC) @ w_CH


def layer_reference(x_RC, w_CH) -> np.ndarray:
    """The same layer in numpy float64: the independent reference."""
    return np.tanh(np.asarray(x_RC, dtype=np.float64)) @ np.asarray(w_CH, dtype=np.float64)


def collectives(fn, *args) -> dict[str, int]:
    """How many of each collective XLA put into the compiled ``fn(*args)`` (from its HLO)."""
    hlo = fn.lower(*args).compile().as_text()
    counts = dict.fromkeys(COLLECTIVES, 0)
    for op in re.findall(r"\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", hlo):
        counts[op] += 1
    return counts


@dataclasses.dataclass(frozen=True)
class ShardedRun:
    """The lesson's computation done sharded and unsharded, with what XLA chose."""

    x_RC: jax.Array  # sharded input
    w_CH: jax.Array  # replicated weights
    y_RH: jax.Array  # sharded result
    y_unsharded_RH: jax.Array  # the same jitted layer on one device
    collectives: dict[str, int]  # collectives in the sharded program


def run_sharded(
    x_RC, w_CH, mesh: jax.sharding.Mesh, spec: jax.sharding.PartitionSpec
) -> ShardedRun:
    """Shard ``x`` as ``spec``, replicate ``w``, run :func:`layer_RH`; also run it unsharded."""
    x_sharded = shard(x_RC, mesh, spec)
    w_replicated = shard(w_CH, mesh, P())
    y_RH = layer_RH(x_sharded, w_replicated)
    one_device = jax.devices()[0]
    y_unsharded = layer_RH(jax.device_put(x_RC, one_device), jax.device_put(w_CH, one_device))
    return ShardedRun(
        x_RC=x_sharded,
        w_CH=w_replicated,
        y_RH=y_RH,
        y_unsharded_RH=y_unsharded,
        collectives=collectives(layer_RH, x_sharded, w_replicated),
    )
