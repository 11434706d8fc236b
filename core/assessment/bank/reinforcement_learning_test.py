"""The item ``reinforcement_learning.gae_truncation`` beyond the generic contract
(core/assessment/items_test.py): the solution against the course's PPO GAE, cases with both kinds of
end, planted mistakes failing on more seeds."""

from __future__ import annotations

import numpy as np

from core.assessment.bank import reinforcement_learning
from core.assessment.solutions import gae


def test_gae_solution_matches_the_course_ppo_gae():
    import jax.numpy as jnp

    from core.rl import ppo

    for case in reinforcement_learning._gae_cases(5, reinforcement_learning.GaeTruncation.id):
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
        for case in reinforcement_learning._gae_cases(
            seed, reinforcement_learning.GaeTruncation.id
        ):
            term, trunc = case["terminated_T"], case["truncated_T"]
            assert term.any() and trunc.any() and not np.any(term & trunc)
            # Away from episode ends the next value is the next step's value.
            going_on = ~(term | trunc)[:-1]
            np.testing.assert_array_equal(
                case["next_values_T"][:-1][going_on], case["values_T"][1:][going_on]
            )


def test_gae_planted_mistakes_fail_on_more_seeds():
    item = reinforcement_learning.GaeTruncation()
    for seed in range(8):
        for mistake, source in item.planted_wrong().items():
            assert not all(t.passed for t in item.run_tests(seed, source)), (seed, mistake)
