"""Exercises of the phase "Post-training: SFT, LoRA, reward models and RLHF".

- ``post_training.dpo.first_loss`` (predict): the DPO loss before the first step.
- ``post_training.dpo.dpo_loss`` (code): the DPO loss and its implicit reward margins,
  finite for margins in the hundreds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item, PredictItem, rng

PHASE = "Post-training: SFT, LoRA, reward models and RLHF"


class FirstLoss(PredictItem):
    """DPO starts its policy as a copy of the reference: every log-ratio, so every margin, is
    0, and the loss is -log sigmoid(0) = ln 2 whatever beta and the pairs."""

    id = "post_training.dpo.first_loss"
    phase = PHASE
    lesson = "dpo"
    title = "The DPO loss before the first step"
    units = "nats"
    rel_tol = 0.01
    same_answer_at_every_seed = (
        "the point of the exercise: before the first step the loss is ln 2 for any beta and "
        "any pairs; the seed changes beta, the pairs and the model they are scored by"
    )
    hints = (
        "Before the first step the policy's weights are a copy of the reference's. What is "
        "log π(y) − log π_ref(y) then, for any response y?",
        "Every log-ratio is 0, so every margin β·(0 − 0) is 0, whatever β and whichever "
        "response was chosen. The loss of one pair is −log σ(margin).",
        "σ(0) = 1/2, so each pair's loss is −ln(1/2) = ln 2 ≈ 0.693 nats (natural log), "
        "and so is their mean.",
    )
    SHOWN_PAIRS = 3  # pairs the prompt shows as text

    def params(self, generator):
        from core.post_training import task

        pairs = int(generator.integers(6, 17))
        prompts = [task.all_prompts()[int(i)] for i in generator.integers(0, 216, pairs)]
        return {
            "beta": float(generator.choice([0.05, 0.1, 0.2, 0.25, 0.5])),
            "prompts": prompts,
            # chosen: the right answer; rejected: random letters (what the base model says)
            "chosen": [task.reverse_response(p) for p in prompts],
            "rejected": task.random_responses(generator, pairs),
            "seed": int(generator.integers(0, 2**16)),
        }

    def prompt(self, params) -> str:
        rows = "\n".join(
            f"| `{p}` | `{w}` | `{lose}` |"
            for p, w, lose in list(
                zip(params["prompts"], params["chosen"], params["rejected"], strict=True)
            )[: self.SHOWN_PAIRS]
        )
        return (
            f"DPO starts from a copy of the reference model: the policy π and the frozen π_ref "
            f"have the same weights. A batch of **{len(params['prompts'])} preference pairs**, "
            f"β = **{params['beta']:g}**; the first {self.SHOWN_PAIRS}:\n\n"
            "| prompt x | chosen y_w | rejected y_l |\n|---|---|---|\n"
            f"{rows}\n\n"
            "**Predict the DPO loss of this batch before the first step** (the mean over the "
            "pairs), in nats; the lesson's library then computes it on a freshly initialised "
            "model."
        )

    def live(self, params) -> float:
        import jax
        import jax.numpy as jnp

        from core.post_training import dpo, losses, model, task

        chosen = task.encode(params["prompts"], params["chosen"])
        rejected = task.encode(params["prompts"], params["rejected"])
        batch = {
            "tokens_w_BT": chosen["tokens_BT"],
            "weights_w_BT": chosen["weights_BT"],
            "tokens_l_BT": rejected["tokens_BT"],
            "weights_l_BT": rejected["weights_BT"],
        }
        reference = model.init_params(task.MODEL, jax.random.key(params["seed"]))
        policy = jax.tree.map(jnp.array, reference)  # DPO's policy starts as a copy
        # the sequence log-probabilities of chosen and rejected under each, as dpo.train takes
        # them (one program for both: the same shapes)
        ref_w_B, ref_l_B = dpo.policy_logprobs(reference, batch)
        logp_w_B, logp_l_B = dpo.policy_logprobs(policy, batch)
        loss, _margins = losses.dpo_loss(
            logp_w_B, logp_l_B, ref_w_B, ref_l_B, jnp.float32(params["beta"])
        )
        return float(loss)

    def derive(self, params):
        value = math.log(2.0)
        beta = params["beta"]
        return value, (
            "The policy is a copy of the reference, so log π(y) − log π_ref(y) = 0 for every "
            "response, chosen or rejected. Each pair's margin is "
            f"β·((log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l))) = {beta:g}·(0 − 0)"
            " = 0, and its loss is −log σ(0) = −ln(1/2) = "
            f"**ln 2 = {value:.4f} nats**, the same for every pair, so the mean is too. Neither "
            "β nor the pairs (not even a chosen response that is exactly right) change it: DPO "
            "learns only from how the policy moves away from the reference. A first DPO loss "
            "far from 0.693 means the policy does not start from the reference (or the "
            "reference log-probabilities belong to another model)."
        )

    def wrong(self, params, expected):
        return {
            "the margin itself (0), not -log sigmoid of it": 0.0,
            "bits for nats: log2 2": 1.0,
            "beta times ln 2": params["beta"] * math.log(2.0),
            "sigmoid(0) = 1/2, not its -log": 0.5,
        }


_DPO_STUB = '''\
import jax
import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    """The DPO loss of B preference pairs and each pair's implicit reward margin.

    policy_logp_w_B, policy_logp_l_B: (B,) float32 log pi(y_w | x) and log pi(y_l | x), the
        sequence log-probabilities (nats) of the chosen and the rejected response under the
        policy being trained;
    ref_logp_w_B, ref_logp_l_B: (B,) the same under the frozen reference pi_ref;
    beta: how strongly the policy is anchored to the reference (a float > 0).
    Returns (loss, margins_B): margins_B is beta times (the chosen response's log-ratio to the
    reference minus the rejected one's); loss is the mean over the pairs of
    -log sigmoid(margins_B). It must stay finite for margins of -1000.
    """
    raise NotImplementedError
'''

_DPO_NO_REFERENCE = """\
import jax
import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    margins_B = beta * (policy_logp_w_B - policy_logp_l_B)
    return jnp.mean(jnp.logaddexp(0.0, -margins_B)), margins_B
"""

_DPO_SWAPPED = """\
import jax
import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    margins_B = beta * ((policy_logp_l_B - ref_logp_l_B) - (policy_logp_w_B - ref_logp_w_B))
    return jnp.mean(jnp.logaddexp(0.0, -margins_B)), margins_B
"""

_DPO_NAIVE = """\
import jax
import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    margins_B = beta * ((policy_logp_w_B - ref_logp_w_B) - (policy_logp_l_B - ref_logp_l_B))
    sigmoid_B = 1.0 / (1.0 + jnp.exp(-margins_B))
    return jnp.mean(-jnp.log(sigmoid_B)), margins_B
"""

_DPO_NO_BETA = """\
import jax
import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    margins_B = (policy_logp_w_B - ref_logp_w_B) - (policy_logp_l_B - ref_logp_l_B)
    return jnp.mean(jnp.logaddexp(0.0, -margins_B)), margins_B
"""

# float32 inputs, a float64 reference. A margin is beta times a difference of four sequence
# log-probabilities of tens (here up to thousands) of nats, so its float32 rounding follows
# their size, not the margin's: its error is judged on max(beta * max |log-prob|, 1), and the
# loss's on max(|loss|, 1).
DPO_RTOL = 1e-5


def dpo_reference(policy_w, policy_l, ref_w, ref_l, beta) -> tuple[float, np.ndarray]:
    """The loss and margins in float64 NumPy: -log sigmoid(m) = log(1 + e^(-m)), computed as
    logaddexp(0, -m), finite for any finite margin (independent of core.post_training)."""
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    margins = beta * ((f64(policy_w) - f64(ref_w)) - (f64(policy_l) - f64(ref_l)))
    return float(np.mean(np.logaddexp(0.0, -margins))), margins


class DpoLoss(CodeItem):
    id = "post_training.dpo.dpo_loss"
    phase = PHASE
    lesson = "dpo"
    title = "The DPO loss and its implicit reward margins"
    function_name = "dpo_loss"
    stub = _DPO_STUB
    solution_module = "core.exercises.solutions.dpo_loss"
    hints = (
        "The implicit reward of a response is β·(log π(y) − log π_ref(y)): its log-ratio to "
        "the reference, times β. The margin is the chosen response's implicit reward minus "
        "the rejected one's.",
        "−log σ(m) = log(1 + e^(−m)). For m = −1000, e^(1000) is inf in float32 (and "
        "σ(−1000) is 0, whose log is −inf); the loss there is about 1000. Which function "
        "computes log(e^a + e^b) without forming e^a?",
        "jnp.logaddexp(0.0, -margins_B) (or jax.nn.softplus(-margins_B)) is log(1 + e^(−m)) "
        "for any finite m. Return (its mean over the pairs, margins_B).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `dpo_loss(...)`: the loss this lesson trains with, and the implicit "
            "reward margins its charts follow. The hidden tests call it on float32 "
            "log-probabilities of three batches, one of them with margins of several hundred "
            "nats either way (where a naive −log σ overflows), and compare the loss and every "
            "margin with a float64 NumPy reference (relative error at most "
            f"{DPO_RTOL:g}, margins judged on the size of the log-probabilities)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no reference correction (beta * (log pi(y_w) - log pi(y_l)))": _DPO_NO_REFERENCE,
            "chosen and rejected swapped (the sign flipped)": _DPO_SWAPPED,
            "-log(sigmoid(m)) as written (overflows for a margin of -100)": _DPO_NAIVE,
            "beta left out": _DPO_NO_BETA,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            # (name, pairs, beta, how far the policy moved from the reference, in nats)
            ("a few pairs early in training", int(generator.integers(4, 9)), 0.1, 2.0),
            ("a batch after many steps", 64, float(generator.choice([0.2, 0.5])), 12.0),
            ("margins in the hundreds, both signs", 16, 0.5, 1500.0),
        ]
        tests = []
        for name, pairs, beta, moved in cases:
            ref_w = generator.uniform(-60.0, -15.0, pairs)
            ref_l = generator.uniform(-60.0, -15.0, pairs)
            # the policy's log-probabilities stay below 0: at most 5 nats above the reference
            up = min(moved / 4, 5.0)
            policy_w = ref_w + generator.uniform(-moved, up, pairs)
            policy_l = ref_l + generator.uniform(-moved, up, pairs)
            if moved > 100:  # a margin of -beta * moved and one of +beta * moved, for sure
                policy_w[:2], policy_l[:2] = ref_w[:2] - [moved, 0], ref_l[:2] - [0, moved]
            inputs = [x.astype(np.float32) for x in (policy_w, policy_l, ref_w, ref_l)]
            tests.append(self._compare(function, inputs, beta, f"{name}: B={pairs}, β={beta:g}"))
        return tests

    def _compare(self, function, inputs, beta, name) -> HiddenTest:
        expected_loss, expected_margins = dpo_reference(*inputs, beta)
        got = function(*inputs, beta)
        if not isinstance(got, tuple | list) or len(got) != 2:
            return HiddenTest(name, False, "expected a pair (loss, margins_B)")
        loss, margins = (np.asarray(x, np.float64) for x in got)
        if loss.shape != ():
            return HiddenTest(name, False, f"the loss has shape {loss.shape}; expected a scalar")
        if margins.shape != expected_margins.shape:
            return HiddenTest(
                name,
                False,
                f"margins_B has shape {margins.shape}; expected {expected_margins.shape}",
            )
        value = float(loss)
        if not math.isfinite(value) or not np.all(np.isfinite(margins)):
            return HiddenTest(
                name, False, f"the loss is {value} (reference {expected_loss:.6g}): not finite"
            )
        loss_error = abs(value - expected_loss) / max(abs(expected_loss), 1.0)
        scale = max(beta * float(np.max(np.abs(np.stack(inputs)))), 1.0)
        margin_error = float(np.max(np.abs(margins - expected_margins))) / scale
        return HiddenTest(
            name,
            loss_error <= DPO_RTOL and margin_error <= DPO_RTOL,
            f"loss {value:.6g}, reference {expected_loss:.6g}: error {loss_error:.1e}; "
            f"margins' largest error {margin_error:.1e} (tolerance {DPO_RTOL:g} for both)",
        )


ITEMS: tuple[Item, ...] = (FirstLoss(), DpoLoss())
