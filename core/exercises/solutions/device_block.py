"""Reference solution of distributed.meshes_sharding.device_block: the block of an array one
device holds under a PartitionSpec."""

import math


def device_block(array_shape, mesh_axes, spec, coords):
    """One (start, stop) pair per array dimension: the slice the device at ``coords`` holds.

    A dimension split over mesh axes (a1, a2, ...) is cut into size(a1) * size(a2) * ...
    equal blocks; the device's block number reads its coordinates along those axes as the
    digits of one number, a1's the most significant (as in row-major order). Axes the spec
    does not name do not split anything: devices that differ only along them hold copies.
    Missing trailing entries of the spec mean None.
    """
    entries = list(spec) + [None] * (len(array_shape) - len(spec))
    block = []
    for size, entry in zip(array_shape, entries, strict=True):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        parts = math.prod(mesh_axes[a] for a in axes)
        index = 0
        for axis in axes:  # the first axis named is the most significant digit
            index = index * mesh_axes[axis] + coords[axis]
        length = size // parts
        block.append((index * length, (index + 1) * length))
    return tuple(block)
