"""Block shapes a Pallas TPU kernel may use: the (8, 128) block rule, and the course's choices.

Checked BEFORE calling Pallas, so a learner reads the reason in words instead of Mosaic's
error. Pallas's rule (jax docs, "Pallas TPU details", BlockSpecs and grid iteration:
https://docs.jax.dev/en/latest/pallas/tpu/details.html): the last two dimensions of a block
must be divisible by 8 and 128 respectively, for every dtype, or equal the array's own
dimensions. A block need not divide the array: Pallas pads the last block on input (with
unspecified values) and drops the excess on output ("Grids and BlockSpecs":
https://docs.jax.dev/en/latest/pallas/grid_blockspec.html).

The course's stricter choice (``block_problem(..., exact=True)``, the default): a block must
divide the array, because the padded values are garbage and a matmul's K blocks would sum
them. ``native_tile`` is a layout fact, not a rule: a TPU vector register holds 8 sublanes x
128 lanes of 32-bit words and 16-bit types pack two rows per sublane, so (16, 128) is
bfloat16's natural tile (8-bit types: (32, 128)); smaller sublane blocks are legal.
"""

from __future__ import annotations

import math

import numpy as np

LANES = 128  # lanes of a TPU vector register (the last dimension)
SUBLANES_32BIT = 8  # sublanes of a TPU vector register for 32-bit types
BLOCK_RULE = (8, 128)  # Pallas TPU: a block's last two dims divisible by these (or whole)


def native_tile(dtype) -> tuple[int, int]:
    """The register's natural (second-to-last, last) tile for ``dtype``: f32 (8, 128), bf16
    (16, 128), int8 (32, 128). Blocks in multiples of it need no repacking; not required."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in (1, 2, 4):
        raise ValueError(f"no TPU tiling rule here for {np.dtype(dtype).name} ({itemsize} bytes)")
    return (SUBLANES_32BIT * (4 // itemsize), LANES)


def grid_of(shape, block) -> tuple[int, ...]:
    """Blocks along each dimension (ceil(shape / block))."""
    return tuple(math.ceil(s / b) for s, b in zip(shape, block, strict=True))


min_tile = native_tile  # the name earlier lessons used


def block_problem(name: str, shape, block, dtype, exact: bool = True) -> str | None:
    """Why ``block`` cannot tile the array ``name`` of ``shape`` on a TPU, or None.

    Refuses a block whose last two dimensions are not divisible by 8 and 128 (unless they
    equal the array's own dimensions): Pallas's rule, for every dtype. With ``exact`` (the
    course's choice, not Pallas's) also a block that does not divide the array.
    """
    shape, block = tuple(shape), tuple(block)
    if len(shape) != len(block):
        return f"{name}: block {block} has {len(block)} dims but the array {shape} has {len(shape)}"
    for dim, (s, b) in enumerate(zip(shape, block, strict=True)):
        if b < 1 or b > s:
            return f"{name}: block size {b} on dim {dim} must be between 1 and the array's {s}"
        if exact and s % b:
            return (
                f"{name}: block {block} does not divide the array {shape}: {s} / {b} leaves "
                f"{s % b} on dim {dim}. Pallas would pad the last block with unspecified "
                "values (and drop them from an output); this lesson asks for whole blocks"
            )
    native_tile(dtype)  # refuses a dtype with no TPU tiling (float64)
    for offset, (t, unit) in enumerate(zip(BLOCK_RULE, ("sublanes", "lanes"), strict=True)):
        dim = len(shape) - 2 + offset
        if dim < 0:
            continue
        if block[dim] != shape[dim] and block[dim] % t:
            return (
                f"{name}: block {block} breaks Pallas's TPU block rule: dim {dim} is "
                f"{block[dim]}, not divisible by {t} ({unit}) and not the whole dim "
                f"{shape[dim]}; a block's last two dims must be divisible by "
                f"{BLOCK_RULE[0]} and {BLOCK_RULE[1]} (any dtype) or equal the array's"
            )
    return None
