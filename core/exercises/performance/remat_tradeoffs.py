"""Exercises of the lesson "Memory, rematerialization, and optimization tradeoffs": what a
policy saves for the backward pass, and what recomputing the rest costs.

- ``saved_activation_bytes`` (predict): the bytes of residuals (not inputs) the backward pass
  of the lesson's MLP keeps under a policy, as ``print_saved_residuals`` lists them.
- ``step_matmul_flops`` (code): the matmul FLOPs of one gradient step under a policy, split
  into forward, backward and recomputation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.performance._shared import PHASE, _relative_error

FLOAT32_BYTES = 4
POLICIES = ("none", "everything_saveable", "dots_saveable", "nothing_saveable")


def _saved_arrays(policy: str, depth: int) -> int:
    """(B, W) float32 arrays the backward pass keeps, besides its inputs: per layer the tanh
    output and its derivative 1 - tanh² (no remat, or checkpoint saving everything), or the
    matmul output (dots saveable), or nothing (nothing saveable); plus the loss's one."""
    per_layer = {"none": 2, "everything_saveable": 2, "dots_saveable": 1, "nothing_saveable": 0}
    return per_layer[policy] * depth + 1


class SavedActivationBytes(PredictItem):
    """Residuals per layer: 2 (B, W) arrays without remat, 1 with dots saveable, 0 with
    nothing saveable; the loss keeps one more under every policy."""

    id = "performance.remat_tradeoffs.saved_activation_bytes"
    phase = PHASE
    lesson = "remat_tradeoffs"
    title = "Bytes a remat policy keeps for the backward pass"
    units = "bytes"
    rel_tol = 0.01
    hints = (
        "Read the lesson's printed residuals for one policy and sort them: which come from the "
        "arguments (parameters, x), and which are (B, W) outputs of the forward pass? Only "
        "the second kind counts here.",
        "Without remat (and with everything_saveable) each tanh layer keeps two (B, W) "
        "arrays: its output and 1 - tanh², the derivative. dots_saveable keeps one per "
        "layer, the matmul output; nothing_saveable none. The loss keeps one (B, W) array "
        "under every policy.",
        "bytes = (arrays per layer x depth + 1) x B x W x 4 (float32): 2, 1 or 0 arrays a layer.",
    )

    def params(self, generator):
        return {
            "policy": POLICIES[int(generator.integers(len(POLICIES)))],
            # off the lesson's slider steps (batch 8, width 16): its table cannot show the answer
            "batch": int(generator.choice([12, 20, 28, 36, 44, 60])),
            "width": int(generator.choice([24, 40, 56, 72, 88, 104])),
            "depth": int(generator.integers(2, 7)),
            "seed": int(generator.integers(0, 2**16)),
        }

    def prompt(self, params) -> str:
        return (
            f"The lesson's MLP has **depth {params['depth']}** tanh layers of **width "
            f"W = {params['width']}** and trains on a **batch of B = {params['batch']}** "
            "float32 rows; its loss is the mean squared error. Under the policy "
            f"**`{params['policy']}`**, **predict how many bytes of residuals the backward "
            "pass keeps, not counting the ones that come from the arguments** (parameters, "
            "inputs): the lesson's \"saved residual KB\" column, in bytes. The lesson's "
            "library then lists them with `jax.ad_checkpoint.print_saved_residuals`."
        )

    def live(self, params) -> float:
        import jax

        from core.perf import remat

        mlp, x_BW, y_BW = remat.init_mlp(
            jax.random.key(params["seed"]), params["width"], params["depth"], params["batch"]
        )
        residuals, _text = remat.saved_residuals(params["policy"], mlp, x_BW, y_BW)
        return float(sum(r.nbytes for r in residuals if not r.from_argument))

    def derive(self, params):
        policy, depth = params["policy"], params["depth"]
        b, w = params["batch"], params["width"]
        arrays = _saved_arrays(policy, depth)
        value = arrays * b * w * FLOAT32_BYTES
        why = {
            "none": "each tanh layer keeps its output h (the next layer's input, needed for "
            "the weight gradient) and 1 - h² (tanh's derivative): 2 arrays a layer",
            "everything_saveable": "checkpoint with this policy saves whatever the backward "
            "pass needs, exactly as no checkpoint does: h and 1 - h², 2 arrays a layer",
            "dots_saveable": "only the matmul outputs x @ w are saved, 1 array a layer; the "
            "bias add, the tanh and its derivative are recomputed from them",
            "nothing_saveable": "nothing inside the checkpoint is saved: the backward pass "
            "recomputes the whole forward pass from the arguments",
        }[policy]
        return value, (
            f"Under `{policy}`, {why}. The loss mean((out - y)²) keeps one more (B, W) array "
            f"(2(out - y), the square's derivative), under every policy. So "
            f"{arrays} arrays of {b}·{w} float32 = {arrays}·{b}·{w}·4 = **{value:,} bytes**. "
            f"Without remat it would be {_saved_arrays('none', depth)} arrays; nothing_saveable "
            "keeps only the loss's one and pays with a second forward pass in the backward."
        )

    def wrong(self, params, expected):
        depth = params["depth"]
        one = params["batch"] * params["width"] * FLOAT32_BYTES
        wrong = {
            "bits for bytes": expected * 8,
            "float64: 8 bytes an element": expected * 2,
            "the loss's residual forgotten": expected - one,
            "no remat's bytes (the policy changes nothing)": _saved_arrays("none", depth) * one,
            "tanh outputs only, not their derivatives (one array a layer)": (depth + 1) * one,
        }
        return {
            name: value
            for name, value in wrong.items()
            if abs(value - expected) > 2.5 * self.rel_tol * abs(expected)
        }


_FLOPS_STUB = '''\
def step_matmul_flops(batch, width, depth, policy):
    """Matmul FLOPs of one gradient step of the lesson's MLP under a remat policy.

    The MLP: ``depth`` layers h = tanh(h @ w + b), h of shape (B, W), each w (W, W); the
    loss mean((out - y) ** 2). The step is jax.grad(loss) with respect to the parameters
    only (x is data), the forward pass wrapped in jax.checkpoint(..., policy=policy) unless
    policy is "none". policy: "none", "everything_saveable", "dots_saveable" or
    "nothing_saveable".
    Count only the matmuls ((B, W) @ (W, W) is 2·B·W·W FLOPs; W.T @ G and G @ W.T the
    same), not the tanh, the bias or the loss. Return (forward, backward, recompute): the
    forward pass's matmul FLOPs, the backward pass's (the gradients themselves), and those
    of the matmuls the backward pass runs again because the policy did not save them.
    """
    raise NotImplementedError
'''

_FLOPS_FIRST_INPUT_GRAD = """\
def step_matmul_flops(batch, width, depth, policy):
    one = 2 * batch * width * width
    recompute = depth * one if policy == "nothing_saveable" else 0
    return depth * one, 2 * depth * one, recompute
"""

_FLOPS_DOTS_RECOMPUTED = """\
def step_matmul_flops(batch, width, depth, policy):
    one = 2 * batch * width * width
    recompute = depth * one if policy in ("dots_saveable", "nothing_saveable") else 0
    return depth * one, (2 * depth - 1) * one, recompute
"""

_FLOPS_NO_RECOMPUTE = """\
def step_matmul_flops(batch, width, depth, policy):
    one = 2 * batch * width * width
    return depth * one, (2 * depth - 1) * one, 0
"""

_FLOPS_BACKWARD_ONE_PER_LAYER = """\
def step_matmul_flops(batch, width, depth, policy):
    one = 2 * batch * width * width
    recompute = depth * one if policy == "nothing_saveable" else 0
    return depth * one, depth * one, recompute
"""

_FLOPS_NO_TWO = """\
def step_matmul_flops(batch, width, depth, policy):
    one = batch * width * width
    recompute = depth * one if policy == "nothing_saveable" else 0
    return depth * one, (2 * depth - 1) * one, recompute
"""

# Integer counts: a float64 product of integers below 2^53 is exact or within one rounding
# (1e-16); a learner returning Python ints matches exactly. The smallest planted mistake
# moves a count by a whole matmul (at least 1/(3·depth) of it), far above 1e-12.
FLOPS_RTOL = 1e-12
PARTS = ("forward", "backward", "recompute")


def step_flops_reference(batch: int, width: int, depth: int, policy: str) -> np.ndarray:
    """(forward, backward, recompute) matmul FLOPs in float64, by counting matmuls: forward
    one per layer; backward two per layer (dW = h_in.T @ G, dh_in = G @ w.T) except the
    first, whose input x needs no gradient; recompute the whole forward only when nothing is
    saved (dots_saveable keeps the matmul outputs and recomputes just the tanh). The TPU
    compiler's cost_analysis() counts these (3L - 1 matmuls, 4L - 1 with nothing_saveable);
    XLA:CPU merges the recomputation back into the forward pass's matmuls."""
    one = 2.0 * np.float64(batch) * np.float64(width) ** 2
    matmuls = np.array(
        [depth, 2 * depth - 1, depth if policy == "nothing_saveable" else 0], np.float64
    )
    return matmuls * one


class StepMatmulFlops(CodeItem):
    id = "performance.remat_tradeoffs.step_matmul_flops"
    phase = PHASE
    lesson = "remat_tradeoffs"
    title = "Matmul FLOPs of a gradient step under a remat policy"
    function_name = "step_matmul_flops"
    stub = _FLOPS_STUB
    solution_module = "core.exercises.solutions.step_matmul_flops"
    hints = (
        "Count matmuls, then multiply by 2·B·W·W. Forward: one per layer. Backward: for each "
        "layer, what gradients does it have to produce? Recompute: which matmul outputs did "
        "the policy not keep?",
        "Backward: a layer needs dW = h_in.T @ G and passes dh_in = G @ W.T to the layer "
        "below, but the first layer's input is x, which needs no gradient: 2·depth - 1 "
        "matmuls. dots_saveable keeps the matmul outputs, so it recomputes only tanh.",
        "forward = depth·f, backward = (2·depth - 1)·f, recompute = depth·f for "
        "nothing_saveable and 0 for the others, with f = 2·B·W·W.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `step_matmul_flops(batch, width, depth, policy)`: the compute side of the "
            "lesson's tradeoff. The hidden tests call it for every policy on seeded sizes "
            "(one MLP of a single layer, one of 96 layers of width 8192 on a batch of 4096) "
            "and compare the three counts with a float64 count of the matmuls JAX's gradient "
            f"runs (relative error at most {FLOPS_RTOL:g}: the counts are integers)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "a gradient for the input x counted (2·depth backward matmuls)": (
                _FLOPS_FIRST_INPUT_GRAD
            ),
            "dots_saveable recomputes the matmuls too": _FLOPS_DOTS_RECOMPUTED,
            "the recomputation forgotten": _FLOPS_NO_RECOMPUTE,
            "one backward matmul a layer": _FLOPS_BACKWARD_ONE_PER_LAYER,
            "B·W·W FLOPs a matmul (the 2 forgotten)": _FLOPS_NO_TWO,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []
        for policy in POLICIES:
            batch = int(generator.choice([8, 32, 64, 256]))
            width = int(generator.choice([16, 128, 512]))
            depth = int(generator.integers(2, 9))
            tests.append(self._compare(function, batch, width, depth, policy))
        policy = POLICIES[int(generator.integers(len(POLICIES)))]
        tests.append(self._compare(function, int(generator.choice([4, 16])), 64, 1, policy))
        tests.append(self._compare(function, 4096, 8192, 96, "nothing_saveable"))
        return tests

    def _compare(self, function, batch, width, depth, policy) -> HiddenTest:
        name = f"{policy}: B={batch}, W={width}, depth={depth}"
        expected = step_flops_reference(batch, width, depth, policy)
        got = function(batch, width, depth, policy)
        if not isinstance(got, tuple | list) or len(got) != 3:
            return HiddenTest(name, False, "expected three numbers (forward, backward, recompute)")
        lines, passed = [], True
        for part, value, want in zip(PARTS, got, expected, strict=True):
            error, why = _relative_error(value, float(want))
            if error is None:
                return HiddenTest(name, False, f"{part}: {why}")
            ok = bool(error <= FLOPS_RTOL)
            passed &= ok
            if ok:
                lines.append(f"{part} ok")
            elif want == 0:
                lines.append(f"{part} should be 0 under this policy")
            else:
                lines.append(f"{part} off by {error:.2g} of the count")
        return HiddenTest(name, passed, "; ".join(lines) + f" (tolerance {FLOPS_RTOL:g})")
