"""Exercises of the lesson "Reason with HLO and the roofline model": where a matmul sits
against a v5e's ridge point, and the roofline time bound of a sequence of ops.

- ``v5e_peak_fraction`` (predict): the largest share of a v5e's bf16 peak a matmul can reach,
  min(1, intensity / ridge point): its intensity, and which roof binds.
- ``roofline_seconds`` (code): the roofline lower bound of a list of matmuls and elementwise
  ops run one after another, each bound by the slower of computing and moving its bytes.

The assessment bank asks the time bound of one matmul (``performance.roofline_bound``); these
ask around it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.performance._shared import PHASE, _relative_error

GENERATION = "v5e"
BF16_BYTES = 2


def _v5e() -> tuple[float, float]:
    """(bf16 peak FLOP/s, HBM bytes/s) of a v5e, from the course's spec table (its sources)."""
    from core.tpu import specs

    chip = specs.chip(GENERATION)
    return chip.bf16_flops.value, chip.hbm_bandwidth.value


def _v5e_int8_ops() -> float:
    from core.tpu import specs

    return specs.chip(GENERATION).int8_ops.value


def _matmul_intensity(m: int, k: int, n: int, itemsize: int, output: bool = True) -> float:
    """2MNK FLOPs over the bytes of A, B (and C) moved once: the closed form, plain Python."""
    elements = m * k + k * n + (m * n if output else 0)
    return 2.0 * m * n * k / (elements * itemsize)


class V5ePeakFraction(PredictItem):
    """A matmul reaches at most min(peak, intensity x bandwidth): below the ridge point a
    fraction intensity / ridge of the peak, above it all of it."""

    id = "performance.hlo_roofline.v5e_peak_fraction"
    phase = PHASE
    lesson = "hlo_roofline"
    title = "How much of a v5e's peak a matmul can reach"
    units = "% of peak"
    rel_tol = 0.02
    abs_tol = 0.5  # half a percentage point: the answer is a percentage
    hints = (
        "Two numbers decide it: the matmul's arithmetic intensity (FLOPs per byte it moves) and "
        "the chip's ridge point (peak FLOP/s over HBM bytes/s). The lesson's roofline chart "
        "draws both: left of the ridge the roof slopes, right of it it is flat.",
        "Intensity = 2MNK / ((MK + KN + MN) x 2 bytes) in bfloat16: every operand is read once "
        "and the result written once. The v5e's ridge point is 1.97e14 / 8.2e11 FLOP/byte, the "
        "lesson's dashed line.",
        "Attainable FLOP/s = min(peak, intensity x bandwidth), so the share of the peak is "
        "min(1, intensity / ridge): 100% right of the ridge (compute-bound), intensity / ridge "
        "left of it (memory-bound).",
    )
    RATIOS = ((1.5, 6.0), (0.05, 0.67))  # intensity / ridge: compute-bound, memory-bound

    def params(self, generator):
        peak, bandwidth = _v5e()
        ridge = peak / bandwidth
        compute_bound = bool(generator.integers(2))  # both sides of the ridge over the seeds
        low, high = self.RATIOS[0 if compute_bound else 1]
        while True:  # away from the ridge, so calling the wrong roof is another number
            m = int(generator.choice([8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048]))
            # K and N past the lesson's largest slider (2048): its table cannot show the answer
            k = int(generator.choice([3072, 4096, 5120, 8192, 16384]))
            n = int(generator.choice([4096, 6144, 8192, 12288, 16384]))
            ratio = _matmul_intensity(m, k, n, BF16_BYTES) / ridge
            if low <= ratio <= high:
                return {"m": m, "k": k, "n": n}

    def prompt(self, params) -> str:
        peak, bandwidth = _v5e()
        m, k, n = params["m"], params["k"], params["n"]
        return (
            f"A **bfloat16** matmul (M, K) @ (K, N) with **M = {m}, K = {k}, N = {n}** (its "
            f"output bfloat16 too) runs on one TPU **{GENERATION}** chip: bf16 peak "
            f"{peak:.4g} FLOP/s, HBM bandwidth {bandwidth:.4g} B/s (core/tpu/specs.py). Every "
            "operand is read from HBM once and the result written once. **Predict the largest "
            "share of the chip's bf16 peak this matmul can reach, in percent**, by the roofline "
            "model; the lesson's library (core/perf/roofline.py) then places it on the roofline."
        )

    def live(self, params) -> float:
        from core.perf import roofline

        peak, bandwidth = _v5e()
        cost = roofline.matmul_cost(params["m"], params["n"], params["k"], BF16_BYTES)
        return 100.0 * roofline.attainable_flops(cost.intensity, peak, bandwidth) / peak

    def derive(self, params):
        peak, bandwidth = _v5e()
        m, k, n = params["m"], params["k"], params["n"]
        flops = 2.0 * m * n * k
        moved = (m * k + k * n + m * n) * BF16_BYTES
        intensity = flops / moved
        ridge = peak / bandwidth
        value = 100.0 * min(1.0, intensity / ridge)
        side = (
            "right of the ridge: **compute-bound**, the MXUs set the time and the roof is flat"
            if intensity >= ridge
            else "left of the ridge: **memory-bound**, HBM sets the time and the MXUs wait "
            "for bytes"
        )
        return value, (
            f"FLOPs = 2MNK = 2·{m}·{n}·{k} = {flops:.4g}; bytes = (MK + KN + MN)·2 = "
            f"({m * k:,} + {k * n:,} + {m * n:,})·2 = {moved:,}. Intensity = {flops:.4g} / "
            f"{moved:,} = **{intensity:.4g} FLOP/byte**. The {GENERATION}'s ridge point is "
            f"{peak:.4g} / {bandwidth:.4g} = {ridge:.4g} FLOP/byte, so the matmul sits {side}. "
            f"Attainable = min(peak, intensity·bandwidth) = {min(peak, intensity * bandwidth):.4g}"
            f" FLOP/s: **{value:.4g}%** of the peak. A small M (decoding a few tokens) reads the "
            "whole K x N weight for few FLOPs: its intensity is about M, and it stays "
            "memory-bound until M passes the ridge."
        )

    def wrong(self, params, expected):
        peak, bandwidth = _v5e()
        ridge = peak / bandwidth
        m, k, n = params["m"], params["k"], params["n"]
        intensity = _matmul_intensity(m, k, n, BF16_BYTES)

        def share(value: float) -> float:
            return 100.0 * min(1.0, value / ridge)

        wrong = {
            "intensity / ridge, uncapped (the flat roof forgotten)": 100.0 * intensity / ridge,
            "bits for bytes (intensity 8x too low)": share(intensity / 8),
            "float32's 4 bytes an element": share(intensity / 2),
            "the output write forgotten": share(_matmul_intensity(m, k, n, BF16_BYTES, False)),
            "MNK FLOPs (the 2 forgotten)": share(intensity / 2),
            "compute-bound assumed: 100%": 100.0,
        }
        # The two the seed's side of the ridge always tells apart stay; others only where they
        # give another number (a byte mistake changes nothing far right of the ridge).
        return {
            name: value
            for name, value in wrong.items()
            if abs(value - expected) > 2.5 * max(self.abs_tol, self.rel_tol * abs(expected))
        }


_ROOFLINE_STUB = '''\
def roofline_seconds(ops, peak_flops, bandwidth):
    """The roofline lower bound, in seconds, of running ``ops`` one after another on one chip.

    ops: a list of dicts, each one op that reads its inputs from memory once and writes its
    output to memory once (nothing is fused, nothing stays on chip between two ops):
      {"op": "matmul", "m": M, "k": K, "n": N, "bytes_per_element": b}
          (M, K) @ (K, N) -> (M, N), every array b bytes an element;
      {"op": "elementwise", "elements": E, "inputs": I, "flops_per_element": F,
       "bytes_per_element": b}
          reads I arrays of E elements, does F FLOPs per output element, writes E elements.
    peak_flops: FLOP/s the chip can do; bandwidth: bytes/s its memory can move.
    Count FLOPs as the lesson does (a multiply-add is two). Returns a float (0.0 for no ops).
    """
    raise NotImplementedError
'''

_ROOFLINE_SUM = """\
def roofline_seconds(ops, peak_flops, bandwidth):
    total = 0.0
    for op in ops:
        b = op["bytes_per_element"]
        if op["op"] == "matmul":
            m, k, n = op["m"], op["k"], op["n"]
            flops, moved = 2 * m * n * k, (m * k + k * n + m * n) * b
        else:
            e = op["elements"]
            flops, moved = op["flops_per_element"] * e, (op["inputs"] + 1) * e * b
        total += flops / peak_flops + moved / bandwidth
    return total
"""

_ROOFLINE_BITS = """\
def roofline_seconds(ops, peak_flops, bandwidth):
    total = 0.0
    for op in ops:
        bits = 8 * op["bytes_per_element"]
        if op["op"] == "matmul":
            m, k, n = op["m"], op["k"], op["n"]
            flops, moved = 2 * m * n * k, (m * k + k * n + m * n) * bits
        else:
            e = op["elements"]
            flops, moved = op["flops_per_element"] * e, (op["inputs"] + 1) * e * bits
        total += max(flops / peak_flops, moved / bandwidth)
    return total
"""

_ROOFLINE_NO_OUTPUT = """\
def roofline_seconds(ops, peak_flops, bandwidth):
    total = 0.0
    for op in ops:
        b = op["bytes_per_element"]
        if op["op"] == "matmul":
            m, k, n = op["m"], op["k"], op["n"]
            flops, moved = 2 * m * n * k, (m * k + k * n) * b
        else:
            e = op["elements"]
            flops, moved = op["flops_per_element"] * e, op["inputs"] * e * b
        total += max(flops / peak_flops, moved / bandwidth)
    return total
"""

_ROOFLINE_MAX_OF_TOTALS = """\
def roofline_seconds(ops, peak_flops, bandwidth):
    flops, moved = 0.0, 0.0
    for op in ops:
        b = op["bytes_per_element"]
        if op["op"] == "matmul":
            m, k, n = op["m"], op["k"], op["n"]
            flops += 2 * m * n * k
            moved += (m * k + k * n + m * n) * b
        else:
            e = op["elements"]
            flops += op["flops_per_element"] * e
            moved += (op["inputs"] + 1) * e * b
    return max(flops / peak_flops, moved / bandwidth)
"""

_ROOFLINE_MNK = """\
def roofline_seconds(ops, peak_flops, bandwidth):
    total = 0.0
    for op in ops:
        b = op["bytes_per_element"]
        if op["op"] == "matmul":
            m, k, n = op["m"], op["k"], op["n"]
            flops, moved = m * n * k, (m * k + k * n + m * n) * b
        else:
            e = op["elements"]
            flops, moved = op["flops_per_element"] * e, (op["inputs"] + 1) * e * b
        total += max(flops / peak_flops, moved / bandwidth)
    return total
"""

# Every bound is a handful of float64 products and quotients of integers below 2^53 and a sum
# of at most a few terms: any order of evaluation agrees to ~1e-15; 1e-9 leaves room for a
# learner's float32-free but differently ordered arithmetic and still catches every mistake
# (the smallest planted one changes a case by more than 1%).
ROOFLINE_RTOL = 1e-9


def roofline_reference(ops, peak_flops: float, bandwidth: float) -> float:
    """Σ over ops of max(FLOPs / peak, bytes / bandwidth), float64 NumPy: the independent
    closed form (each op on its own roof; the ops run one after another)."""
    seconds = np.zeros(len(ops), np.float64)
    for i, op in enumerate(ops):
        width = np.float64(op["bytes_per_element"])
        if op["op"] == "matmul":
            m, k, n = (np.float64(op[key]) for key in ("m", "k", "n"))
            flops, moved = 2 * m * n * k, (m * k + k * n + m * n) * width
        else:
            elements = np.float64(op["elements"])
            flops = np.float64(op["flops_per_element"]) * elements
            moved = (np.float64(op["inputs"]) + 1) * elements * width
        seconds[i] = np.maximum(flops / np.float64(peak_flops), moved / np.float64(bandwidth))
    return float(seconds.sum())


def _matmul(m: int, k: int, n: int, width: int) -> dict:
    return {"op": "matmul", "m": m, "k": k, "n": n, "bytes_per_element": width}


def _elementwise(elements: int, inputs: int, flops: int, width: int) -> dict:
    return {
        "op": "elementwise",
        "elements": elements,
        "inputs": inputs,
        "flops_per_element": flops,
        "bytes_per_element": width,
    }


class RooflineSeconds(CodeItem):
    id = "performance.hlo_roofline.roofline_seconds"
    phase = PHASE
    lesson = "hlo_roofline"
    title = "The roofline bound of a sequence of ops"
    function_name = "roofline_seconds"
    stub = _ROOFLINE_STUB
    solution_module = "core.exercises.solutions.roofline_seconds"
    hints = (
        "One op at a time: its FLOPs, its bytes, then the time each needs on this chip. Which "
        "of the two times bounds the op? Then: ops that run one after another add up.",
        "A matmul: 2MNK FLOPs, (MK + KN + MN) elements moved (the output is written too). "
        "Elementwise: F·E FLOPs, (I + 1)·E elements moved. Multiply elements by "
        "bytes_per_element (bytes, not bits).",
        "Each op takes at least max(FLOPs / peak_flops, bytes / bandwidth), not the sum: "
        "compute and memory traffic overlap. The sequence's bound is the sum of the ops' "
        "bounds, not one max over the totals (a memory-bound op cannot use the bandwidth a "
        "compute-bound op leaves idle).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `roofline_seconds(ops, peak_flops, bandwidth)`: the lesson's roofline "
            "bound, for a short program of matmuls and elementwise ops, each run on its own. "
            "The hidden tests call it on seeded programs on a v5e's figures and on a CPU's "
            "(a decoder's MLP block, a compute-bound matmul beside elementwise work, one op "
            "alone, no ops at all, and a 65536-cubed int8 matmul) and compare with a float64 "
            f"NumPy reference: relative error at most {ROOFLINE_RTOL:g}."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "compute and memory time added, not max": _ROOFLINE_SUM,
            "bits for bytes": _ROOFLINE_BITS,
            "the output write forgotten": _ROOFLINE_NO_OUTPUT,
            "one max over the program's totals (as if fused)": _ROOFLINE_MAX_OF_TOTALS,
            "MNK FLOPs (the 2 forgotten)": _ROOFLINE_MNK,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        peak, bandwidth = _v5e()
        cpu_peak = float(generator.uniform(0.5e11, 3e11))  # a few cores' f32 FLOP/s
        cpu_bandwidth = float(generator.uniform(1e10, 4e10))

        def pick(*values):
            return int(generator.choice(values))

        tokens, model = pick(4, 8, 16, 32), pick(1024, 2048, 4096)
        hidden = model * pick(3, 4)
        decoder = [  # decoding a few tokens: memory-bound matmuls and activation
            _matmul(tokens, model, hidden, BF16_BYTES),
            _elementwise(tokens * hidden, 1, pick(6, 8, 10), BF16_BYTES),
            _matmul(tokens, hidden, model, BF16_BYTES),
        ]
        size = pick(2048, 4096, 8192)
        mixed = [  # a compute-bound matmul, then memory-bound elementwise work
            _matmul(size, size, size, BF16_BYTES),
            _elementwise(size * size, 2, 1, BF16_BYTES),
            _elementwise(size * size, 1, pick(1, 4), BF16_BYTES),
        ]
        single = [_elementwise(pick(1000, 4096, 100_000) * 3, 3, pick(2, 3), 4)]
        cases = [
            ("a decoder's MLP block on a v5e", decoder, peak, bandwidth),
            ("a compute-bound matmul beside elementwise ops, v5e", mixed, peak, bandwidth),
            ("the same program on a CPU", mixed, cpu_peak, cpu_bandwidth),
            ("one float32 elementwise op on a CPU", single, cpu_peak, cpu_bandwidth),
            ("no ops at all", [], peak, bandwidth),
            (
                "a 65536-cubed int8 matmul and its int8 ReLU (large counts)",
                [_matmul(65536, 65536, 65536, 1), _elementwise(65536 * 65536, 1, 1, 1)],
                _v5e_int8_ops(),  # a v5e's int8 OP/s (twice its bf16 FLOP/s)
                bandwidth,
            ),
        ]
        return [self._compare(function, *case) for case in cases]

    def _compare(self, function, name, ops, peak, bandwidth) -> HiddenTest:
        expected = roofline_reference(ops, peak, bandwidth)
        got = function([dict(op) for op in ops], peak, bandwidth)
        error, why = _relative_error(got, expected)
        if error is None:
            return HiddenTest(name, False, why)
        return HiddenTest(
            name,
            bool(error <= ROOFLINE_RTOL),
            f"you returned {float(got):.6g} s; relative error {error:.1e} (tolerance "
            f"{ROOFLINE_RTOL:g}) at peak {peak:.3g} FLOP/s, bandwidth {bandwidth:.3g} B/s",
        )
