"""Tiling, memory and pipelining: VMEM per block size, the pipeline's timeline, the roofline.

Hardware figures come from jax's own table (``pltpu.get_tpu_info_for_chip``,
jax/_src/pallas/mosaic/tpu_info.py), per TensorCore. The published utilizations are those
jax's Pallas TPU matmul guide printed for its kernel on a TPU v5e (docs/pallas/tpu/matmul.ipynb
in jax-ml/jax, "Performance of pipelined kernels"): quoted, never measured here.
"""

from __future__ import annotations

import re

import numpy as np

from core.kernels import tiling, vmem

DTYPES = ("bfloat16", "float32")
# Generation -> the name of jax's ChipVersion member.
GENERATIONS = {"v5e": "TPU_V5E", "v6e": "TPU_V6E", "v5p": "TPU_V5P", "TPU7x": "TPU_7X"}
# Published by jax's matmul guide, bf16, TPU v5e (197 TFLOP/s peak in the guide's arithmetic):
# (bm, bk, bn, m = k = n, FLOP/s utilization %). The guide's "XLA" row is jnp.matmul.
PUBLISHED_V5E = (
    (128, 128, 128, 1024, 3.6621),
    (128, 128, 128, 4096, 5.9267),
    (128, 128, 128, 8192, 6.0775),
    (512, 1024, 1024, 1024, 8.5776),
    (512, 1024, 1024, 4096, 78.4692),
    (512, 1024, 1024, 8192, 91.5048),
)
PUBLISHED_SOURCE = (
    "jax-ml/jax docs/pallas/tpu/matmul.ipynb (Pallas TPU matmul guide), timed with timeit "
    "on a TPU v5e by the guide's authors"
)
# The DMA demo runs every chunk as its own interpreted copy + multiply: keep it small.
MAX_CHUNKS = 32


def chip_info(generation: str) -> dict[str, float]:
    """VMEM bytes, bf16 FLOP/s and HBM bytes/s of one TensorCore, from jax's tpu_info."""
    from jax.experimental.pallas import tpu as pltpu

    info = pltpu.get_tpu_info_for_chip(getattr(pltpu.ChipVersion, GENERATIONS[generation]), 1)
    return {
        "vmem_bytes": float(info.vmem_capacity_bytes),
        "bf16_flops": float(info.bf16_ops_per_second),
        "hbm_bytes_per_s": float(info.mem_bw_bytes_per_second),
    }


def vmem_parts(bm: int, bk: int, bn: int, dtype: str, buffers: int) -> dict[str, int]:
    """VMEM the TPU-style matmul holds: ``buffers`` copies of each block, the f32 accumulator."""
    itemsize = np.dtype(dtype).itemsize
    return {
        f"x blocks ({buffers} x {bm} x {bk})": buffers * bm * bk * itemsize,
        f"y blocks ({buffers} x {bk} x {bn})": buffers * bk * bn * itemsize,
        f"out blocks ({buffers} x {bm} x {bn})": buffers * bm * bn * itemsize,
        f"f32 accumulator ({bm} x {bn})": bm * bn * 4,
    }


def vmem_rows(bm: int, bk: int, bn: int, dtype: str, buffers: int) -> list[dict]:
    """Per generation: VMEM per core, Mosaic's default scoped limit, what the blocks need, and
    whether they fit: by default (the scoped limit), or only with ``vmem_limit_bytes`` raised
    towards the physical VMEM."""
    need = sum(vmem_parts(bm, bk, bn, dtype, buffers).values())
    rows = []
    for generation in GENERATIONS:
        have = chip_info(generation)["vmem_bytes"]
        scoped = vmem.default_scoped_vmem_bytes(generation)
        if vmem.fits(need, generation):
            verdict = "yes"
        elif need <= have:
            verdict = f"only with vmem_limit_bytes >= {need / 2**20:.1f} MiB"
        else:
            verdict = "no"
        rows.append(
            {
                "generation": generation,
                "VMEM per core (MiB)": have / 2**20,
                "default scoped limit (MiB)": scoped / 2**20,
                "blocks need (MiB)": need / 2**20,
                "share of the limit": f"{100 * need / scoped:.1f}%",
                "fits": verdict,
            }
        )
    return rows


def hbm_traffic_bytes(m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype: str) -> int:
    """Bytes the blocked matmul moves between HBM and VMEM (the guide's count).

    Every program reads an x block and a y block: x is read N/bn times, y M/bm times; the
    output is written once: (m k n / bn + k n m / bm + m n) elements.
    """
    elements = m * k * n // bn + k * n * m // bm + m * n
    return elements * np.dtype(dtype).itemsize


def roofline(m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype: str, generation: str):
    """The roofline prediction for the blocked matmul on ``generation`` (an upper bound).

    time >= max(FLOPs / peak, HBM bytes / bandwidth); utilization = FLOPs / (time x peak).
    """
    chip = chip_info(generation)
    flops = 2 * m * k * n
    traffic = hbm_traffic_bytes(m, k, n, bm, bk, bn, dtype)
    compute_s, memory_s = flops / chip["bf16_flops"], traffic / chip["hbm_bytes_per_s"]
    return {
        "FLOPs": flops,
        "HBM bytes": traffic,
        "intensity (FLOP/byte)": flops / traffic,
        "ridge (FLOP/byte)": chip["bf16_flops"] / chip["hbm_bytes_per_s"],
        "compute s": compute_s,
        "memory s": memory_s,
        "bound": "compute" if compute_s >= memory_s else "memory",
        "utilization": compute_s / max(compute_s, memory_s),
    }


def step_seconds(bm: int, bk: int, bn: int, dtype: str, generation: str, k_steps: int = 1):
    """(copy, compute) seconds of one grid step of the blocked matmul on ``generation``.

    Copy: an x block and a y block in, and 1 / k_steps of an output block out, at the HBM
    bandwidth; compute: 2 bm bk bn FLOPs at the bf16 peak.
    """
    chip = chip_info(generation)
    itemsize = np.dtype(dtype).itemsize
    copy_s = (bm * bk + bk * bn + bm * bn / k_steps) * itemsize / chip["hbm_bytes_per_s"]
    return copy_s, 2 * bm * bk * bn / chip["bf16_flops"]


def pipelined_seconds(steps: int, copy_s: float, compute_s: float) -> float:
    """End time of a double-buffered pipeline of ``steps`` equal steps (closed form).

    The first copy cannot overlap anything (the fill), the last compute neither (the drain);
    in between each step takes the longer of copy and compute. ``timeline(..., buffers=2)``
    simulates the same schedule step by step.
    """
    return copy_s + (steps - 1) * max(copy_s, compute_s) + compute_s


def pipelined_utilization(
    m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype: str, generation: str
) -> float:
    """Utilization the double-buffered grid can reach: per-step copies, fill and drain.

    Each grid step copies an x block and a y block in, and 1 / (K / bk) of an output block
    out (bytes / HBM bandwidth), and multiplies them (2 bm bk bn FLOPs / peak); per-step
    overheads are left out, so this is still an upper bound, at most the roofline's.
    """
    grid = tiling.grid_of((m, n, k), (bm, bn, bk))
    copy_s, compute_s = step_seconds(bm, bk, bn, dtype, generation, k_steps=grid[2])
    ideal_s = 2 * m * k * n / chip_info(generation)["bf16_flops"]
    steps = int(np.prod(grid))
    return ideal_s / pipelined_seconds(steps, copy_s, compute_s)


def published_rows() -> list[dict]:
    """The guide's published v5e utilizations beside this roofline's prediction (bf16, v5e)."""
    rows = []
    for bm, bk, bn, size, published in PUBLISHED_V5E:
        predicted = roofline(size, size, size, bm, bk, bn, "bfloat16", "v5e")
        pipelined = pipelined_utilization(size, size, size, bm, bk, bn, "bfloat16", "v5e")
        rows.append(
            {
                "blocks (bm, bk, bn)": f"({bm}, {bk}, {bn})",
                "m = k = n": size,
                "intensity (FLOP/byte)": round(predicted["intensity (FLOP/byte)"], 1),
                "roofline: utilization at most": f"{100 * predicted['utilization']:.1f}%",
                "pipeline model: at most": f"{100 * pipelined:.1f}%",
                "published (v5e, measured by the guide)": f"{published:.1f}%",
            }
        )
    return rows


def timeline(steps: int, copy_s: float, compute_s: float, buffers: int) -> list[dict]:
    """The pipeline's schedule: when each step's copy-in and compute run (seconds).

    One buffer: copy i, then compute i, then copy i + 1. Two buffers: copy i + 1 runs while
    step i computes (it may start once copy i is done and the buffer it fills is free).
    """
    if steps < 1 or buffers not in (1, 2):
        raise ValueError(f"timeline needs steps >= 1 and buffers 1 or 2, got {steps}, {buffers}")
    rows, copy_end, compute_end = [], 0.0, 0.0
    compute_ends: list[float] = []
    for i in range(steps):
        if buffers == 1:
            copy_start = compute_end
        else:  # the buffer copy i fills was last read by compute i - 2
            copy_start = max(copy_end, compute_ends[i - 2] if i >= 2 else 0.0)
        copy_end = copy_start + copy_s
        compute_start = max(copy_end, compute_end)
        compute_end = compute_start + compute_s
        compute_ends.append(compute_end)
        rows.append({"step": i, "work": "copy in (DMA)", "start": copy_start, "end": copy_end})
        rows.append(
            {"step": i, "work": "compute (MXU)", "start": compute_start, "end": compute_end}
        )
    return rows


def dma_problem(rows: int, k: int, chunk: int, dtype: str) -> str | None:
    """Why the DMA pipeline demo cannot run with these sizes (in words), or None."""
    if rows % chunk:
        return (
            f"chunk {chunk} does not divide the {rows} rows: the last DMA would copy past the "
            "end of x"
        )
    if (reason := tiling.block_problem("a chunk of x", (rows, k), (chunk, k), dtype)) is not None:
        return reason
    sublanes = tiling.native_tile(dtype)[0]
    if chunk % sublanes and chunk != rows:
        return (
            f"chunk {chunk} is not a multiple of {sublanes} rows: this lesson keeps every DMA "
            f"on whole {dtype} tiles ({sublanes} x 128: 16-bit types pack two rows per "
            "sublane), so no copy starts halfway through a tile"
        )
    if rows // chunk > MAX_CHUNKS:
        return (
            f"{rows // chunk} chunks: interpret mode runs every copy and multiply as its own "
            f"step on the CPU, so more than {MAX_CHUNKS} is too slow here: use larger chunks"
        )
    return None


# --- the chip's block sweep, beside this lesson's models ----------------------------------------
# tpu_scripts/matmul_blocks_tpu.py sweeps core.kernels.matmul over block shapes on one chip
# (bf16 in, f32 accumulator, N = M = K) and keeps the figures in this benchmark record, keyed
# by N and blocks (matmul_sweep.figure_key).
TPU_RECORD = "pallas_matmul_blocks"
TPU_COMMAND = (
    "python tpu_scripts/matmul_blocks_tpu.py --out OUT/matmul.json --record pallas_matmul_blocks"
)
_PALLAS_KEY = re.compile(r"pallas_n(\d+)_b(\d+)x(\d+)x(\d+)_(tflops|error)")


def tpu_record(root=None) -> tuple[dict | None, str]:
    """(figures, citation) of the newest TPU_RECORD, or (None, why there is none and how to
    make it): an app shows the line, never a traceback. A damaged record still raises."""
    from core.perf import records

    try:
        return dict(records.latest(TPU_RECORD, root).figures), records.cite(TPU_RECORD, root)
    except FileNotFoundError as exc:  # NoCitableRecord is one too
        return None, f"{exc}. Run on a TPU chip: {TPU_COMMAND}, then copy the record it writes."


def measured_label(figures: dict, citation: str) -> str:
    """The chart's label, naming the chip the record names: "measured on TPU v5e (record
    <file> (date, machine))"."""
    from core.tpu import specs

    kind = str(figures.get("device_kind", "unknown chip"))
    generation = specs.DEVICE_KIND_GENERATION.get(kind)
    return f"measured on {f'TPU {generation}' if generation else kind} (record {citation})"


def tpu_block_rows(figures: dict, n: int) -> list[dict]:
    """The record's Pallas matmul at N = M = K = ``n``, one row per block shape measured (or
    failed), sorted by the pipeline model's utilization: the measured share of the bf16 peak
    (the record's own peak, else v5e's from jax's table) beside this lesson's two upper
    bounds for the same shape on v5e (roofline, pipeline model) and the blocks' VMEM
    (double-buffered, bf16). Empty when the record has no sweep at ``n``."""
    from core.kernels import matmul_sweep

    peak = float(figures.get("peak_flops") or chip_info("v5e")["bf16_flops"])
    shapes = {
        tuple(int(g) for g in match.groups()[1:4])
        for key in figures
        if (match := _PALLAS_KEY.fullmatch(key)) and int(match.group(1)) == n
    }
    rows = []
    for blocks in shapes:
        tflops = figures.get(matmul_sweep.figure_key("pallas", n, blocks, "tflops"))
        error = figures.get(matmul_sweep.figure_key("pallas", n, blocks, "error"))
        vmem = sum(vmem_parts(*blocks, "bfloat16", 2).values())
        roof = roofline(n, n, n, *blocks, "bfloat16", "v5e")["utilization"]
        pipelined = pipelined_utilization(n, n, n, *blocks, "bfloat16", "v5e")
        rows.append(
            {
                "blocks (bm, bk, bn)": f"({blocks[0]}, {blocks[1]}, {blocks[2]})",
                "N": n,
                "measured TFLOP/s": tflops,
                "measured % of peak": None if tflops is None else 100 * tflops * 1e12 / peak,
                "roofline % (model)": 100 * roof,
                "pipeline % (model)": 100 * pipelined,
                "VMEM (MiB, 2 buffers)": vmem / 2**20,
                "status": "ran" if tflops is not None else f"failed: {error or 'no figure'}",
            }
        )
    return sorted(rows, key=lambda r: (r["pipeline % (model)"], r["blocks (bm, bk, bn)"]))


def tpu_xla_percent(figures: dict, n: int) -> float | None:
    """XLA's jnp.dot at N = ``n`` in the record, as % of the bf16 peak (None if not there)."""
    from core.kernels import matmul_sweep

    tflops = figures.get(matmul_sweep.figure_key("xla", n, matmul_sweep.NO_BLOCKS, "tflops"))
    peak = float(figures.get("peak_flops") or chip_info("v5e")["bf16_flops"])
    return None if tflops is None else 100 * tflops * 1e12 / peak


def tpu_sizes(figures: dict) -> list[int]:
    """The sizes N the record's Pallas sweep has, ascending."""
    return sorted({int(m.group(1)) for key in figures if (m := _PALLAS_KEY.fullmatch(key))})
