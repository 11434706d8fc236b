"""The TPU-style Pallas matmul (core.kernels.matmul) over block shapes, beside XLA's jnp.dot:
the bookkeeping of tpu_scripts/matmul_blocks_tpu.py, tested on CPU (no timing here).

Shapes: x (N, N) @ y (N, N), square, N = M = K; blocks (bm, bk, bn): x blocks bm x bk,
y blocks bk x bn, output blocks bm x bn (the grid is (N/bm, N/bn, N/bk), k the reduction).
XLA's row has no blocks: (0, 0, 0).

- ``BLOCKS``: the sweep's block shapes. The squares 128 to 1024; the lesson's default and
  jax's matmul-guide blocks (512, 1024, 1024); bk apart from bm = bn (bk changes the steps
  per output block, not the HBM traffic); bm apart from bn (x is re-read N/bn times, y N/bm
  times).
- ``row``: one configuration's result (median seconds, TFLOP/s from 2 N^3, fraction of peak).
- ``figure_key`` / ``record_figures``: the record's flat figures, keyed by N and blocks, so a
  lesson reads the measured value for the blocks its own model describes.
- ``agreement``: a blocked product against NumPy float64 of the same rounded inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from core import numerics
from core.kernels import attention_sweep

KERNELS = ("pallas", "xla")
STATUSES = ("ok", "error", "skipped")
SIZES = (4096, 8192)
BLOCKS: tuple[tuple[int, int, int], ...] = (
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (512, 1024, 1024),  # the lesson's default, jax's matmul guide's best
    (1024, 1024, 512),
    (1024, 512, 1024),
    (512, 128, 512),
    (512, 1024, 512),
    (256, 1024, 256),
    (128, 1024, 1024),
)
NO_BLOCKS = (0, 0, 0)  # XLA's row
FLOP_FORMULA = "2 N^3 (N^3 multiply-adds of an N x N by N x N product)"


def matmul_flops(n: int) -> int:
    """FLOPs of an (n, n) @ (n, n) product: a multiply and an add per term."""
    return 2 * n**3


def parse_blocks(text: str) -> list[tuple[int, int, int]]:
    """``"128x128x128,512x1024x1024"`` -> [(128, 128, 128), (512, 1024, 1024)] (bm x bk x bn).

    ValueError unless every shape is three positive multiples of 128 (the TPU's lane width:
    every block dimension is some block's last dimension) with no shape twice."""
    shapes = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"a block shape is bm x bk x bn, like 512x1024x1024; got {item!r}")
        shape = tuple(int(p) for p in parts)
        if any(b < 128 or b % 128 for b in shape):
            raise ValueError(
                f"block {item}: every block dimension must be a positive multiple of 128 (the "
                "lanes of a TPU vector register)"
            )
        shapes.append(shape)
    if not shapes:
        raise ValueError("--blocks needs at least one bm x bk x bn shape")
    if len(set(shapes)) != len(shapes):
        raise ValueError(f"a block shape is listed twice in {text!r}")
    return shapes


def usable_blocks(n: int, blocks: Iterable[Sequence[int]]) -> list[tuple[int, int, int]]:
    """The shapes of ``blocks`` whose three sizes are <= n and divide it (whole grids)."""
    return [tuple(b) for b in blocks if all(s <= n and n % s == 0 for s in b)]


def row(
    kernel: str,
    n: int,
    blocks: Sequence[int],
    status: str,
    *,
    peak_flops: float | None = None,
    seconds: Sequence[float] = (),
    compile_s: float | None = None,
    reason: str = "",
    chain: int = 1,
) -> dict:
    """One configuration's result: the median of ``seconds`` (seconds per product: a timed
    dispatch of ``chain`` chained products divided by ``chain``), TFLOP/s from matmul_flops,
    and the fraction of ``peak_flops`` (None without a peak)."""
    if kernel not in KERNELS or status not in STATUSES:
        raise ValueError(f"unknown kernel or status: {kernel!r}, {status!r}")
    if status == "ok" and not seconds:
        raise ValueError("an 'ok' row needs its timed calls")
    bm, bk, bn = blocks
    return {
        "kernel": kernel,
        "N": n,
        "bm": bm,
        "bk": bk,
        "bn": bn,
        "status": status,
        "chain": chain,
        **attention_sweep.timing_fields(seconds, compile_s, matmul_flops(n), peak_flops),
        "reason": reason,
    }


def figure_key(kernel: str, n: int, blocks: Sequence[int], what: str) -> str:
    """The record figure of one configuration: ``pallas_n4096_b512x1024x1024_tflops``; XLA
    has no blocks: ``xla_n4096_tflops``. ``what``: ms, tflops, fraction_of_peak or error."""
    middle = "" if kernel == "xla" else "_b" + "x".join(str(b) for b in blocks)
    return f"{kernel}_n{n}{middle}_{what}"


def record_figures(document: dict) -> dict:
    """The record's flat figures from a sweep document: per configuration that ran, its median
    ms, TFLOP/s and fraction of peak; per configuration that failed, its error (a VMEM limit
    reads as Mosaic's message); the chip, dtype and peak the fractions use."""
    figures = {
        "device_kind": document["device_kind"],
        "dtype": document["dtype"],
        "accumulator": document["accumulator"],
    }
    if document.get("peak_flops"):
        figures["peak_flops"] = document["peak_flops"]
    for item in document["rows"]:
        blocks = (item["bm"], item["bk"], item["bn"])
        if item["status"] == "ok":
            figures[figure_key(item["kernel"], item["N"], blocks, "ms")] = item["median_s"] * 1e3
            figures[figure_key(item["kernel"], item["N"], blocks, "tflops")] = item["tflops_per_s"]
            if item["fraction_of_peak"] is not None:
                key = figure_key(item["kernel"], item["N"], blocks, "fraction_of_peak")
                figures[key] = item["fraction_of_peak"]
        elif item["status"] == "error":
            figures[figure_key(item["kernel"], item["N"], blocks, "error")] = item["reason"]
    for item in document.get("agreement", []):
        if "scaled_max_error" in item:
            figures[f"agreement_{item['kernel']}_{item['dtype']}_error"] = item["scaled_max_error"]
            figures[f"agreement_{item['kernel']}_{item['dtype']}_tolerance"] = item["tolerance"]
    return figures


def agreement(kernel: str, result, x, y, dtype: str, backend: str | None = None) -> dict:
    """``result`` (x @ y computed in ``dtype``) against NumPy float64 of the same x and y (the
    rounded inputs: the check measures the product, not the rounding of the operands): scaled
    max error, the dtype's tolerance on ``backend`` (a TPU's float32 matmul is judged at its
    matmul precision, numerics.tolerance) and whether it is within."""
    reference = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
    error = numerics.scaled_max_error(result, reference)
    bound = numerics.tolerance(dtype, backend=backend)
    return {
        "kernel": kernel,
        "dtype": dtype,
        "shape": [int(s) for s in np.shape(result)],
        "scaled_max_error": error,
        "tolerance": float(bound),
        "tolerance_reason": bound.reason,
        "agrees": bool(error <= bound),
    }
