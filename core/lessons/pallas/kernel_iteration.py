"""Iterate with correctness and performance evidence: flash attention's lesson code.

The kernel is core.kernels.flash_attention (forward grid (N, T/bq, T/bk), k blocks the
"arbitrary" reduction; backward from the saved log-sum-exp). Here: the refusals in words,
which blocks a causal kernel runs or skips, a cost model per block size (FLOPs, HBM bytes,
VMEM, the v5e roofline: a model, never a measurement), and the TPU compiles that show the
kernel's memory growing with T while XLA's attention holds T x T scores.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from core.kernels import flash_attention, tiling

DTYPES = ("float32", "bfloat16")
TOPOLOGY = "v5e:2x2"
LONG_TS = (1024, 2048, 4096)  # the longer T of the TPU compiles (kernel vs XLA attention)
# Interpret mode runs every program instance of a kernel as its own step on the CPU (three
# kernels: forward, dK/dV, dQ); more than this many per kernel leaves the headless budget.
MAX_PROGRAMS = 64
# The kernel and the jnp reference each round to the dtype on their own, so they may sit two
# roundings apart: comparing them to each other allows twice the dtype's tolerance.
PAIR_FACTOR = 2
BLOCK_SIZES = (8, 16, 32, 64, 128, 256, 512)  # candidates of the cost table (bq = bk)
BUFFERS = 2  # the pipeline double-buffers every block


def problem(t: int, d: int, block_q: int, block_k: int, dtype: str, heads: int) -> str | None:
    """Why these controls cannot run (in words), or None. Checked before any Pallas call; the
    TPU compile's longer T is checked apart, in its own cell (``long_t_problem``)."""
    for name, block in (("q and O", block_q), ("k and v", block_k)):
        reason = tiling.block_problem(name, (t, d), (block, d), dtype)
        if reason is not None:
            return reason
    programs = heads * (t // block_q) * (t // block_k)
    if programs > MAX_PROGRAMS:
        return (
            f"{heads} head(s) x {t // block_q} q blocks x {t // block_k} k blocks = {programs} "
            f"program instances per kernel; interpret mode runs each one as a separate step on "
            f"the CPU, so more than {MAX_PROGRAMS} is too slow here: choose larger blocks, a "
            "shorter T or fewer heads"
        )
    return None


def long_t_problem(block_q: int, block_k: int, long_t: int) -> str | None:
    """Why the TPU compile at T = ``long_t`` cannot use these blocks, or None."""
    if long_t % block_q or long_t % block_k:
        return (
            f"block_q {block_q} and block_k {block_k} must divide the TPU compile's "
            f"T = {long_t} too"
        )
    return None


def block_status(t: int, block_q: int, block_k: int, causal: bool) -> list[dict]:
    """For each (q block i, k block j) of one head: what the forward kernel does with it."""
    rows = []
    for i in range(t // block_q):
        for j in range(t // block_k):
            first_k, last_q = j * block_k, i * block_q + block_q - 1
            if not causal or first_k + block_k - 1 <= i * block_q:
                status = "computed"
            elif first_k <= last_q:
                status = "computed, masked"
            else:
                status = "skipped"
            rows.append({"q block": i, "k block": j, "status": status})
    return rows


def _peaks(generation: str = "TPU_V5E") -> tuple[float, float]:
    """(bf16 FLOP/s, HBM bytes/s) of one TensorCore, from jax's own table (tpu_info)."""
    from jax.experimental.pallas import tpu as pltpu

    info = pltpu.get_tpu_info_for_chip(getattr(pltpu.ChipVersion, generation), 1)
    return float(info.bf16_ops_per_second), float(info.mem_bw_bytes_per_second)


def forward_cost(n: int, t: int, d: int, block_q: int, block_k: int, dtype: str, causal: bool):
    """The forward kernel's work by block: FLOPs, HBM bytes, VMEM, for N = B * H heads.

    Each computed (i, j) block does two (bq x bk x D) matmuls: 4 bq bk D FLOPs (and bq bk
    exps). HBM: q read once, each needed k and v block read once per q block (a skipped block
    is not fetched: its index is clamped), O written once, L (f32) written once.
    """
    itemsize = np.dtype(dtype).itemsize
    status = block_status(t, block_q, block_k, causal)
    computed = sum(row["status"] != "skipped" for row in status)
    flops = 4 * n * computed * block_q * block_k * d
    kv_bytes = 2 * n * computed * block_k * d * itemsize
    hbm = kv_bytes + 2 * n * t * d * itemsize + n * t * 4
    vmem = BUFFERS * (2 * block_q + 2 * block_k) * d * itemsize + (block_q * d + 2 * block_q) * 4
    return {
        "blocks run": computed * n,
        "blocks skipped": (len(status) - computed) * n,
        "FLOPs": flops,
        "HBM bytes": hbm,
        "intensity (FLOP/byte)": flops / hbm,
        "VMEM (KiB)": vmem / 2**10,
    }


def block_size_rows(n: int, t: int, d: int, dtype: str, causal: bool) -> list[dict]:
    """The cost model for every allowed square block size b = bq = bk that divides T, with
    the v5e roofline bound: time >= max(FLOPs / peak, bytes / bandwidth) (a model)."""
    peak, bandwidth = _peaks()
    rows = []
    for b in BLOCK_SIZES:
        if b > t or tiling.block_problem("q", (t, d), (b, d), dtype) is not None:
            continue
        cost = forward_cost(n, t, d, b, b, dtype, causal)
        compute_s, memory_s = cost["FLOPs"] / peak, cost["HBM bytes"] / bandwidth
        rows.append(
            {
                "block (bq = bk)": b,
                **cost,
                "v5e roofline (us)": 1e6 * max(compute_s, memory_s),
                "bound": "compute" if compute_s >= memory_s else "memory",
            }
        )
    return rows


def ridge_point() -> float:
    """The v5e ridge, bf16 FLOP/s over HBM bytes/s (FLOP/byte)."""
    peak, bandwidth = _peaks()
    return peak / bandwidth


def model_bytes(n: int, t: int, d: int, dtype: str) -> dict[str, int]:
    """Live bytes per chip at least, a model: both read q, k, v and write O (and the kernel its
    f32 L); XLA's attention also materializes the T x T scores (f32) in HBM."""
    io = 4 * n * t * d * np.dtype(dtype).itemsize
    return {"flash kernel": io + n * t * 4, "XLA attention": io + n * t * t * 4}


def compile_rows(
    n: int, ts: tuple[int, ...], d: int, block_q: int, block_k: int, dtype: str, causal: bool
) -> list[dict]:
    """Compile the kernel (Mosaic) and mha_reference (XLA) for TOPOLOGY at each T in ``ts``:
    one row per (program, T) with the TPU compiler's memory_analysis (one chip)."""
    cfg = flash_attention.Config(block_q, block_k, causal)
    rows = []
    for t in ts:
        model = model_bytes(n, t, d, dtype)
        for name, kernel in (("flash kernel", True), ("XLA attention", False)):
            report, has_call = flash_attention.compile_for_topology(
                TOPOLOGY, (1, n, t, d), cfg, jnp.dtype(dtype), kernel=kernel
            )
            memory = report.memory
            rows.append(
                {
                    "program": name,
                    "T": t,
                    "device kind": report.device_kind,
                    "Mosaic kernel in HLO": ("yes" if has_call else "no") if kernel else "-",
                    "arguments (MiB)": memory["argument_size_in_bytes"] / 2**20,
                    "temporaries (MiB)": memory["temp_size_in_bytes"] / 2**20,
                    "peak (MiB)": memory["peak_memory_in_bytes"] / 2**20,
                    "model, at least (MiB)": model[name] / 2**20,
                }
            )
    return rows


BLOCK_SWEEP = (128, 256, 512)  # block sizes (bq = bk) the compile sweep tries at one T


def block_compile_rows(
    n: int, t: int, d: int, dtype: str, causal: bool, blocks: tuple[int, ...] = BLOCK_SWEEP
) -> list[dict]:
    """The Mosaic compile of the forward kernel for TOPOLOGY at each block size (bq = bk) that
    the tiling rule allows at T: one chip's compile-time memory (HBM bytes the compiler
    reports: arguments, temporaries, peak; the kernel's generated code) beside the VMEM the
    block specs ask for (forward_cost's model: XLA's memory_analysis carries no VMEM figure
    for a Mosaic kernel). Compile-time evidence, nothing runs."""
    rows = []
    for block in blocks:
        if t % block or tiling.block_problem("q and O", (t, d), (block, d), dtype) is not None:
            continue
        cfg = flash_attention.Config(block, block, causal)
        report, has_call = flash_attention.compile_for_topology(
            TOPOLOGY, (1, n, t, d), cfg, jnp.dtype(dtype), kernel=True
        )
        memory = report.memory
        rows.append(
            {
                "block (bq = bk)": block,
                "T": t,
                "Mosaic kernel in HLO": "yes" if has_call else "no",
                "HBM arguments (MiB), compiled": memory["argument_size_in_bytes"] / 2**20,
                "HBM temporaries (MiB), compiled": memory["temp_size_in_bytes"] / 2**20,
                "HBM peak (MiB), compiled": memory["peak_memory_in_bytes"] / 2**20,
                "generated code (KiB), compiled": memory["generated_code_size_in_bytes"] / 2**10,
                "VMEM (KiB), block-spec model": forward_cost(n, t, d, block, block, dtype, causal)[
                    "VMEM (KiB)"
                ],
            }
        )
    return rows


# The chip's square-block sweep (tpu_scripts/flash_vs_jax.py): causal, B = 1, H = 8, D = 128,
# bfloat16, kept in the benchmark record "flash_vs_jax" as <kernel>_forward_t<T>_square<b>_ms.
TPU_SWEEP = {"heads": 8, "d": 128, "dtype": "bfloat16", "causal": True}
TPU_SWEEP_KERNELS = (("this", "this kernel"), ("jax_flash", "JAX Pallas flash"),
                     ("splash", "splash"))  # fmt: skip


def tpu_block_curve(figures: dict, t: int) -> list[dict]:
    """The measured forward time per square block b = bq = bk at sequence length ``t`` (one row
    per kernel and block in the record's ``figures``), each beside this module's v5e roofline
    bound for the same shape and blocks (forward_cost: the work a block size implies).

    Rows: kernel, block, measured (us), roofline (us), measured / roofline. Empty when the
    record has no sweep at ``t``."""
    peak, bandwidth = _peaks()
    rows = []
    for key, name in TPU_SWEEP_KERNELS:
        for block in (128, 256, 512, 1024):
            measured_ms = figures.get(f"{key}_forward_t{t}_square{block}_ms")
            if measured_ms is None or block > t:
                continue
            cost = forward_cost(
                TPU_SWEEP["heads"], t, TPU_SWEEP["d"], block, block, TPU_SWEEP["dtype"],
                TPU_SWEEP["causal"],
            )  # fmt: skip
            bound_us = 1e6 * max(cost["FLOPs"] / peak, cost["HBM bytes"] / bandwidth)
            rows.append(
                {
                    "kernel": name,
                    "block (bq = bk)": block,
                    "measured on v5e (us)": 1e3 * measured_ms,
                    "v5e roofline (us)": bound_us,
                    "measured / roofline": 1e3 * measured_ms / bound_us,
                }
            )
    return rows
