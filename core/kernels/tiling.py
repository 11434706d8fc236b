"""Block shapes a Pallas TPU kernel may use: divisibility and the (sublane, lane) tiling rule.

Checked BEFORE calling Pallas, so a learner reads the reason in words instead of Mosaic's
error. The rule (jax docs, "Pallas TPU details", section on block shapes:
https://docs.jax.dev/en/latest/pallas/tpu/details.html): the last two dimensions of a block
must be divisible by the dtype's minimal tile, or equal the array's dimensions. A TPU vector
register holds 8 sublanes x 128 lanes of 32-bit words; 16-bit types pack two rows per
sublane, so their minimal tile is 16 x 128 (8-bit types: 32 x 128).
"""

from __future__ import annotations

import math

import numpy as np

LANES = 128  # lanes of a TPU vector register (the last dimension)
SUBLANES_32BIT = 8  # sublanes of a TPU vector register for 32-bit types


def min_tile(dtype) -> tuple[int, int]:
    """The minimal (second-to-last, last) block tile for ``dtype``: f32 (8, 128), bf16 (16, 128)."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in (1, 2, 4):
        raise ValueError(f"no TPU tiling rule here for {np.dtype(dtype).name} ({itemsize} bytes)")
    return (SUBLANES_32BIT * (4 // itemsize), LANES)


def grid_of(shape, block) -> tuple[int, ...]:
    """Blocks along each dimension (ceil(shape / block))."""
    return tuple(math.ceil(s / b) for s, b in zip(shape, block, strict=True))


def block_problem(name: str, shape, block, dtype) -> str | None:
    """Why ``block`` cannot tile the array ``name`` of ``shape`` on a TPU, or None.

    Refuses a block that does not divide the array (the last block would hang off the edge)
    and a block whose last two dimensions break the dtype's minimal tile (unless they equal
    the array's own dimensions, which the rule allows).
    """
    shape, block = tuple(shape), tuple(block)
    if len(shape) != len(block):
        return f"{name}: block {block} has {len(block)} dims but the array {shape} has {len(shape)}"
    for dim, (s, b) in enumerate(zip(shape, block, strict=True)):
        if b < 1 or b > s:
            return f"{name}: block size {b} on dim {dim} must be between 1 and the array's {s}"
        if s % b:
            return (
                f"{name}: block {block} does not divide the array {shape}: {s} / {b} leaves "
                f"{s % b} on dim {dim}, so the last block would read past the edge"
            )
    tile = min_tile(dtype)
    for offset, (t, unit) in enumerate(zip(tile, ("sublanes", "lanes"), strict=True)):
        dim = len(shape) - 2 + offset
        if dim < 0:
            continue
        if block[dim] != shape[dim] and block[dim] % t:
            return (
                f"{name}: block {block} breaks the TPU tiling rule for {np.dtype(dtype).name}: "
                f"dim {dim} is {block[dim]}, not a multiple of {t} ({unit}) and not the "
                f"whole dim {shape[dim]}; a {np.dtype(dtype).name} block's last two dims must "
                f"be multiples of {tile[0]} x {tile[1]} (a vector register's tile)"
            )
    return None
