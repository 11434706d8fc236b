"""Lesson claims about training dynamics and numerics hold where they are made (issue 12).

Two kinds of checks. (1) A claim made for an app's defaults is proven over seeds in a core
test that reads the defaults from a core dict (``debug_unstable.DEBUG_UNSTABLE_LESSON``, ...):
here those dicts must equal the app's flag defaults, read from its source, so the proof is
about the settings a learner gets. (2) Control values at which a test cell once failed
(the claim did not hold there) run headless and pass now, or are refused with exit 2.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from core import curriculum, lab
from core.data import digits
from core.lab import claims
from core.lessons.deployment import adapt_pretrained
from core.lessons.nn_training import debug_unstable
from core.lessons.post_training import rlhf_ppo
from core.lessons.reinforcement_learning import policy_gradients_ppo
from core.nn import mlp, training

# app stem -> the core dict holding its defaults, proven over seeds by the named test
LESSON_DEFAULTS = {
    # proven in core/lessons/nn_training/debug_unstable_test.py
    "debug_unstable": debug_unstable.DEBUG_UNSTABLE_LESSON,
    "tiny_mlp": mlp.TINY_MLP_LESSON,  # core/nn/mlp_test.py
    "train_eval_step": training.TRAIN_EVAL_LESSON,  # core/nn/training_test.py
    "cnn_digits": digits.CNN_LESSON,  # core/data/digits_test.py
    # proxy over-optimisation at KL 0: core/lessons/post_training/rlhf_ppo_test.py
    "rlhf_ppo": rlhf_ppo.RLHF_PPO_LESSON,
    # beats the untrained networks: core/lessons/reinforcement_learning/policy_gradients_ppo_test.py
    "policy_gradients_ppo": policy_gradients_ppo.PPO_LESSON,
    # full fine-tuning beats head-only: core/lessons/deployment/adapt_pretrained_test.py
    "adapt_pretrained": adapt_pretrained.LESSON,
}
LIMIT_S = 120  # a hang guard, not a speed assertion


def _flag_defaults(stem: str) -> dict:
    """{name: default} of every ``lab.Flag("name", default, ...)`` in apps/<stem>.py, but the
    flags that only name a file to grade (claims.GRADING_FLAGS: not the lesson's numbers)."""
    tree = ast.parse((curriculum.APPS_DIR / f"{stem}.py").read_text(encoding="utf-8"))
    defaults = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "lab.Flag"
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value not in claims.GRADING_FLAGS
        ):
            defaults[node.args[0].value] = ast.literal_eval(node.args[1])
    return defaults


@pytest.mark.parametrize("stem", sorted(LESSON_DEFAULTS))
def test_the_proven_defaults_are_the_apps_defaults(stem):
    assert _flag_defaults(stem) == LESSON_DEFAULTS[stem]


def test_train_eval_step_data_is_the_proven_data():
    source = (curriculum.APPS_DIR / "train_eval_step.py").read_text(encoding="utf-8")
    data = training.TRAIN_EVAL_DATA
    points = f"{data['train_points']}, {data['test_points']}, {data['classes']}"
    assert f"TRAIN_POINTS, TEST_POINTS, CLASSES = {points}" in source
    assert source.count(f'"moons", TRAIN_POINTS, {data["noise"]}, CLASSES') == 1
    assert source.count(f'"moons", TEST_POINTS, {data["noise"]}, CLASSES') == 1


def _run(run_app, stem: str, flags: list[str]) -> subprocess.CompletedProcess:
    return run_app(
        [curriculum.APPS_DIR / f"{stem}.py", *flags],
        env=lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu"),
        cwd=curriculum.REPO_ROOT,
        timeout=LIMIT_S,
    )


# (app stem, flags, what once failed there). Each is one headless run: keep the list short.
ONCE_FAILED = [
    ("first_gradient", ["--x0", "3"], "float32's best error 0 by luck: 'f64 beats f32' false"),
    ("first_gradient", ["--function", "log(1+x**2)", "--x0", "1"], "inflection: forward = central"),
    (
        "flax_nnx",
        ["--dropout-rate", "0.05", "--batch", "2", "--hidden", "2", "--depth", "1"],
        "two dropout masks of 4 entries agreed: 'the calls differ' false",
    ),
    (
        "losses_value_and_grad",
        ["--loss", "mse", "--batch", "1", "--features", "64", "--classes", "1"],
        "t = 0.1 overshoots curvature ~130",
    ),
    ("train_eval_step", ["--learning-rate", "0.0001"], "'>= 90% accuracy' claimed at lr <= 0.05"),
    ("random_keys", ["--samples", "20"], "a correct generator's KS p 0.0008 < alpha 1e-3"),
    (
        "evaluate_agents",
        ["--seeds", "2", "--confidence", "0.5", "--total-steps", "2048"],
        "a correct bootstrap missed scipy's Monte Carlo bound at 2 seeds (19.8 > 2)",
    ),
]


@pytest.mark.parametrize(
    "case", ONCE_FAILED, ids=[f"{c[0]}[{' '.join(c[1])}]" for c in ONCE_FAILED]
)
def test_a_claim_that_once_failed_here_holds_or_is_not_made(case, run_app):
    stem, flags, why = case
    result = _run(run_app, stem, flags)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{why}\n{output[-4000:]}"
    assert "PASS:" in result.stdout and "FAIL:" not in result.stdout, output[-4000:]


@pytest.mark.parametrize(
    "stem, flags, message",
    [
        (
            "flax_nnx",
            ["--batch", "1"],
            "--batch must be between 2 and 64",
        ),  # raised in make_dataset
        # above lr 0.1 float32 training drifts past the check's float64 tolerance
        ("resilient_training", ["--learning-rate", "0.5"], "--learning-rate must be between"),
    ],
)
def test_controls_where_a_check_cannot_hold_are_refused(stem, flags, message, run_app):
    result = _run(run_app, stem, flags)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert message in result.stderr and "Traceback" not in result.stderr
