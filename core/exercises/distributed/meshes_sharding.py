"""Exercises of the lesson meshes_sharding: the block of an array each device holds.

- ``shard_shape`` (predict): the block of a 3-D array each device holds under a 2-D mesh and a
  PartitionSpec.
- ``device_block`` (code): which slice of the array a device at given mesh coordinates holds,
  for any PartitionSpec.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, SelfCheck, rng
from core.exercises.distributed._shared import PHASE

MESH_AXES = ("x", "y")


def _axes(entry) -> tuple[str, ...]:
    """The mesh axes one PartitionSpec entry names: None -> (), "x" -> ("x",)."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _spec_text(spec: tuple) -> str:
    parts = []
    for entry in spec:
        axes = _axes(entry)
        parts.append("None" if not axes else repr(axes[0]) if len(axes) == 1 else repr(tuple(axes)))
    return "P(" + ", ".join(parts) + ")"


# Specs of a 3-D (B, T, H) array on a mesh with axes x and y; each splits at least one dim.
SHAPE_SPECS = (
    ("x",),
    (None, "y"),
    ("x", None, "y"),
    ("y", "x"),
    (("x", "y"),),
    (None, None, ("y", "x")),
    (None, "x", "y"),
    ("y", None, "x"),
)
SHAPE_MESHES = ((2, 4), (4, 2), (2, 2))


def _divide(shape, sizes: dict, spec) -> tuple[int, ...]:
    """Each dimension divided by the product of the mesh axes its spec entry names."""
    entries = list(spec) + [None] * (len(shape) - len(spec))
    return tuple(
        n // math.prod(sizes[a] for a in _axes(e)) for n, e in zip(shape, entries, strict=True)
    )


class ShardShape(PredictItem):
    """A dimension split over mesh axes a, b, ... is cut into size(a)·size(b)·... blocks."""

    id = "distributed.meshes_sharding.shard_shape"
    phase = PHASE
    lesson = "meshes_sharding"
    title = "The block each device holds"
    answer_type = "shape"
    hints = (
        "A PartitionSpec has one entry per leading dimension of the array; an entry names the "
        "mesh axes that split that dimension, and a dimension with no entry (or None) is not "
        "split at all.",
        "Look up the size of each named axis in the mesh shape (the first number is axis x, "
        "the second y). A dimension split over one axis is divided by that axis's size; over "
        "a tuple of axes, by the product of their sizes. Axes the spec does not name split "
        "nothing: they only make copies.",
        "Divide each dimension by the product of the sizes of the axes its entry names, and "
        "leave every other dimension whole: the block has as many dimensions as the array.",
    )

    def params(self, generator):
        mesh_shape = SHAPE_MESHES[int(generator.integers(len(SHAPE_MESHES)))]
        spec = SHAPE_SPECS[int(generator.integers(len(SHAPE_SPECS)))]
        devices = math.prod(mesh_shape)
        # every dimension a multiple of the mesh size: any spec divides it evenly
        shape = tuple(devices * int(generator.integers(1, 7)) for _ in range(3))
        return {"mesh_shape": mesh_shape, "spec": spec, "shape": shape}

    def prompt(self, params) -> str:
        a, b = params["mesh_shape"]
        b_, t, h = params["shape"]
        return (
            f"A float32 array of activations of shape **(B, T, H) = ({b_}, {t}, {h})** is "
            f"placed with `jax.device_put(x, NamedSharding(mesh, spec))` on the mesh "
            f"`jax.make_mesh(({a}, {b}), ('x', 'y'))` ({a * b} devices) with "
            f"**spec = `{_spec_text(params['spec'])}`**. **Predict the shape of the block each "
            "device holds** (`x.addressable_shards[i].data.shape`); the lesson's library then "
            "places a real array on the virtual CPU devices and reads it."
        )

    def live(self, params):
        import jax

        from core.assessment.bank.common import mesh_devices
        from core.distributed import sharding

        mesh_shape = params["mesh_shape"]
        devices, _note = mesh_devices(math.prod(mesh_shape))
        if not devices:
            raise RuntimeError(f"a {mesh_shape} mesh needs {math.prod(mesh_shape)} devices")
        mesh = sharding.make_mesh(mesh_shape, MESH_AXES, devices)
        spec = jax.sharding.PartitionSpec(*params["spec"])
        placed = sharding.shard(np.zeros(params["shape"], np.float32), mesh, spec)
        shapes = {row.shape for row in sharding.shard_layout(placed)}
        if len(shapes) != 1:
            raise RuntimeError(f"blocks of several shapes: {shapes}")
        return shapes.pop()

    def derive(self, params):
        sizes = dict(zip(MESH_AXES, params["mesh_shape"], strict=True))
        spec, shape = params["spec"], params["shape"]
        value = _divide(shape, sizes, spec)
        entries = list(spec) + [None] * (len(shape) - len(spec))
        lines = []
        for name, n, entry, out in zip("BTH", shape, entries, value, strict=True):
            axes = _axes(entry)
            if not axes:
                lines.append(f"- {name} = {n}: no axis named, not split: **{out}**")
            else:
                over = " · ".join(f"{a}={sizes[a]}" for a in axes)
                lines.append(f"- {name} = {n}: split over {over}: {n} / "
                             f"{math.prod(sizes[a] for a in axes)} = **{out}**")  # fmt: skip
        unused = [a for a in MESH_AXES if a not in {x for e in entries for x in _axes(e)}]
        copies = (
            f" The spec names no axis {' or '.join(unused)}: the "
            f"{math.prod(sizes[a] for a in unused)} devices along it hold copies of the same "
            "block."
            if unused
            else " Every mesh axis splits a dimension: each device holds a different block."
        )
        return value, (
            f"The mesh is x={sizes['x']} by y={sizes['y']}. Entry by entry (missing trailing "
            "entries mean None):\n\n" + "\n".join(lines) + f"\n\nso each block is "
            f"**{value}**.{copies}"
        )

    def wrong(self, params, expected):
        sizes = dict(zip(MESH_AXES, params["mesh_shape"], strict=True))
        spec, shape = params["spec"], params["shape"]
        devices = math.prod(params["mesh_shape"])
        entries = list(spec) + [None] * (len(shape) - len(spec))
        swapped = dict(zip(MESH_AXES, params["mesh_shape"][::-1], strict=True))
        candidates = {
            "the global shape (a spec does not shrink the array)": tuple(shape),
            "every split dimension divided by all the devices": tuple(
                n // devices if _axes(e) else n for n, e in zip(shape, entries, strict=True)
            ),
            "axis sizes read the other way round (x for y)": _divide(shape, swapped, spec),
            "a tuple entry split over its first axis only": _divide(
                shape, sizes, tuple(_axes(e)[:1] or None for e in spec)
            ),
            "the spec's entries matched to the last dimensions": _divide(
                shape, sizes, (None,) * (len(shape) - len(spec)) + tuple(spec)
            ),
        }
        return {k: v for k, v in candidates.items() if tuple(v) != tuple(expected)}


_BLOCK_STUB = '''\
def device_block(array_shape, mesh_axes, spec, coords):
    """The block of an array that one device holds under NamedSharding(mesh, spec).

    array_shape: the array's global shape, a tuple of ints, e.g. (16, 8, 4).
    mesh_axes: {axis name: size} in the mesh's order, e.g. {"x": 2, "y": 4}.
    spec: the PartitionSpec's entries as a tuple, one per leading dimension of the array
        (missing trailing entries mean None): None (not split), an axis name ("x"), or a
        tuple of axis names (("x", "y"): split over both axes at once).
    coords: the device's position in the mesh, {axis name: index}, e.g. {"x": 1, "y": 3}.
    Returns one (start, stop) pair per array dimension: the device holds
    array[start_0:stop_0, start_1:stop_1, ...], exactly as jax places it. Every split
    divides its dimension evenly.
    """
    raise NotImplementedError
'''

_BLOCK_MINOR_FIRST = """\
import math


def device_block(array_shape, mesh_axes, spec, coords):
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    block = []
    for size, entry in zip(array_shape, entries):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        parts = math.prod(mesh_axes[a] for a in axes)
        index = 0
        for axis in reversed(axes):
            index = index * mesh_axes[axis] + coords[axis]
        length = size // parts
        block.append((index * length, (index + 1) * length))
    return tuple(block)
"""

_BLOCK_BY_POSITION = """\
import math


def device_block(array_shape, mesh_axes, spec, coords):
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    position = list(coords.values())
    block = []
    for dim, (size, entry) in enumerate(zip(array_shape, entries)):
        if entry is None:
            block.append((0, size))
            continue
        axes = (entry,) if isinstance(entry, str) else tuple(entry)
        parts = math.prod(mesh_axes[a] for a in axes)
        length = size // parts
        index = position[dim % len(position)]
        block.append((index * length, (index + 1) * length))
    return tuple(block)
"""

_BLOCK_WHOLE_MESH = """\
import math


def device_block(array_shape, mesh_axes, spec, coords):
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    devices = math.prod(mesh_axes.values())
    block = []
    for size, entry in zip(array_shape, entries):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        index = 0
        for axis in axes:
            index = index * mesh_axes[axis] + coords[axis]
        length = size // devices if axes else size
        block.append((index * length, (index + 1) * length))
    return tuple(block)
"""

_BLOCK_INCLUSIVE = """\
import math


def device_block(array_shape, mesh_axes, spec, coords):
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    block = []
    for size, entry in zip(array_shape, entries):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        parts = math.prod(mesh_axes[a] for a in axes)
        index = 0
        for axis in axes:
            index = index * mesh_axes[axis] + coords[axis]
        length = size // parts
        block.append((index * length, index * length + length - 1))
    return tuple(block)
"""


def device_block_reference(array_shape, mesh_axes, spec, coords) -> tuple[tuple[int, int], ...]:
    """By cutting, not by arithmetic: each dimension's indices (np.arange) are split into as
    many equal pieces as the first named axis has devices, the device's piece is kept, and
    that piece is split again along the next axis (so the first axis is the most
    significant). Independent of core.distributed; checked against jax's own
    ``NamedSharding.devices_indices_map`` by the item's self-check."""
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    block = []
    for size, entry in zip(array_shape, entries, strict=True):
        indices = np.arange(size)
        for axis in _axes(entry):
            indices = np.split(indices, mesh_axes[axis])[coords[axis]]
        block.append((int(indices[0]), int(indices[-1]) + 1))
    return tuple(block)


def _all_coords(mesh_axes: dict) -> list[dict]:
    names = list(mesh_axes)
    return [
        dict(zip(names, point, strict=True))
        for point in itertools.product(*(range(mesh_axes[n]) for n in names))
    ]


class DeviceBlock(CodeItem):
    id = "distributed.meshes_sharding.device_block"
    phase = PHASE
    lesson = "meshes_sharding"
    title = "Which block a device holds"
    function_name = "device_block"
    stub = _BLOCK_STUB
    solution_module = "core.exercises.solutions.device_block"
    hints = (
        "Work one array dimension at a time. Its spec entry names the mesh axes that split it; "
        "the dimension is cut into as many equal blocks as the product of their sizes, each "
        "dimension // that product long.",
        "The device's block number along a dimension comes from its coordinates on the named "
        "axes only (an axis the entry does not name does not move the block). For a tuple "
        "entry such as ('x', 'y'), read the coordinates as the digits of one number.",
        "For ('x', 'y'): block = coords['x'] * size('y') + coords['y'] (x is the most "
        "significant digit, as in row-major order; for ('y', 'x') it is the other way round). "
        "Then start = block * length, stop = start + length (stop is exclusive).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `device_block(array_shape, mesh_axes, spec, coords)`: the rule "
            "`jax.device_put(x, NamedSharding(mesh, spec))` follows to give each device its "
            "block, the one the lesson's pictures draw. The hidden tests ask for the block of "
            "every device of four seeded layouts (1-D and 2-D meshes, 2-D and 3-D arrays, "
            "specs shorter than the array, axes of size 1, a dimension split over two axes) "
            "and compare with a NumPy reference that cuts `np.arange` of each dimension "
            "piece by piece; the blocks must match exactly."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "a tuple entry's axes combined the wrong way round (last axis most significant)": (
                _BLOCK_MINOR_FIRST
            ),
            "the coordinate taken by the dimension's position, not by the axis's name": (
                _BLOCK_BY_POSITION
            ),
            "every split dimension cut into as many blocks as the whole mesh has devices": (
                _BLOCK_WHOLE_MESH
            ),
            "stop written as the last index held (inclusive), not one past it": (_BLOCK_INCLUSIVE),
        }

    @functools.cache  # noqa: B019 (module-level singleton; a seed's cases are fixed)
    def cases(self, seed: int) -> list[tuple[str, tuple, dict, tuple]]:
        """(name, array shape, mesh axes, spec) of the seed's four layouts."""
        generator = rng(self.id + "/inputs", seed)

        def draw(options):
            return options[int(generator.integers(len(options)))]

        d = int(draw((4, 8)))
        a, b = draw(((2, 4), (4, 2), (2, 2)))
        c, e = draw(((2, 3), (3, 2), (2, 4)))
        k = lambda: int(generator.integers(1, 4))  # noqa: E731
        return [
            ("1-D mesh", (d * k(), d * k()), {"x": d}, draw((("x",), (None, "x")))),
            ("2-D mesh, one axis per dimension", (a * k(), b * k()), {"x": a, "y": b},
             draw((("y", "x"), ("x", "y"), (None, "y")))),
            ("a dimension split over two axes", (c * e * k(), 3, c * e * k()),
             {"x": c, "y": e}, draw(((("x", "y"),), (None, None, ("y", "x")),
                                     (("y", "x"), None, None)))),
            ("a short spec, an axis of size 1", (4 * k(), 5, 2 * k()), {"x": 1, "y": 4},
             draw((("y",), (None, None, "x"), ()))),
        ]  # fmt: skip

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        tests = []
        for name, shape, mesh_axes, spec in self.cases(seed):
            label = f"{name}: shape {shape}, mesh {mesh_axes}, spec {_spec_text(spec)}"
            tests.append(self._compare(function, shape, mesh_axes, spec, label))
        return tests

    def _compare(self, function, shape, mesh_axes, spec, label) -> HiddenTest:
        for coords in _all_coords(mesh_axes):
            expected = device_block_reference(shape, mesh_axes, spec, coords)
            got = function(tuple(shape), dict(mesh_axes), tuple(spec), dict(coords))
            try:
                got = tuple((int(start), int(stop)) for start, stop in got)
            except (TypeError, ValueError):
                return HiddenTest(
                    label, False, f"at {coords}: expected (start, stop) pairs, got {got!r}"
                )
            if got != expected:
                return HiddenTest(
                    label, False, f"the device at {coords} holds {expected}; you said {got}"
                )
        devices = math.prod(mesh_axes.values())
        return HiddenTest(label, True, f"all {devices} devices' blocks match")

    @functools.cache  # noqa: B019 (module-level singleton)
    def reference_agrees_with_jax(self, seed: int) -> bool:
        """The NumPy reference against jax's own placement (``devices_indices_map``) on the
        seed's layouts, on the lab's devices (bank.common.mesh_devices)."""
        import jax

        from core.assessment.bank.common import mesh_devices

        for _name, shape, mesh_axes, spec in self.cases(seed):
            devices, _note = mesh_devices(math.prod(mesh_axes.values()))
            if not devices:
                return False
            grid = np.asarray(devices[: math.prod(mesh_axes.values())], dtype=object)
            mesh = jax.sharding.Mesh(grid.reshape(tuple(mesh_axes.values())), tuple(mesh_axes))
            placed = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
            indices = placed.devices_indices_map(shape)
            for coords in _all_coords(mesh_axes):
                device = mesh.devices[tuple(coords.values())]
                truth = tuple(
                    tuple(s.indices(n)[:2]) for s, n in zip(indices[device], shape, strict=True)
                )
                if truth != device_block_reference(shape, mesh_axes, spec, coords):
                    return False
        return True

    def self_check(self, seed: int) -> SelfCheck:
        check = super().self_check(seed)
        fact = {f"{self.id}: the NumPy reference equals jax's devices_indices_map": (
            self.reference_agrees_with_jax(seed)
        )}  # fmt: skip
        return SelfCheck(check.errors, {**check.facts, **fact})
