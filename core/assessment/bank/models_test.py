"""The model items beyond the generic contract (core/assessment/items_test.py): more seeds,
every planted defect, and the references against the course library."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import models
from core.assessment.solutions import causal_attention, gae

MANY_SEEDS = range(60)


@pytest.mark.parametrize("item", [models.MaskedLossCount(), models.DpoLoss()], ids=lambda i: i.id)
def test_predict_items_hold_on_many_seeds(item):
    """The tolerance separates the answer from every planted mistake on every seed tried,
    and the library agrees with the derivation."""
    for seed in MANY_SEEDS:
        assert item.grade(seed, item.reference_answer(seed)).passed, seed
        for mistake, answer in item.wrong_answers(seed).items():
            assert not item.grade(seed, answer).passed, (seed, mistake, answer)
        assert max(item.self_check(seed).errors.values()) <= 1e-6, seed


@pytest.mark.parametrize("seed", [0, 17])
def test_resume_evidence_holds_for_every_defect(seed):
    """Not only the planted one: each defect breaks resumption, the fixed program does not,
    and restoring changes exactly the field the defect leaves out."""
    item = models.ResumeDefect()
    params = item.seeded(seed)[1]
    for defect in item.defects:
        facts = item.evidence(defect, params).facts
        assert all(facts.values()), (defect, facts)


def test_resume_program_differs_only_in_the_checkpoint_line():
    item = models.ResumeDefect()
    params = item.seeded(3)[1]
    fixed = item.program("fixed", params).splitlines()
    for defect in item.defects:
        shown = item.program(defect, params).splitlines()
        changed = [i for i, (a, b) in enumerate(zip(fixed, shown, strict=True)) if a != b]
        assert len(changed) == 1 and shown[changed[0]].startswith("ckpt = "), defect
        assert len(shown) <= 30


def test_masked_loss_uses_the_course_masking():
    """The shown kinds obey the rule: padding never selected, labels = the original byte at
    selected positions only, [MASK] positions show MASK_ID."""
    from core.lm import ssl_masking

    item = models.MaskedLossCount()
    for seed in range(10):
        params = item.seeded(seed)[0]
        real = params["segments"] != 0
        selected = params["kind"] != ssl_masking.NOT_SELECTED
        assert not np.any(selected & ~real)
        np.testing.assert_array_equal(params["labels"][selected], params["tokens"][selected])
        assert np.all(params["labels"][~selected] == ssl_masking.IGNORE_LABEL)
        masked = params["kind"] == ssl_masking.MASKED
        assert np.all(params["inputs"][masked] == ssl_masking.MASK_ID)


@pytest.mark.parametrize("shape", [(1, 1, 1, 4), (2, 5, 2, 8), (1, 13, 3, 8)])
def test_attention_reference_matches_the_course_library(shape):
    from core.lm import attention

    generator = np.random.default_rng(shape[1])
    q, k, v = (generator.normal(size=shape).astype(np.float32) for _ in range(3))
    mine = models.causal_attention_reference(q, k, v)
    np.testing.assert_allclose(mine, attention.reference_float64(q, k, v, causal=True), atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(causal_attention.causal_attention(q, k, v)), mine, atol=1e-5
    )


def test_attention_shapes_include_one_position_and_a_non_power_of_two():
    for seed in MANY_SEEDS:
        lengths = [s[1] for s in models._attention_shapes(seed, models.CausalAttention.id)]
        assert 1 in lengths and any(t > 1 and t & (t - 1) for t in lengths)


def test_gae_solution_matches_the_course_ppo_gae():
    import jax.numpy as jnp

    from core.rl import ppo

    for case in models._gae_cases(5, models.GaeTruncation.id):
        done = case["terminated_T"] | case["truncated_T"]
        expected, _target = ppo.gae(
            jnp.asarray(case["rewards_T"]),
            jnp.asarray(case["values_T"]),
            jnp.asarray(case["next_values_T"]),
            jnp.asarray(case["terminated_T"]),
            jnp.asarray(done),
            case["gamma"],
            case["lam"],
        )
        np.testing.assert_allclose(np.asarray(gae.gae(**case)), np.asarray(expected), atol=1e-5)


def test_gae_cases_have_both_kinds_of_end_and_consistent_values():
    for seed in range(20):
        for case in models._gae_cases(seed, models.GaeTruncation.id):
            term, trunc = case["terminated_T"], case["truncated_T"]
            assert term.any() and trunc.any() and not np.any(term & trunc)
            # Away from episode ends the next value is the next step's value.
            going_on = ~(term | trunc)[:-1]
            np.testing.assert_array_equal(
                case["next_values_T"][:-1][going_on], case["values_T"][1:][going_on]
            )


def test_gae_planted_mistakes_fail_on_more_seeds():
    item = models.GaeTruncation()
    for seed in range(8):
        for mistake, source in item.planted_wrong().items():
            assert not all(t.passed for t in item.run_tests(seed, source)), (seed, mistake)
