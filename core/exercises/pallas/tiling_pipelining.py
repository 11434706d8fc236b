"""Exercises of the lesson "Tiling, memory, and pipelining": the HBM bytes a blocked matmul
moves for its block sizes, and a double-buffered DMA loop written by hand."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.pallas._shared import PHASE, as_float64

MIB = 2**20


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2}[dtype]


class HbmTraffic(PredictItem):
    """Each program of the grid (i, j, k) copies in an x block and a y block; the output
    block is written once: x is read N/bn times, y M/bm times."""

    id = "pallas.tiling_pipelining.hbm_traffic"
    phase = PHASE
    lesson = "tiling_pipelining"
    title = "HBM bytes a blocked matmul moves"
    units = "MiB"
    rel_tol = 0.02
    hints = (
        "Count copies, not arithmetic: every program (i, j, k) copies one x block and one y "
        "block from HBM into VMEM; an output block goes back once, after its last k step.",
        "Over the grid, each x block (i, k) is copied once for every j, so the whole x is "
        "read N / bn times; each y block (k, j) once for every i, so y is read M / bm times.",
        "(M·K·N/bn + K·N·M/bm + M·N) elements x bytes per element, divided by 2²⁰. A larger "
        "bn means fewer reads of x; a larger bm, fewer of y.",
    )
    MISTAKE_GAP = 0.04  # every planted mistake lies at least 4% from the answer

    @staticmethod
    def _count(p, x_reads, y_reads, out_writes=1, size=None) -> float:
        m, k, n = p["m"], p["k"], p["n"]
        size = _itemsize(p["dtype"]) if size is None else size
        return (m * k * x_reads + k * n * y_reads + m * n * out_writes) * size / MIB

    def _wrong_values(self, p) -> dict[str, float]:
        m, k, n, bm, bk, bn = (p[key] for key in ("m", "k", "n", "bm", "bk", "bn"))
        right = self._count(p, n // bn, m // bm)
        found = {
            "x and y read once each (the grid's re-reads forgotten)": self._count(p, 1, 1),
            "the re-reads swapped: x read M/bm times, y N/bn times": self._count(
                p, m // bm, n // bn
            ),
            "the output written on every k step": self._count(p, n // bn, m // bm, k // bk),
            "MB (10⁶ bytes), not MiB": right * MIB / 1e6,
        }
        if p["dtype"] == "bfloat16":
            found["4 bytes per bfloat16 element"] = self._count(p, n // bn, m // bm, size=4)
        return found

    def params(self, generator):
        while True:  # shapes whose planted mistakes all lie clearly away from the answer
            p = {
                "m": int(generator.choice([1024, 2048, 4096])),
                "k": int(generator.choice([1024, 2048, 4096])),
                "n": int(generator.choice([1024, 2048, 4096])),
                "bm": int(generator.choice([128, 256, 512])),
                "bk": int(generator.choice([256, 512])),
                "bn": int(generator.choice([256, 512, 1024])),
                "dtype": str(generator.choice(["bfloat16", "float32"])),
            }
            right = self._count(p, p["n"] // p["bn"], p["m"] // p["bm"])
            square = p["m"] == p["k"] == p["n"]  # the app's roofline table shows m = k = n
            if not square and all(
                abs(w - right) > self.MISTAKE_GAP * right for w in self._wrong_values(p).values()
            ):
                return p

    def prompt(self, params) -> str:
        p = params
        return (
            f"The lesson's blocked matmul x ({p['m']}, {p['k']}) @ y ({p['k']}, {p['n']}) in "
            f"**{p['dtype']}**, with blocks **bm = {p['bm']}, bk = {p['bk']}, bn = {p['bn']}** "
            "on the grid (M/bm, N/bn, K/bk): every program copies its x block and its y block "
            "from HBM into VMEM, and each output block is written back once.\n\n"
            "**Predict the bytes the grid moves between HBM and VMEM, in MiB** (2²⁰ bytes); "
            "the lesson's roofline model then counts them."
        )

    def live(self, params) -> float:
        from core.lessons.pallas import tiling_pipelining

        p = params
        traffic = tiling_pipelining.hbm_traffic_bytes(
            p["m"], p["k"], p["n"], p["bm"], p["bk"], p["bn"], p["dtype"]
        )
        return traffic / MIB

    def derive(self, params):
        p = params
        m, k, n, bm, bn = p["m"], p["k"], p["n"], p["bm"], p["bn"]
        size = _itemsize(p["dtype"])
        x_reads, y_reads = n // bn, m // bm
        value = self._count(p, x_reads, y_reads)
        ideal = self._count(p, 1, 1)
        return value, (
            f"The grid is ({m // bm}, {n // bn}, {k // p['bk']}). x block (i, k) is copied "
            f"by every program (i, j, k), once per j: x is read N/bn = {x_reads} times, "
            f"{m * k * x_reads:,} elements. y block (k, j) once per i: y is read M/bm = "
            f"{y_reads} times, {k * n * y_reads:,} elements. The output is written once, "
            f"{m * n:,} elements. In all {m * k * x_reads + k * n * y_reads + m * n:,} elements "
            f"x {size} bytes = **{value:.6g} MiB**, where reading each array once would move "
            f"{ideal:.6g} MiB: the block sizes, not the matmul, decide the traffic. bk does "
            "not appear (it sets how the K sum is cut, not how often a value is read)."
        )

    def wrong(self, params, expected):
        return self._wrong_values(params)


_STREAM_STUB = '''\
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_hbm, o_ref, buf, sem, *, chunk, n_chunks):
    """out = x ** 2, x streamed from HBM chunk by chunk through a double buffer.

    x_hbm: the whole (R, K) x, left in HBM: the kernel may only copy from it, with
    pltpu.make_async_copy(x_hbm.at[pl.ds(start_row, chunk)], buf.at[slot], sem.at[slot]),
    then .start() and, before reading buf.at[slot], .wait(). o_ref: the whole (R, K) output,
    in VMEM. buf: (2, chunk, K) VMEM, two slots. sem: two DMA semaphores, one per slot.
    While chunk i is squared, the copy of chunk i + 1 must already be running (into the
    slot chunk i is not using). Loop over the chunks with jax.lax.fori_loop.
    """
    raise NotImplementedError


def stream_square(x_RK, chunk):
    """x_RK ** 2, with x left in HBM and streamed through a two-slot VMEM buffer in DMAs of
    ``chunk`` rows (interpret=True: this runs on the CPU). ``chunk`` divides R."""
    r, k = x_RK.shape
    return pl.pallas_call(
        functools.partial(_kernel, chunk=chunk, n_chunks=r // chunk),
        out_shape=jax.ShapeDtypeStruct((r, k), x_RK.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],  # stays in HBM: the kernel copies it
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),  # the whole output, in VMEM
        scratch_shapes=[
            pltpu.VMEM((2, chunk, k), x_RK.dtype),  # two slots of one chunk each
            pltpu.SemaphoreType.DMA((2,)),  # one DMA semaphore per slot
        ],
        interpret=True,
    )(x_RK)
'''

# x² in float32 is x² in float64 rounded once: half an ulp, 6e-8 of the value. 1e-6 of the
# largest value leaves room; a wrong chunk is off by the values themselves.
STREAM_TOLERANCE = 1e-6


def stream_square_reference(x_RK) -> np.ndarray:
    """x ** 2 in float64, with NumPy."""
    x = np.asarray(x_RK, np.float64)
    return x * x


class StreamSquare(CodeItem):
    id = "pallas.tiling_pipelining.stream_square"
    phase = PHASE
    lesson = "tiling_pipelining"
    title = "A double-buffered DMA loop by hand"
    function_name = "stream_square"
    stub = _STREAM_STUB
    solution_module = "core.exercises.solutions.stream_square"
    hints = (
        "Write a helper copy(i, slot) that builds the descriptor for chunk i into a slot "
        "(rows i * chunk to i * chunk + chunk of x_hbm). Start chunk 0 before the loop; in "
        "step i, start chunk i + 1 (if there is one), wait for chunk i, then square it.",
        "Chunk i lives in slot i % 2, so chunk i + 1 goes into the other slot, 1 - i % 2: "
        "the slot chunk i - 1 used, which step i - 1 has finished reading. One slot for "
        "both would overwrite chunk i before it is read. pl.ds takes a start ROW: "
        "pl.ds(i * chunk, chunk), not pl.ds(i, chunk).",
        "copy(0, 0).start(); in step(i, carry): slot = i % 2; "
        "@pl.when(i + 1 < n_chunks) start copy(i + 1, 1 - slot); copy(i, slot).wait(); "
        "o_ref[pl.ds(i * chunk, chunk), :] = buf[slot] * buf[slot]; return carry. Then "
        "jax.lax.fori_loop(0, n_chunks, step, 0).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Write the body of `_kernel` so that `stream_square` returns x², with x left in "
            "HBM and copied into VMEM chunk by chunk with explicit DMAs, the copy of the next "
            "chunk running while this one is squared (the lesson's pipeline by hand, for "
            "another computation). The `pallas_call` is written. The hidden tests run it in "
            "interpret mode on float32 arrays: eight chunks, an odd number of chunks, a "
            "single chunk (nothing to prefetch), and values up to ±1e18; they compare with "
            f"float64 NumPy (error at most {STREAM_TOLERANCE:g} of the largest value)."
        )

    def planted_wrong(self) -> dict[str, str]:
        solution = self.reference_source()
        prefetch = "copy(i + 1, 1 - slot).start()"
        rows = "rows = pl.ds(i * chunk, chunk)  # rows, not chunks"
        square = "o_ref[rows, :] = buf[slot] * buf[slot]"
        slot = "slot = i % 2"
        for text in (prefetch, rows, square, slot):
            assert text in solution, f"the reference no longer holds {text!r}"
        return {
            "one slot for both: the next chunk overwrites this one before it is read": (
                solution.replace(slot, "slot = 0  # one buffer").replace(
                    prefetch, "copy(i + 1, slot).start()"
                )
            ),
            "the prefetch copies chunk i again, not chunk i + 1": solution.replace(
                prefetch, "copy(i, 1 - slot).start()"
            ),
            "pl.ds(i, chunk): the copy starts at row i, not at row i * chunk": solution.replace(
                rows, "rows = pl.ds(i, chunk)  # rows, not chunks"
            ),
            "the square read from the other slot (the chunk in flight)": solution.replace(
                square, "o_ref[rows, :] = buf[1 - slot] * buf[1 - slot]"
            ),
        }

    def cases(self, seed: int) -> list[tuple[str, np.ndarray, int]]:
        """(name, x, chunk): float32 (R, 128); chunks of whole (8, 128) tiles."""
        generator = rng(self.id + "/inputs", seed)

        def normal(rows, scale=1.0):
            return (scale * generator.normal(size=(rows, 128))).astype(np.float32)

        chunk = int(generator.choice([16, 32]))
        return [
            ("eight chunks", normal(8 * chunk), chunk),
            ("three chunks (an odd number)", normal(3 * chunk), chunk),
            ("one chunk: nothing to prefetch", normal(64), 64),
            ("values up to ±1e18 (squares up to 1e36)", normal(4 * chunk, scale=2e17), chunk),
        ]

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        return [self._compare(function, *case) for case in self.cases(seed)]

    def _compare(self, function, name, x, chunk) -> HiddenTest:
        label = f"{name}: x {x.shape}, chunk {chunk} rows ({x.shape[0] // chunk} DMAs)"
        expected = stream_square_reference(x)
        got, why = as_float64(function(x, chunk), "the result")
        if got is None:
            return HiddenTest(label, False, why)
        if got.shape != expected.shape:
            return HiddenTest(
                label, False, f"returned shape {got.shape}; expected {expected.shape}"
            )
        scale = max(float(np.max(np.abs(expected))), 1.0)
        difference = np.abs(got - expected)
        bad_rows = np.nonzero(~(difference <= STREAM_TOLERANCE * scale).all(axis=1))[0]
        error = float(np.max(np.where(np.isnan(difference), np.inf, difference))) / scale
        chunks = sorted({int(r) // chunk for r in bad_rows})
        where = f"; wrong chunks: {chunks}" if chunks else ""
        return HiddenTest(
            label,
            bad_rows.size == 0,
            f"largest error {error:.1e} of the largest value {scale:.4g} "
            f"(tolerance {STREAM_TOLERANCE:g}){where}",
        )
