"""The assessment item of the phase "Setup & first steps".

- ``setup.shard_shape`` (predict a shape): the block each device holds under a NamedSharding.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from core.assessment.bank.common import mesh_devices
from core.assessment.items import Item, PredictItem, Question, rng
from core.distributed import sharding

MESH_DEVICES = 4  # setup.shard_shape places its array on this many devices


def _spec_text(entries: tuple) -> str:
    """('data', None, ('x', 'y')) -> "P('data', None, ('x', 'y'))", trailing Nones dropped."""
    entries = list(entries)
    while entries and entries[-1] is None:
        entries.pop()
    parts = [
        "None"
        if e is None
        else repr(e)
        if isinstance(e, str)
        else "(" + ", ".join(map(repr, e)) + ")"
        for e in entries
    ]
    return "P(" + ", ".join(parts) + ")"


def _entry_axes(entry) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


class ShardShape(PredictItem):
    """The block of a NamedSharding-placed array each of 4 devices holds."""

    id = "setup.shard_shape"
    phase = "Setup & first steps"
    lesson = "virtual_devices"
    title = "The block each device holds"
    answer_type = "shape"

    DIM_SIZES = (8, 12, 16, 20, 24, 32, 40, 48, 64)  # all divisible by 4: every split is even
    DTYPES = ("float32", "bfloat16", "int8", "float16")
    AXIS_NAMES_1D = (("x",), ("devices",), ("data",))
    AXIS_NAMES_2D = (("x", "y"), ("data", "model"), ("batch", "tensor"))

    def params(self, generator):
        rank = int(generator.integers(2, 4))
        shape = tuple(int(s) for s in generator.choice(self.DIM_SIZES, rank, replace=False))
        dtype = self.DTYPES[int(generator.integers(len(self.DTYPES)))]
        entries: list = [None] * rank
        if generator.integers(2) == 0:
            mesh_shape = (MESH_DEVICES,)
            names = self.AXIS_NAMES_1D[int(generator.integers(len(self.AXIS_NAMES_1D)))]
            entries[int(generator.integers(rank))] = names[0]
        else:
            mesh_shape = (2, 2)
            names = self.AXIS_NAMES_2D[int(generator.integers(len(self.AXIS_NAMES_2D)))]
            a, b = names
            # On a rank-2 array, 'a' on one dim and 'b' on the other splits both by 2: the
            # "neighbouring dimension" mistake would then give the right shape, so not offered.
            layouts = ("one axis", "both axes on one dim") + (("two dims",) if rank == 3 else ())
            layout = layouts[int(generator.integers(len(layouts)))]
            dims = [int(d) for d in generator.permutation(rank)]
            if layout == "one axis":
                entries[dims[0]] = names[int(generator.integers(2))]
            elif layout == "both axes on one dim":
                entries[dims[0]] = (a, b) if generator.integers(2) == 0 else (b, a)
            else:
                entries[dims[0]], entries[dims[1]] = a, b
        return {
            "shape": shape,
            "dtype": dtype,
            "mesh_shape": mesh_shape,
            "axis_names": names,
            "entries": tuple(entries),
        }

    def prompt(self, params):
        mesh_shape, names = params["mesh_shape"], params["axis_names"]
        devices, where = mesh_devices(MESH_DEVICES)
        note = f"\n\n*Checked live: {where}.*" if where else ""
        if not devices:
            note = (
                f"\n\n*This item needs {MESH_DEVICES} devices and this process has "
                f"{len(jax.devices())}: start it with `JAX_NUM_CPU_DEVICES=8` to have it "
                "checked live.*"
            )
        return (
            f"Four devices form a mesh of shape {mesh_shape} with axis names {names}. "
            "An array is placed on it with a `NamedSharding`:\n\n"
            "```python\n"
            f"mesh = jax.make_mesh({mesh_shape}, {names})\n"
            f"x = jnp.zeros({params['shape']}, dtype=jnp.{params['dtype']})\n"
            f"x = jax.device_put(x, NamedSharding(mesh, {_spec_text(params['entries'])}))\n"
            "x.addressable_shards[0].data.shape  # ?\n"
            "```\n\n"
            "What is the shape of the block each device holds?" + note
        )

    def question(self, seed):
        if mesh_devices(MESH_DEVICES)[0]:
            return super().question(seed)
        # Too few devices to compute it live: show the question and say why it cannot be
        # checked here (grading raises the ValueError of ``live``).
        hint = "a shape: integers separated by commas"
        prompt = self.prompt(self.params(rng(self.id, seed)))
        return Question(prompt, hint, tolerance=self.tolerance_text())

    def live(self, params):
        devices, _where = mesh_devices(MESH_DEVICES)  # the CPU's where the default has too few
        if not devices:
            raise ValueError(
                f"{self.id} places an array on {MESH_DEVICES} devices; this process has "
                f"{len(jax.devices())}. Set JAX_NUM_CPU_DEVICES=8 before JAX starts."
            )
        mesh = sharding.make_mesh(params["mesh_shape"], params["axis_names"], devices)
        spec = jax.sharding.PartitionSpec(*params["entries"])
        x = jax.device_put(
            np.zeros(params["shape"], dtype=jnp.dtype(params["dtype"])),  # host data: no compile
            jax.sharding.NamedSharding(mesh, spec),
        )
        blocks = {tuple(shard.data.shape) for shard in x.addressable_shards}
        if len(blocks) != 1:
            raise ValueError(f"the devices hold blocks of different shapes: {sorted(blocks)}")
        return blocks.pop()

    @staticmethod
    def _divisors(params) -> tuple[int, ...]:
        """How many parts each array dimension is cut into: the product of its axes' sizes."""
        size = dict(zip(params["axis_names"], params["mesh_shape"], strict=True))
        return tuple(math.prod(size[a] for a in _entry_axes(e)) for e in params["entries"])

    def derive(self, params):
        shape, divisors = params["shape"], self._divisors(params)
        block = tuple(n // d for n, d in zip(shape, divisors, strict=True))
        size = dict(zip(params["axis_names"], params["mesh_shape"], strict=True))
        rows = []
        for dim, (n, entry, d) in enumerate(zip(shape, params["entries"], divisors, strict=True)):
            axes = _entry_axes(entry)
            if axes:
                over = " × ".join(f"{a}={size[a]}" for a in axes)
                rows.append(f"| {dim} | {n} | {', '.join(axes)} | {n} / ({over}) = {n // d} |")
            else:
                rows.append(f"| {dim} | {n} | None | {n} (whole) |")
        derivation = (
            "Each array dimension is cut into as many parts as the product of the sizes of "
            f"the mesh axes its PartitionSpec entry names ({_spec_text(params['entries'])}; "
            "missing trailing entries are None: not split):\n\n"
            "| dim | size | mesh axes | block size |\n|---|---|---|---|\n"
            + "\n".join(rows)
            + f"\n\nBlock shape: **{block}**. The dtype ({params['dtype']}) changes the bytes "
            "per block, never its shape. A dimension is divided by its own axes' sizes, not by "
            "the number of devices: the blocks of unnamed mesh axes are replicas."
        )
        return block, derivation

    def wrong(self, params, expected):
        shape, divisors = params["shape"], self._divisors(params)
        rolled = divisors[-1:] + divisors[:-1]  # the split applied one dimension over
        found = {
            "forgot the sharding: the global shape": shape,
            "off by one axis: split the neighbouring dimension": tuple(
                n // d for n, d in zip(shape, rolled, strict=True)
            ),
        }
        by_devices = tuple(
            n // (MESH_DEVICES if d > 1 else 1) for n, d in zip(shape, divisors, strict=True)
        )
        if by_devices != tuple(expected):
            found["divided by the device count, not the mesh axis size"] = by_devices
        return found


ITEMS: tuple[Item, ...] = (ShardShape(),)
