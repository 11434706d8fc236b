"""Reference solution of post_training.dpo.dpo_loss: the DPO loss and its margins."""

import jax.numpy as jnp


def dpo_loss(policy_logp_w_B, policy_logp_l_B, ref_logp_w_B, ref_logp_l_B, beta):
    """(mean over B pairs of -log sigmoid(margins_B), margins_B), in nats.

    The implicit reward of a response is beta * (log pi(y) - log pi_ref(y)); a pair's margin is
    the chosen response's implicit reward minus the rejected one's. -log sigmoid(m) is
    log(1 + e^(-m)): logaddexp(0, -m) computes it without forming e^(-m), which is inf in
    float32 for m below about -88 (and sigmoid(m) rounds to 0 there, whose log is -inf).
    """
    chosen_B = policy_logp_w_B - ref_logp_w_B
    rejected_B = policy_logp_l_B - ref_logp_l_B
    margins_B = beta * (chosen_B - rejected_B)
    return jnp.mean(jnp.logaddexp(0.0, -margins_B)), margins_B
