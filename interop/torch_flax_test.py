"""torch <-> NNX conversion of DigitsNet: bitwise round trips, torch parity, clear refusals."""

import dataclasses

import numpy as np
import pytest

from core import numerics
from interop import torch_flax, twins

TOL = numerics.tolerance("float32")


def _bitwise_equal(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a
    )


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_torch_to_nnx_to_torch_is_bitwise(seed):
    module = twins.seeded_torch(seed)
    state = {k: v.numpy() for k, v in module.state_dict().items()}
    back = torch_flax.nnx_to_torch(torch_flax.from_torch_model(module))
    assert _bitwise_equal(back, state)
    # and the other way: NNX -> torch module -> NNX holds the same numbers
    model = torch_flax.seeded_nnx(seed)
    again = torch_flax.from_torch_model(torch_flax.to_torch_model(model))
    assert _bitwise_equal(torch_flax.nnx_to_torch(again), torch_flax.nnx_to_torch(model))


@pytest.mark.parametrize("seed,batch", [(0, 1), (1, 3), (2, 32), (3, 64)])
def test_converted_forward_matches_torch(seed, batch):
    result = torch_flax.parity(seed, batch)
    assert result.logits_nnx_BK.shape == (batch, 10)
    assert numerics.scaled_max_error(result.logits_nnx_BK, result.logits_torch_BK) <= TOL
    assert result.diff.agrees and result.diff.first_divergent is None


def test_a_torch_trained_model_with_updated_statistics_converts():
    """Running statistics and num_batches_tracked as torch's training leaves them."""
    import torch

    torch.manual_seed(0)
    module = twins.seeded_torch(4).train()
    x = torch.from_numpy(np.transpose(twins.digits_batch(64, 4), (0, 3, 1, 2)).copy())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        module(x).square().mean().backward()
        optimizer.step()
    module.eval()
    assert (
        int(module.bn1.num_batches_tracked)
        == int(twins.seeded_weights(4)["bn1.num_batches_tracked"]) + 3
    )
    model = torch_flax.from_torch_model(module)
    x_nhwc = twins.digits_batch(16, 9)
    ours = twins.nnx_activations(model, x_nhwc)[-1][1]
    theirs = twins.torch_activations(module, x_nhwc)[-1][1]
    assert numerics.scaled_max_error(ours, theirs) <= TOL
    assert int(torch_flax.nnx_to_torch(model)["bn1.num_batches_tracked"]) == int(
        module.bn1.num_batches_tracked
    )


@pytest.mark.parametrize("mistake", [m for m in torch_flax.MISTAKES if m != "none"])
@pytest.mark.parametrize("seed", [0, 5])
def test_every_deliberate_mistake_fails_the_logits_parity(mistake, seed):
    result = torch_flax.parity(seed, 16, mistake)
    assert numerics.scaled_max_error(result.logits_nnx_BK, result.logits_torch_BK) > 10 * TOL


def test_a_naive_converter_without_the_transpose_is_refused_by_name(monkeypatch):
    """A converter that copies Linear weights as they are (torch's (out, in) into NNX's
    (in, out)) is refused by shape, naming the parameter, never broadcast or reshaped."""
    rule = torch_flax.RULES["linear", "weight"]
    monkeypatch.setitem(
        torch_flax.RULES, ("linear", "weight"), dataclasses.replace(rule, to_nnx=lambda a: a)
    )
    with pytest.raises(torch_flax.ConversionError, match=r"fc1.weight -> fc1.kernel: shape"):
        torch_flax.torch_to_nnx(twins.seeded_weights(0), target=twins.nnx_model())


def _state(**changes):
    state = dict(twins.seeded_weights(0))
    for name, value in changes.items():
        name = name.replace("__", ".")
        if value is None:
            del state[name]
        else:
            state[name] = value
    return state


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"ln1__bias": None}, r"missing parameter 'ln1.bias'"),
        ({"fc3__weight": np.zeros((2, 2), np.float32)}, r"unexpected parameter 'fc3.weight'"),
        # broadcastable, still refused: nothing is broadcast to fit
        ({"conv1__bias": np.zeros((1, 8), np.float32)}, r"conv1.bias: shape \(1, 8\)"),
        ({"bn1__running_var": np.ones((), np.float32)}, r"bn1.running_var: shape \(\)"),
        ({"fc1__weight": np.zeros((256, 64), np.float32)}, r"fc1.weight: shape \(256, 64\)"),
        ({"fc2__bias": np.zeros(10, np.float64)}, r"fc2.bias: dtype float64, expected float32"),
        ({"bn1__num_batches_tracked": np.array(2.0)}, r"num_batches_tracked: dtype float64"),
        ({"bn1__num_batches_tracked": np.array(2**40)}, r"does not fit int32"),
        ({"conv2__weight": [[1.0]]}, r"conv2.weight: expected an array"),
    ],
)
def test_mismatches_raise_conversion_errors_naming_the_parameter(changes, message):
    with pytest.raises(torch_flax.ConversionError, match=message):
        torch_flax.torch_to_nnx(_state(**changes))


def test_torch_tensors_of_the_wrong_dtype_are_refused():
    import torch

    state = torch_flax.as_tensors(twins.seeded_weights(0))
    state["ln1.weight"] = state["ln1.weight"].to(torch.bfloat16)
    with pytest.raises(torch_flax.ConversionError, match="ln1.weight: dtype bfloat16"):
        torch_flax.torch_to_nnx(state)
    state["ln1.weight"] = state["ln1.weight"].to(torch.float16)
    with pytest.raises(torch_flax.ConversionError, match="ln1.weight: dtype float16"):
        torch_flax.torch_to_nnx(state)


@pytest.mark.parametrize(
    "target_config,field",
    [
        (twins.Config(ln_epsilon=1e-6), "ln_epsilon: 1e-05 vs 1e-06"),  # flax's default
        (twins.Config(bn_epsilon=1e-3), "bn_epsilon: 1e-05 vs 0.001"),  # Keras's default
        (twins.Config(gelu_approximate=(True, True, True)), "gelu_approximate"),
        (twins.Config(flatten_order="NCHW"), "flatten_order: 'NHWC' vs 'NCHW'"),
    ],
)
def test_a_target_that_computes_something_else_is_refused(target_config, field):
    target = twins.nnx_model(target_config)
    with pytest.raises(torch_flax.ConversionError, match=field):
        torch_flax.from_torch_model(twins.seeded_torch(0), target=target)


def test_config_is_read_from_the_torch_layers():
    module = twins.seeded_torch(0)
    module.ln1.eps = 1e-6  # someone changed the layer, not the config
    with pytest.raises(torch_flax.ConversionError, match="ln_epsilon"):
        torch_flax.from_torch_model(module, target=twins.nnx_model())
    model = torch_flax.from_torch_model(module)  # a fresh model follows the source
    assert model.ln1.epsilon == 1e-6 and torch_flax.nnx_config(model).ln_epsilon == 1e-6


def test_a_matching_target_is_loaded_in_place():
    target = twins.nnx_model(seed=3)
    model = torch_flax.from_torch_model(twins.seeded_torch(2), target=target)
    assert model is target
    assert _bitwise_equal(torch_flax.nnx_to_torch(model), twins.seeded_weights(2))


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown mistake 'typo'"):
        torch_flax.torch_to_nnx(twins.seeded_weights(0), mistake="typo")
    with pytest.raises(ValueError, match="fresh model"):
        torch_flax.torch_to_nnx(
            twins.seeded_weights(0), target=twins.nnx_model(), mistake="wrong_epsilon"
        )
    with pytest.raises(torch_flax.ConversionError, match="not a DigitsNet parameter"):
        torch_flax.nnx_name("fc1.gamma")


def test_layout_table_states_every_parameter_once():
    rows = torch_flax.layout_table()
    names = [row["torch name"] for row in rows if not row["torch name"].startswith("(config)")]
    assert names == list(twins.TORCH_SHAPES)
    by_name = {row["torch name"]: row for row in rows}
    assert by_name["fc1.weight"]["rule"] == "transpose"
    assert by_name["conv2.weight"]["NNX layout"].endswith("HWIO")
    assert by_name["bn1.running_var"]["NNX name"] == "bn1.var"
    assert {"(config) bn_epsilon", "(config) gelu_approximate"} <= set(by_name)
    # the table's rules are the ones the converter applies
    w = np.arange(8 * 1 * 3 * 3, dtype=np.float32).reshape(8, 1, 3, 3)
    assert np.array_equal(torch_flax.RULES["conv", "weight"].to_nnx(w)[1, 2, 0, 5], w[5, 0, 1, 2])


def test_a_variable_the_conversion_does_not_set_is_refused(monkeypatch):
    """A fresh model starts abstract (shapes only): a parameter the rules forget cannot stay."""
    shapes = dict(twins.TORCH_SHAPES)
    del shapes["ln1.bias"]
    monkeypatch.setattr(twins, "TORCH_SHAPES", shapes)
    state = twins.seeded_weights(0)  # follows TORCH_SHAPES: no ln1.bias
    assert "ln1.bias" not in state
    with pytest.raises(torch_flax.ConversionError, match=r"not set by the conversion: ln1.bias"):
        torch_flax.torch_to_nnx(state)
