"""Exercises of the lesson communication_algorithms: what a gradient all-reduce sends.

- ``microbatch_allreduce_bytes`` (predict): the bytes each device sends per step when every
  microbatch's gradient is all-reduced.
- ``ring_allreduce`` (code): a ring all-reduce (reduce-scatter + all-gather) simulated step by
  step over D buffers, chunk schedule and all.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.distributed._shared import FLOAT32_BYTES, PHASE


class MicrobatchAllReduceBytes(PredictItem):
    """K all-reduces of the whole gradient per step: K · 2(D-1)/D · N · 4 bytes per device."""

    id = "distributed.communication_algorithms.microbatch_allreduce_bytes"
    phase = PHASE
    lesson = "communication_algorithms"
    title = "Bytes sent when every microbatch is all-reduced"
    units = "bytes"
    rel_tol = 0.01
    hints = (
        "Count two things: how many all-reduces one optimizer step runs, and how many bytes "
        "each device sends in one of them. The gradient has one float32 per parameter, "
        "biases included.",
        "A ring all-reduce is a reduce-scatter then an all-gather; in each half a device sends "
        "D - 1 chunks of 1/D of the gradient. Reducing inside the microbatch loop runs it K "
        "times a step.",
        "bytes = K · 2(D - 1)/D · N · 4, with N = F·H + H + H·C + C parameters.",
    )

    def params(self, generator):
        return {
            "features": int(generator.integers(4, 25)),
            # not 16: F=8, H=16, C=4 is the lesson's own MLP, whose bytes its table shows
            "hidden": int(generator.choice([24, 32, 48, 64])),
            "classes": int(generator.integers(2, 11)),
            "devices": int(generator.choice([4, 8])),
            "microbatches": int(generator.integers(2, 9)),
        }

    def prompt(self, params) -> str:
        f, h, c = params["features"], params["hidden"], params["classes"]
        d, k = params["devices"], params["microbatches"]
        return (
            f"The lesson's MLP, `tanh(x @ w1 + b1) @ w2 + b2`, has **F = {f}** features, "
            f"**H = {h}** hidden units and **C = {c}** classes, float32 gradients. It trains "
            f"data parallel on a ring of **D = {d}** devices, each step accumulating **K = {k}** "
            "microbatches, but the code all-reduces every microbatch's gradient inside the "
            "loop instead of the sum after it. **Predict how many bytes each device sends per "
            "optimizer step** (ring algorithm); the lesson's library then computes it."
        )

    def live(self, params) -> float:
        import jax

        from core import distributed

        shapes = jax.eval_shape(
            distributed.init_mlp,
            jax.random.key(0),
            params["features"],
            params["hidden"],
            params["classes"],
        )
        parameters = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
        rows = distributed.strategy_bytes(parameters, params["devices"], params["microbatches"])
        return float(rows[0]["bytes"])

    def _parameters(self, params) -> int:
        f, h, c = params["features"], params["hidden"], params["classes"]
        return f * h + h + h * c + c

    def derive(self, params):
        f, h, c = params["features"], params["hidden"], params["classes"]
        d, k = params["devices"], params["microbatches"]
        n = self._parameters(params)
        one = 2 * (d - 1) / d * n * FLOAT32_BYTES
        value = k * one
        return value, (
            f"N = F·H + H + H·C + C = {f}·{h} + {h} + {h}·{c} + {c} = {n:,} parameters, "
            f"{n * FLOAT32_BYTES:,} bytes of float32 gradient. One ring all-reduce sends "
            f"2(D-1)/D of that from each device (a reduce-scatter and an all-gather, D-1 chunks "
            f"of 1/D each): 2·{d - 1}/{d} · {n * FLOAT32_BYTES:,} = {one:,.0f} bytes. Inside "
            f"the loop it runs K = {k} times a step: **{value:,.0f} bytes**. Accumulating "
            f"first and all-reducing once sends {one:,.0f} bytes, {k}× less, for the same "
            "gradient."
        )

    def wrong(self, params, expected):
        d, k = params["devices"], params["microbatches"]
        f, h, c = params["features"], params["hidden"], params["classes"]
        n = self._parameters(params)
        return {
            "one all-reduce a step (as if accumulated first)": expected / k,
            "no ring factor: K · N · 4": k * n * FLOAT32_BYTES,
            "biases left out: weights only": expected * (f * h + h * c) / n,
            "bits for bytes": expected * 8,
            "every device's traffic added up: × D": expected * d,
            "only the reduce-scatter half": expected / 2,
        }


_RING_STUB = '''\
import numpy as np


def ring_allreduce(grads_DN):
    """Simulate a ring all-reduce of D devices' gradients, step by step.

    grads_DN: (D, N) float32 NumPy array, row i = device i's gradient; N is divisible by D.
    Each device's buffer (start from a copy of its row) is cut into D chunks of N // D
    floats: chunk c is buffer[c * (N // D):(c + 1) * (N // D)].
    At every step, every device i sends exactly one chunk to device (i + 1) % D, all at
    once (a receiver gets the chunk as it was before the step).
      Phase 1, reduce-scatter, D - 1 steps: the receiver ADDS the chunk into its own copy.
      Phase 2, all-gather, D - 1 steps: the receiver OVERWRITES its copy with the chunk.
    Choose which chunk each device sends at each step so that every buffer ends as the sum
    over the D devices.
    Returns (result_DN, steps): result_DN, the (D, N) buffers at the end; steps, a list of
    2 * (D - 1) lists: steps[s][i] is the chunk index device i sends at step s.
    """
    raise NotImplementedError
'''

_RING_GATHER_OFF_BY_ONE = """\
import numpy as np


def ring_allreduce(grads_DN):
    buffers = np.array(grads_DN, copy=True)
    devices, length = buffers.shape
    size = length // devices
    steps = []
    for phase in ("reduce", "gather"):
        for s in range(devices - 1):
            sent = [(i - s) % devices for i in range(devices)]
            payload = [buffers[i, c * size:(c + 1) * size].copy() for i, c in enumerate(sent)]
            for i, c in enumerate(sent):
                j = (i + 1) % devices
                if phase == "reduce":
                    buffers[j, c * size:(c + 1) * size] += payload[i]
                else:
                    buffers[j, c * size:(c + 1) * size] = payload[i]
            steps.append(sent)
    return buffers, steps
"""

_RING_ONLY_REDUCE_SCATTER = """\
import numpy as np


def ring_allreduce(grads_DN):
    buffers = np.array(grads_DN, copy=True)
    devices, length = buffers.shape
    size = length // devices
    steps = []
    for s in range(devices - 1):
        sent = [(i - s) % devices for i in range(devices)]
        payload = [buffers[i, c * size:(c + 1) * size].copy() for i, c in enumerate(sent)]
        for i, c in enumerate(sent):
            j = (i + 1) % devices
            buffers[j, c * size:(c + 1) * size] += payload[i]
        steps.append(sent)
    return buffers, steps
"""

_RING_REDUCE_D_STEPS = """\
import numpy as np


def ring_allreduce(grads_DN):
    buffers = np.array(grads_DN, copy=True)
    devices, length = buffers.shape
    size = length // devices
    steps = []
    for phase, count in (("reduce", devices), ("gather", devices - 1)):
        for s in range(count):
            first = 0 if phase == "reduce" else 1
            sent = [(i - s + first) % devices for i in range(devices)]
            payload = [buffers[i, c * size:(c + 1) * size].copy() for i, c in enumerate(sent)]
            for i, c in enumerate(sent):
                j = (i + 1) % devices
                if phase == "reduce":
                    buffers[j, c * size:(c + 1) * size] += payload[i]
                else:
                    buffers[j, c * size:(c + 1) * size] = payload[i]
            steps.append(sent)
    return buffers, steps
"""

_RING_GATHER_ADDS = """\
import numpy as np


def ring_allreduce(grads_DN):
    buffers = np.array(grads_DN, copy=True)
    devices, length = buffers.shape
    size = length // devices
    steps = []
    for phase in ("reduce", "gather"):
        for s in range(devices - 1):
            first = 0 if phase == "reduce" else 1
            sent = [(i - s + first) % devices for i in range(devices)]
            payload = [buffers[i, c * size:(c + 1) * size].copy() for i, c in enumerate(sent)]
            for i, c in enumerate(sent):
                j = (i + 1) % devices
                buffers[j, c * size:(c + 1) * size] += payload[i]
            steps.append(sent)
    return buffers, steps
"""

# Float32 sums of D <= 8 terms, in any order, are within (D - 1) · 2^-24 · sum |g_i| of the
# exact sum (4.2e-7 · sum |g_i| at D = 8): judged per element on sum |g_i|, not on |sum|,
# which cancellation can make tiny. A replay in float64 is exact to about 1e-16.
RING_RTOL = 1e-6
REPLAY_RTOL = 1e-12


def replay_schedule(grads_DN, steps) -> np.ndarray:
    """The grader's own ring, in float64: play ``steps`` (the learner's chunk schedule) with
    the stated rules, the first D - 1 steps adding, the rest overwriting. Whatever arithmetic
    the learner did, this says whether the schedule itself sums every chunk everywhere."""
    buffers = np.asarray(grads_DN, np.float64).copy()
    devices, length = buffers.shape
    size = length // devices
    for s, sent in enumerate(steps):
        payload = [buffers[i, c * size : (c + 1) * size].copy() for i, c in enumerate(sent)]
        for i, c in enumerate(sent):
            receiver = buffers[(i + 1) % devices, c * size : (c + 1) * size]
            if s < devices - 1:
                receiver += payload[i]
            else:
                receiver[:] = payload[i]
    return buffers


def _schedule_problem(steps, devices: int) -> str | None:
    """Why ``steps`` is not 2(D - 1) steps of D chunk indices in [0, D), or None."""
    if not isinstance(steps, list | tuple):
        return f"steps is a {type(steps).__name__}, not a list"
    if len(steps) != 2 * (devices - 1):
        return (
            f"{len(steps)} steps; a ring all-reduce over {devices} devices takes "
            f"2(D - 1) = {2 * (devices - 1)} (D - 1 to reduce-scatter, D - 1 to all-gather)"
        )
    for s, sent in enumerate(steps):
        try:
            chunks = [int(c) for c in sent]
        except (TypeError, ValueError):
            return f"step {s} is {sent!r}, not a list of chunk indices"
        if len(chunks) != devices or not all(0 <= c < devices for c in chunks):
            return f"step {s} is {chunks}: one chunk index in [0, {devices}) per device"
    return None


class RingAllReduce(CodeItem):
    id = "distributed.communication_algorithms.ring_allreduce"
    phase = PHASE
    lesson = "communication_algorithms"
    title = "A ring all-reduce, step by step"
    function_name = "ring_allreduce"
    stub = _RING_STUB
    solution_module = "core.exercises.solutions.ring_allreduce"
    hints = (
        "Draw D = 3 devices in a ring and follow one chunk: in the reduce-scatter, a chunk "
        "travels around the ring collecting one device's part at each hop, so it must be "
        "complete after D - 1 hops. Which device holds it then?",
        "Reduce-scatter: at step s device i sends chunk (i - s) % D, the one it has just "
        "received and added its own part to. After D - 1 steps device i holds the finished "
        "sum of one chunk: which one? The all-gather must start by sending that chunk.",
        "Device i finishes chunk (i + 1) % D, so in the all-gather it sends chunk "
        "(i + 1 - s) % D at step s, and the receiver overwrites (adding again would count "
        "every part twice).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `ring_allreduce(grads_DN)`: the algorithm behind `lax.psum` that the "
            "lesson's byte counts assume, as D NumPy buffers passing chunks around a ring. "
            "The hidden tests run it on seeded gradients (1, 2, 5 and 8 devices, one case "
            "with values near 1e6 of both signs), compare every returned buffer with a "
            f"float64 NumPy sum (error at most {RING_RTOL:g} times the sum of the parts' "
            "sizes, float32's rounding for 8 terms with room to spare), and replay your "
            "chunk schedule with their own float64 ring to check the schedule itself sums "
            "every chunk on every device."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "all-gather starts one chunk off (sends chunk (i - s), not (i + 1 - s))": (
                _RING_GATHER_OFF_BY_ONE
            ),
            "only the reduce-scatter: each device ends with one chunk summed": (
                _RING_ONLY_REDUCE_SCATTER
            ),
            "reduce-scatter runs D steps, not D - 1 (a part is summed twice)": (
                _RING_REDUCE_D_STEPS
            ),
            "all-gather adds instead of overwriting": _RING_GATHER_ADDS,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            ("one device: nothing to send", 1, int(generator.integers(2, 6)), 1.0),
            ("two devices", 2, 2 * int(generator.integers(1, 5)), 1.0),
            ("five devices", 5, 5 * int(generator.integers(2, 6)), 1.0),
            ("eight devices, one float a chunk", 8, 8, 1.0),
            ("eight devices, values near 1e6 of both signs", 8, 8 * 3, 1e6),
        ]
        tests = []
        for name, devices, length, scale in cases:
            grads = (generator.normal(size=(devices, length)) * scale).astype(np.float32)
            tests.extend(self._compare(function, grads, f"{name} (D={devices}, N={length})"))
        return tests

    def _compare(self, function, grads_DN, name) -> list[HiddenTest]:
        devices, length = grads_DN.shape
        exact_N = grads_DN.astype(np.float64).sum(axis=0)
        scale_N = np.abs(grads_DN.astype(np.float64)).sum(axis=0)
        got = function(grads_DN.copy())
        if not isinstance(got, tuple | list) or len(got) != 2:
            return [HiddenTest(name, False, "expected a pair (result_DN, steps)")]
        result, steps = got
        result = np.asarray(result, np.float64)
        if result.shape != (devices, length):
            result_test = HiddenTest(
                f"{name}: every buffer is the sum", False,
                f"result_DN has shape {result.shape}; expected {(devices, length)}",
            )  # fmt: skip
        else:
            error = np.abs(result - exact_N) / scale_N
            device, element = np.unravel_index(int(np.argmax(error)), error.shape)
            result_test = HiddenTest(
                f"{name}: every buffer is the sum",
                bool(np.isfinite(result).all()) and float(error.max()) <= RING_RTOL,
                f"largest error {float(error.max()):.1e} of the parts' size, on device "
                f"{device}, chunk {element // (length // devices)} (tolerance {RING_RTOL:g})",
            )
        problem = _schedule_problem(steps, devices)
        if problem:
            return [result_test, HiddenTest(f"{name}: your schedule", False, problem)]
        replayed = replay_schedule(grads_DN, [[int(c) for c in sent] for sent in steps])
        replay_error = float((np.abs(replayed - exact_N) / scale_N).max())
        sent_bytes = len(steps) * (length // devices) * FLOAT32_BYTES
        formula = 2 * (devices - 1) / devices * length * FLOAT32_BYTES
        return [
            result_test,
            HiddenTest(
                f"{name}: your schedule, replayed in float64",
                replay_error <= REPLAY_RTOL,
                f"largest error {replay_error:.1e} of the parts' size (tolerance "
                f"{REPLAY_RTOL:g}); each device sent {len(steps)} chunks of {length // devices}"
                f" floats = {sent_bytes} bytes (2(D-1)/D · N · 4 = {formula:g})",
            ),
        ]
