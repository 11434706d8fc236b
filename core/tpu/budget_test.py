import dataclasses

import pytest

from core.tpu import budget

# Published parameter counts: the independent reference for the closed form.
PUBLISHED = {"gpt2-small": 124_439_808, "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320}


@pytest.mark.parametrize("name", PUBLISHED)
def test_param_count_matches_published_models(name):
    assert budget.PRESETS[name].param_count() == PUBLISHED[name]


def test_gqa_shrinks_attention_and_kv_cache():
    mha = budget.TransformerShape(vocab=100, d_model=64, layers=2, heads=8, d_ff=128)
    gqa = dataclasses.replace(mha, kv_heads=2)
    # K and V projections shrink from 64 to 16 columns each: 2 layers * 64 * (48 * 2) fewer
    assert mha.param_count() - gqa.param_count() == 2 * 64 * 2 * 48
    assert budget.kv_cache_bytes(gqa, 3, 10, "bfloat16") * 4 == budget.kv_cache_bytes(
        mha, 3, 10, "bfloat16"
    )


@pytest.mark.parametrize(("batch", "context", "dtype"), [(1, 4096, "bfloat16"), (8, 2048, "int8")])
def test_kv_cache_closed_form(batch, context, dtype):
    shape = budget.PRESETS["llama2-7b"]
    expected = 2 * 32 * batch * context * 32 * 128 * budget.DTYPE_BYTES[dtype]
    assert budget.kv_cache_bytes(shape, batch, context, dtype) == expected
    # Llama-2-7B in bf16: 0.5 MiB of KV per token
    assert budget.kv_cache_bytes(shape, 1, 1, "bfloat16") == 2**19


def test_training_budget_adam_f32_is_16_bytes_per_parameter_plus_activations():
    shape = budget.PRESETS["llama2-7b"]
    setup = budget.TrainingSetup(batch=8, seq=2048, chips=8, strategy="fsdp")
    parts = budget.training_budget(shape, setup)
    n = shape.param_count()
    state = parts["parameters"] + parts["gradients"] + parts["optimizer moments"]
    assert state == pytest.approx(16 * n / 8)
    assert parts["master copy"] == 0
    replicated = budget.training_budget(shape, dataclasses.replace(setup, strategy="data"))
    assert replicated["parameters"] == pytest.approx(8 * parts["parameters"])
    assert replicated["activations"] == parts["activations"]  # same per-chip batch either way


def test_activation_model_by_hand():
    shape = budget.TransformerShape(vocab=10, d_model=8, layers=3, heads=2, d_ff=32)
    b, t = 2, 5
    per_token = 4 * 8 + 2 * 8 + 2 * 8 + 2 * 32
    per_layer = b * t * per_token + b * 2 * t * t
    assert budget.layer_activation_elements(shape, b, t) == per_layer
    setup = budget.TrainingSetup(batch=b, seq=t, compute_dtype="bfloat16")
    assert budget.training_budget(shape, setup)["activations"] == 3 * per_layer * 2
    remat = budget.training_budget(shape, dataclasses.replace(setup, remat=True))["activations"]
    assert remat == (3 * b * t * 8 + per_layer) * 2
    assert remat < budget.training_budget(shape, setup)["activations"]


def test_master_copy_only_with_low_precision_params():
    shape = budget.PRESETS["tiny"]
    low = budget.TrainingSetup(batch=2, seq=4, param_dtype="bfloat16", master_copy=True)
    assert budget.training_budget(shape, low)["master copy"] == 4 * shape.param_count()
    full = dataclasses.replace(low, param_dtype="float32")
    assert budget.training_budget(shape, full)["master copy"] == 0


def test_serving_budget_splits_over_chips_and_max_batch():
    shape = budget.PRESETS["llama2-7b"]
    one = budget.serving_budget(shape, budget.ServingSetup(batch=4, context=4096))
    four = budget.serving_budget(shape, budget.ServingSetup(batch=4, context=4096, chips=4))
    assert four["weights"] * 4 == pytest.approx(one["weights"])
    assert four["KV cache"] * 4 == pytest.approx(one["KV cache"])
    setup = budget.ServingSetup(batch=1, context=4096)
    capacity = 16e9
    best = budget.max_batch_that_fits(shape, setup, capacity)
    assert budget.fits(
        budget.serving_budget(shape, dataclasses.replace(setup, batch=best)), capacity
    )
    assert not budget.fits(
        budget.serving_budget(shape, dataclasses.replace(setup, batch=best + 1)), capacity
    )
    assert budget.per_slice(four, 4)["weights"] == pytest.approx(one["weights"])


def test_bad_setups_name_the_problem():
    with pytest.raises(ValueError, match="divisible by heads"):
        budget.TransformerShape(vocab=10, d_model=10, layers=1, heads=3, d_ff=4)
    with pytest.raises(ValueError, match="multiple of the chip count"):
        budget.TrainingSetup(batch=6, seq=4, chips=4)
    shape = budget.TransformerShape(vocab=10, d_model=8, layers=1, heads=2, d_ff=4)
    problem = budget.serving_problem(shape, budget.ServingSetup(batch=1, context=4, chips=4))
    assert "KV heads" in problem
    with pytest.raises(ValueError, match="KV heads"):
        budget.serving_budget(shape, budget.ServingSetup(batch=1, context=4, chips=4))
    with pytest.raises(ValueError, match="dtype"):
        budget.dtype_bytes("float128")


def test_budget_rows_carry_capacity():
    rows = budget.budget_rows({"a": 1e9, "b": 2e9}, 16e9, "x")
    assert [r["GB"] for r in rows] == [1.0, 2.0] and {r["capacity GB"] for r in rows} == {16.0}
