"""Exercises of the lesson "A first TPU kernel": the VMEM the TPU-style matmul holds for a
block configuration, and a matmul kernel body with a fused bias and ReLU epilogue."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.pallas._shared import PHASE, as_float64, wrong_blocks

KIB = 2**10
V5E_SCOPED_KIB = 16 * 2**10  # Mosaic's default scoped VMEM on v5e (core/kernels/vmem.py)


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2}[dtype]


class KernelVmem(PredictItem):
    """Double-buffered x, y and out blocks, plus one f32 accumulator (not buffered)."""

    id = "pallas.first_tpu_kernel.kernel_vmem"
    phase = PHASE
    lesson = "first_tpu_kernel"
    title = "VMEM the TPU-style matmul holds"
    units = "KiB"
    rel_tol = 0.02
    hints = (
        "List what sits in VMEM while a program runs: a block of x, a block of y, a block of "
        "the output, and the scratch. The pipeline keeps more than one copy of some of them.",
        "The BlockSpec pipeline double-buffers every operand (x, y and out: two copies each, "
        "one being filled while the body reads the other); the scratch accumulator is one "
        "buffer, and it is float32 whatever the inputs are.",
        "2 x (bm·bk + bk·bn + bm·bn) x (bytes per element) + bm·bn x 4, divided by 1024.",
    )

    def params(self, generator):
        return {
            # bm and bn past the app's sliders (at most 1024): its VMEM table cannot show the
            # answer; bk <= 512: every planted mistake lies more than 2% away
            "bm": int(generator.choice([1152, 1536, 2048])),
            "bk": int(generator.choice([256, 512])),
            "bn": int(generator.choice([1152, 1536, 2048])),
            "dtype": str(generator.choice(["bfloat16", "float32"])),
        }

    def prompt(self, params) -> str:
        bm, bk, bn, dtype = params["bm"], params["bk"], params["bn"], params["dtype"]
        return (
            f"The lesson's TPU-style matmul runs with **{dtype}** x, y and output, blocks "
            f"**bm = {bm}, bk = {bk}, bn = {bn}**, its BlockSpecs pipelined as Pallas does by "
            "default, and its `pltpu.VMEM((bm, bn), jnp.float32)` accumulator.\n\n"
            "**Predict the VMEM the kernel holds, in KiB** (1 KiB = 1024 bytes); the lesson's "
            "library then adds it up."
        )

    def live(self, params) -> float:
        from core.lessons.pallas import first_tpu_kernel

        parts = first_tpu_kernel.vmem_bytes(
            params["bm"], params["bk"], params["bn"], params["dtype"]
        )
        return parts["total"] / KIB

    def derive(self, params):
        bm, bk, bn, dtype = params["bm"], params["bk"], params["bn"], params["dtype"]
        size = _itemsize(dtype)
        blocks = bm * bk + bk * bn + bm * bn
        value = (2 * blocks * size + 4 * bm * bn) / KIB
        return value, (
            f"One block each of x ({bm} x {bk}), y ({bk} x {bn}) and out ({bm} x {bn}) is "
            f"{blocks:,} elements, {blocks * size:,} bytes in {dtype}. The pipeline holds two "
            "of each (it copies the next block in while the body works on this one): "
            f"{2 * blocks * size:,} bytes. The accumulator is one ({bm}, {bn}) float32 buffer, "
            f"{4 * bm * bn:,} bytes, whatever the input type. Total "
            f"{2 * blocks * size + 4 * bm * bn:,} bytes = **{value:g} KiB**, "
            f"{100 * value / V5E_SCOPED_KIB:.0f}% of the 16 MiB that Mosaic grants a kernel by "
            "default on v5e (the next lesson weighs what larger blocks buy, and what they cost)."
        )

    def wrong(self, params, expected):
        bm, bk, bn, dtype = params["bm"], params["bk"], params["bn"], params["dtype"]
        size = _itemsize(dtype)
        blocks = bm * bk + bk * bn + bm * bn
        found = {
            "one buffer per block (double buffering forgotten)": (blocks * size + 4 * bm * bn)
            / KIB,
            "the accumulator forgotten": 2 * blocks * size / KIB,
            "only the inputs double-buffered (the output block forgotten)": (
                2 * (bm * bk + bk * bn) * size + 4 * bm * bn
            )
            / KIB,
            "bytes, not KiB": expected * KIB,
        }
        if size != 4:
            found["the accumulator in bfloat16, like the inputs"] = (
                2 * blocks * size + 2 * bm * bn
            ) / KIB
            found["4 bytes per bfloat16 element"] = (2 * blocks * 4 + 4 * bm * bn) / KIB
        return found


_FUSED_STUB = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, y_ref, b_ref, o_ref, acc_ref):
    """Program (i, j, k) of the grid (M/bm, N/bn, K/bk) sees x block (i, k), (bm, bk); y block
    (k, j), (bk, bn); the bias block j, (1, bn); output block (i, j), (bm, bn); and acc_ref,
    a (bm, bn) float32 scratch buffer in VMEM that keeps its contents from one program to
    the next (k runs fastest). Make output block (i, j) = ReLU(x[i, :] @ y[:, j] + b[j]).
    """
    raise NotImplementedError


def matmul_bias_relu(x_MK, y_KN, b_1N, bm, bk, bn):
    """ReLU(x_MK @ y_KN + b_1N), (M, N), as one pallas_call on the grid (M/bm, N/bn, K/bk)
    with an f32 accumulator in VMEM scratch (interpret=True: this runs on the CPU)."""
    (m, k), (_, n) = x_MK.shape, y_KN.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x_MK.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=True,
    )(x_MK, y_KN, b_1N)
'''

# float32 products summed over K <= 384 against float64: a few ulps of the largest output
# (3e-7 of it measured). 1e-5 leaves 30x headroom; every planted mistake is off by far more.
FUSED_TOLERANCE = 1e-5


def matmul_bias_relu_reference(x_MK, y_KN, b_1N) -> np.ndarray:
    """max(x @ y + b, 0) in float64, with NumPy."""
    x, y, b = (np.asarray(a, np.float64) for a in (x_MK, y_KN, b_1N))
    return np.maximum(x @ y + b, 0.0)


class MatmulBiasRelu(CodeItem):
    id = "pallas.first_tpu_kernel.matmul_bias_relu"
    phase = PHASE
    lesson = "first_tpu_kernel"
    title = "A matmul kernel with a fused bias and ReLU"
    function_name = "matmul_bias_relu"
    stub = _FUSED_STUB
    solution_module = "core.exercises.solutions.matmul_bias_relu"
    hints = (
        "Three things happen in the body, each at its own k: zero the accumulator on the "
        "first step, add this step's block product on every step, and on the last step turn "
        "the finished sum into the output. pl.program_id(2) is k, pl.num_programs(2) the "
        "number of k steps.",
        "The bias and the ReLU belong to the finished sum, not to a partial one: "
        "ReLU(a + b) is not ReLU(a) + ReLU(b), and a bias added on every k step is counted "
        "K / bk times. Without the zeroing, acc_ref still holds the previous output block's "
        "sum (interpret mode fills it with NaN at the start).",
        "@pl.when(k == 0): acc_ref[...] = jnp.zeros_like(acc_ref); then acc_ref[...] += "
        "jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32); then "
        "@pl.when(k == pl.num_programs(2) - 1): o_ref[...] = jnp.maximum(acc_ref[...] + "
        "b_ref[...], 0.0).astype(o_ref.dtype).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Write the body of `_kernel` so that `matmul_bias_relu` computes "
            "ReLU(x @ y + b), the lesson's TPU-style matmul with the bias and the activation "
            "fused in (one pass over the output instead of three). The `pallas_call` is "
            "written. The hidden tests run it in interpret mode on float32 inputs: several "
            "output blocks and K steps, one K step only (bk = K), a bias large enough to "
            "switch most outputs off or on, and inputs around ±1e4; they compare with "
            f"float64 NumPy (error at most {FUSED_TOLERANCE:g} of the largest output)."
        )

    def planted_wrong(self) -> dict[str, str]:
        solution = self.reference_source()
        init = (
            "    @pl.when(k == 0)\n    def _init():\n"
            "        acc_ref[...] = jnp.zeros_like(acc_ref)\n\n"
        )
        step = "acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)"
        epilogue = "out = jnp.maximum(acc_ref[...] + b_ref[...], 0.0)"
        last = "@pl.when(k == pl.num_programs(2) - 1)"
        for text in (init, step, epilogue, last):
            assert text in solution, f"the reference no longer holds {text!r}"
        relu_step = step.replace("+= jnp.dot(", "+= jnp.maximum(jnp.dot(") + ", 0.0)"
        return {
            "no zeroing at k == 0 (the accumulator carries the last block's sum)": (
                solution.replace(init, "")
            ),
            "the bias added on every k step": solution.replace(
                step, step + " + b_ref[...]"
            ).replace(epilogue, "out = jnp.maximum(acc_ref[...], 0.0)"),
            "ReLU on every partial product": solution.replace(step, relu_step),
            "the epilogue at k == 0, not at the last k": solution.replace(last, "@pl.when(k == 0)"),
            "ReLU before the bias": solution.replace(
                epilogue, "out = jnp.maximum(acc_ref[...], 0.0) + b_ref[...]"
            ),
        }

    def cases(self, seed: int) -> list[tuple[str, tuple, tuple[int, int, int]]]:
        """(name, (x, y, b), (bm, bk, bn)): float32 inputs, blocks that divide."""
        generator = rng(self.id + "/inputs", seed)

        def normal(*shape, scale=1.0):
            return (scale * generator.normal(size=shape)).astype(np.float32)

        big_bias = float(generator.uniform(20.0, 40.0))
        return [
            (
                "2 x 2 output blocks, 3 steps along K",
                (normal(16, 384), normal(384, 256), normal(1, 256)),
                (8, 128, 128),
            ),
            (
                "one step along K (bk = K): zeroing and epilogue in the same program",
                (normal(16, 256), normal(256, 256), normal(1, 256)),
                (8, 256, 128),
            ),
            (
                f"a bias of about ±{big_bias:.0f}: most outputs clipped to 0 or lifted",
                (
                    normal(8, 256),
                    normal(256, 384),
                    (big_bias * generator.choice([-1.0, 1.0], size=(1, 384))).astype(np.float32),
                ),
                (8, 128, 128),
            ),
            (
                "inputs around ±1e4 (outputs around 1e9)",
                (normal(8, 256, scale=1e4), normal(256, 256, scale=1e4), normal(1, 256)),
                (8, 128, 128),
            ),
        ]

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        return [self._compare(function, *case) for case in self.cases(seed)]

    def _compare(self, function, name, inputs, blocks) -> HiddenTest:
        x, y, b = inputs
        bm, bk, bn = blocks
        label = f"{name}: x {x.shape} @ y {y.shape}, blocks bm={bm}, bk={bk}, bn={bn}"
        expected = matmul_bias_relu_reference(x, y, b)
        got, why = as_float64(function(x, y, b, bm, bk, bn), "the result")
        if got is None:
            return HiddenTest(label, False, why)
        if got.shape != expected.shape:
            return HiddenTest(
                label, False, f"returned shape {got.shape}; expected {expected.shape}"
            )
        scale = max(float(np.max(np.abs(expected))), 1.0)
        difference = np.abs(got - expected)
        bad = ~(difference <= FUSED_TOLERANCE * scale)  # NaN counts as wrong
        error = float(np.max(np.where(np.isnan(difference), np.inf, difference))) / scale
        return HiddenTest(
            label,
            not bad.any(),
            f"largest error {error:.1e} of the largest output {scale:.4g} "
            f"(tolerance {FUSED_TOLERANCE:g}){wrong_blocks(bad, (bm, bn))}",
        )
