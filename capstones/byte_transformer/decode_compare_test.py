"""decode_compare: both greedy programs against core.lm.generate's recompute-everything
reference, the first-difference report on a planted mismatch, and the timing bookkeeping."""

import dataclasses

import jax
import numpy as np
import pytest

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import decode_compare, training
from core.lm import generate as generate_lib

TINY = config_lib.Config(
    d_model=32, num_layers=2, num_heads=2, seq_len=32, batch_size=2, max_files=4,
    max_bytes=2048, max_len=48, dropout=0.0,
)  # fmt: skip


def _params(config):
    # weights doubled: sharper logits than at initialisation, so greedy is not a near-tie
    return jax.tree.map(lambda p: 2 * p, training.init_state(config)["params"])


@pytest.mark.parametrize("prompt_len, new_tokens", [(37, 11)])
def test_cached_and_recompute_programs_equal_greedy_without_cache(prompt_len, new_tokens):
    params = _params(TINY)
    prompt = decode_compare.heldout_prompt(TINY, prompt_len)
    model = training.model_from_params(TINY, params)
    reference = generate_lib.greedy_without_cache(model, prompt, new_tokens)[0, prompt_len:]
    cached = decode_compare.cached_program(TINY, prompt_len, new_tokens)(params, prompt)
    recomputed = decode_compare.recompute_program(TINY, prompt_len, new_tokens)(params, prompt)
    np.testing.assert_array_equal(cached[0], reference)
    np.testing.assert_array_equal(recomputed[0], reference)
    found = decode_compare.first_difference(cached, recomputed)
    assert found["identical"] and found["tokens"] == new_tokens
    assert found["max_abs_logit_difference_while_identical"] < 1e-4  # float32, two orders
    # the logits each token was chosen from are the model's at that position
    full = np.asarray(model(np.concatenate([prompt[0], reference])[None]))[0]
    np.testing.assert_allclose(cached[1], full[prompt_len - 1 : -1], atol=1e-4)


def test_first_difference_reports_where_and_by_how_much():
    logits = np.zeros((5, 4), np.float32)
    logits[:, 1] = 2.0
    other = logits.copy()
    other[3] = [0.0, 1.0, 1.5, 0.0]  # step 3 picks byte 2, by a margin of 0.5
    tokens, tokens_other = logits.argmax(1), other.argmax(1)
    found = decode_compare.first_difference((tokens, logits), (tokens_other, other))
    assert not found["identical"] and found["first_difference_index"] == 3
    assert (found["cached_token"], found["recompute_token"]) == (1, 2)
    assert found["cached_margin"] == 2.0 and found["recompute_margin"] == 0.5
    assert found["max_abs_logit_difference_there"] == 1.5
    assert found["max_abs_logit_difference_while_identical"] == 0.0
    with pytest.raises(ValueError, match="token counts"):
        decode_compare.first_difference((tokens[:2], logits[:2]), (tokens, logits))


def test_compare_at_times_both_and_refuses_a_context_past_max_len():
    result = decode_compare.compare_at(TINY, _params(TINY), 16, 4, repeats=2)
    for name in ("cached", "recompute"):
        assert len(result[name]["seconds"]) == 2 and result[name]["tokens_per_s"] > 0
    assert result["speedup"] == pytest.approx(
        result["cached"]["tokens_per_s"] / result["recompute"]["tokens_per_s"]
    )
    assert result["greedy"]["identical"]
    with pytest.raises(ValueError, match="max_len"):
        decode_compare.cached_program(dataclasses.replace(TINY, max_len=40), 32, 9)
    with pytest.raises(ValueError, match="repeats"):
        decode_compare.time_program(None, (), repeats=0)
