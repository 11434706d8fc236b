"""torch state_dict <-> Flax NNX state for DigitsNet (interop/twins.py), both directions.

The layout rules, stated once (``RULES``; the app and the README render this table):

    torch name               torch layout   NNX name         NNX layout     rule
    conv*.weight             OIHW           conv*.kernel     HWIO           transpose (2, 3, 1, 0)
    conv*.bias               (O,)           conv*.bias       (O,)           copy
    bn1.weight               (C,)           bn1.scale        (C,)           copy
    bn1.bias                 (C,)           bn1.bias         (C,)           copy
    bn1.running_mean         (C,)           bn1.mean         (C,)           copy (batch statistic)
    bn1.running_var          (C,)           bn1.var          (C,)           copy (batch statistic)
    bn1.num_batches_tracked  () int64       bn1_num_batches  () int32       kept, see below
    fc*.weight               (out, in)      fc*.kernel       (in, out)      transpose
    fc*.bias                 (out,)         fc*.bias         (out,)         copy
    ln1.weight               (D,)           ln1.scale        (D,)           copy
    ln1.bias                 (D,)           ln1.bias         (D,)           copy

fc1's rows need no permutation because the torch twin flattens in NHWC order (it permutes NCHW
-> NHWC first); a torch model that flattens NCHW would need fc1.weight's columns reordered.
``num_batches_tracked`` counts training batches; torch reads it only when training with
momentum=None, inference never: it is checked (an integer scalar that fits int32) and kept on
the NNX twin as a ``twins.BatchCount`` so torch -> NNX -> torch is bitwise.

Not weights, and so not in a state dict: the BatchNorm and LayerNorm epsilons, each GELU's
approximation, the flatten order. They are a ``twins.Config``; a conversion into an existing NNX
model compares them and refuses a mismatch (``ConversionError`` naming the field).

Any mismatch (a shape, a missing or an extra name, a dtype) raises ``ConversionError`` naming
the parameter; nothing is broadcast, cast or reshaped to fit.

``MISTAKES`` are deliberately wrong conversions a lesson lets a learner pick
(``torch_to_nnx(..., mistake=name)``), each with the layer where its error first shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from interop import activations, twins


class ConversionError(ValueError):
    """A state dict that does not fit the model it is converted into (names the parameter)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one kind of parameter moves between torch and NNX."""

    torch_suffix: str
    nnx_attribute: str
    torch_layout: str
    nnx_layout: str
    rule: str
    to_nnx: Callable[[np.ndarray], np.ndarray]
    to_torch: Callable[[np.ndarray], np.ndarray]


def _copy(a: np.ndarray) -> np.ndarray:
    return a


def _conv_to_nnx(w_OIHW: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(w_OIHW, (2, 3, 1, 0)))


def _conv_to_torch(k_HWIO: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(k_HWIO, (3, 2, 0, 1)))


def _linear(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.T)


# Keyed by (layer kind, torch parameter name).
RULES: dict[tuple[str, str], Rule] = {
    ("conv", "weight"): Rule(
        "weight",
        "kernel",
        "(O, I, kH, kW) OIHW",
        "(kH, kW, I, O) HWIO",
        "transpose (2, 3, 1, 0)",
        _conv_to_nnx,
        _conv_to_torch,
    ),
    ("conv", "bias"): Rule("bias", "bias", "(O,)", "(O,)", "copy", _copy, _copy),
    ("bn", "weight"): Rule("weight", "scale", "(C,)", "(C,)", "copy", _copy, _copy),
    ("bn", "bias"): Rule("bias", "bias", "(C,)", "(C,)", "copy", _copy, _copy),
    ("bn", "running_mean"): Rule(
        "running_mean", "mean", "(C,)", "(C,)", "copy (a batch statistic)", _copy, _copy
    ),
    ("bn", "running_var"): Rule(
        "running_var", "var", "(C,)", "(C,)", "copy (a batch statistic)", _copy, _copy
    ),
    ("bn", "num_batches_tracked"): Rule(
        "num_batches_tracked",
        "num_batches",
        "() int64",
        "() int32",
        "kept for the round trip; inference ignores it",
        _copy,
        _copy,
    ),
    ("linear", "weight"): Rule(
        "weight", "kernel", "(out, in)", "(in, out)", "transpose", _linear, _linear
    ),
    ("linear", "bias"): Rule("bias", "bias", "(out,)", "(out,)", "copy", _copy, _copy),
    ("ln", "weight"): Rule("weight", "scale", "(D,)", "(D,)", "copy", _copy, _copy),
    ("ln", "bias"): Rule("bias", "bias", "(D,)", "(D,)", "copy", _copy, _copy),
}

# DigitsNet's layers with parameters, and their kind.
LAYER_KINDS: dict[str, str] = {
    "conv1": "conv",
    "bn1": "bn",
    "conv2": "conv",
    "fc1": "linear",
    "ln1": "ln",
    "fc2": "linear",
}

CONFIG_NOTES = {
    "bn_epsilon": "BatchNorm eps (torch 1e-5, flax 1e-5, Keras 1e-3 by default)",
    "ln_epsilon": "LayerNorm eps (torch 1e-5, flax 1e-6 by default)",
    "gelu_approximate": "GELU: torch exact by default, jax.nn.gelu tanh by default",
    "flatten_order": "the order conv2's map is flattened in before fc1",
}


def nnx_name(torch_name: str) -> str:
    """The NNX state name ("conv1.kernel") of a torch state-dict name ("conv1.weight")."""
    layer, _, param = torch_name.partition(".")
    if layer not in LAYER_KINDS or (LAYER_KINDS[layer], param) not in RULES:
        raise ConversionError(f"{torch_name!r} is not a DigitsNet parameter")
    if param == "num_batches_tracked":
        return f"{layer}_num_batches"
    return f"{layer}.{RULES[LAYER_KINDS[layer], param].nnx_attribute}"


def layout_table() -> list[dict]:
    """The layout rules as rows (torch name, torch layout, NNX name, NNX layout, rule), plus the
    configuration that is compared rather than converted."""
    rows = []
    for torch_name in twins.TORCH_SHAPES:
        layer, _, param = torch_name.partition(".")
        rule = RULES[LAYER_KINDS[layer], param]
        rows.append(
            {
                "torch name": torch_name,
                "torch layout": rule.torch_layout,
                "NNX name": nnx_name(torch_name),
                "NNX layout": rule.nnx_layout,
                "rule": rule.rule,
            }
        )
    for field, note in CONFIG_NOTES.items():
        value = getattr(twins.SPEC, field)
        rows.append(
            {
                "torch name": f"(config) {field}",
                "torch layout": repr(value),
                "NNX name": f"(config) {field}",
                "NNX layout": repr(value),
                "rule": f"compared, a mismatch refused: {note}",
            }
        )
    return rows


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A deliberately wrong conversion and the layer where its error first shows."""

    description: str
    first_layer: str | None


MISTAKES: dict[str, Mistake] = {
    "none": Mistake("the correct conversion", None),
    "missing_transpose": Mistake(
        "Linear weights reshaped to (in, out) instead of transposed: the shapes fit, the "
        "numbers are scrambled",
        "fc1",
    ),
    "wrong_epsilon": Mistake(
        "BatchNorm epsilon left at Keras's default 1e-3 instead of the model's 1e-5", "bn1"
    ),
    "gelu_swapped": Mistake(
        "every GELU's approximation flipped (exact <-> tanh): jax.nn.gelu's default is tanh",
        "act1",
    ),
    "running_stats_not_copied": Mistake(
        "BatchNorm running mean and variance left at their init (0 and 1)", "bn1"
    ),
    "nchw_flatten": Mistake(
        "conv2's map flattened in NCHW (torch's habit) while fc1's weights expect NHWC",
        "flatten",
    ),
}


def _as_numpy(value, name: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            raise ConversionError(f"{name}: dtype bfloat16, expected float32")
        value = value.numpy()
    if not isinstance(value, np.ndarray | np.generic | jnp.ndarray):
        raise ConversionError(f"{name}: expected an array, got {type(value).__name__}")
    return np.asarray(value)


def _expected_dtype(torch_name: str) -> np.dtype:
    return np.dtype(np.int64 if torch_name.endswith("num_batches_tracked") else np.float32)


def check_state_dict(state_dict: Mapping) -> dict[str, np.ndarray]:
    """The state dict as NumPy arrays, after checking every name, shape and dtype against
    DigitsNet's (ConversionError naming the first parameter that does not fit)."""
    names = list(state_dict)
    missing = [n for n in twins.TORCH_SHAPES if n not in state_dict]
    extra = [n for n in names if n not in twins.TORCH_SHAPES]
    if missing:
        raise ConversionError(f"missing parameter {missing[0]!r} (missing: {', '.join(missing)})")
    if extra:
        raise ConversionError(f"unexpected parameter {extra[0]!r} (extra: {', '.join(extra)})")
    arrays = {}
    for name, shape in twins.TORCH_SHAPES.items():
        array = _as_numpy(state_dict[name], name)
        if array.shape != shape:
            raise ConversionError(f"{name}: shape {array.shape}, expected {shape}")
        expected = _expected_dtype(name)
        if array.dtype != expected:
            raise ConversionError(f"{name}: dtype {array.dtype}, expected {expected}")
        arrays[name] = array
    count = int(arrays["bn1.num_batches_tracked"])
    if not 0 <= count < 2**31:
        raise ConversionError(f"bn1.num_batches_tracked: {count} does not fit int32")
    return arrays


def nnx_config(model: twins.NNXDigitsNet) -> twins.Config:
    """What the NNX model computes, read from its layers (epsilons) and its config."""
    return dataclasses.replace(
        model.config, bn_epsilon=float(model.bn1.epsilon), ln_epsilon=float(model.ln1.epsilon)
    )


def torch_config(module) -> twins.Config:
    """What the torch model computes, read from its layers (epsilons) and its config."""
    base = getattr(module, "config", twins.SPEC)
    return dataclasses.replace(
        base, bn_epsilon=float(module.bn1.eps), ln_epsilon=float(module.ln1.eps)
    )


def compare_configs(source: twins.Config, target: twins.Config) -> None:
    """ConversionError naming every field where the target computes something else."""
    differences = source.differences(target)
    if differences:
        raise ConversionError(
            "the target model's configuration differs from the source's (not weights, so "
            "not converted): " + "; ".join(differences)
        )


def torch_to_nnx(
    state_dict: Mapping,
    config: twins.Config = twins.SPEC,
    *,
    target: twins.NNXDigitsNet | None = None,
    mistake: str = "none",
) -> twins.NNXDigitsNet:
    """An NNX DigitsNet holding the torch ``state_dict`` (tensors or NumPy, torch layout).

    ``config`` is what the torch model computes (``torch_config(module)``). With ``target``
    the weights go into that model after its configuration is compared with ``config``;
    otherwise a fresh model with ``config`` is made. ``mistake`` (a name in ``MISTAKES``, only
    without ``target``) makes a deliberately wrong conversion for the lesson.
    """
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    arrays = check_state_dict(state_dict)
    if target is not None:
        if mistake != "none":
            raise ValueError("a mistake is injected into a fresh model, not into a target")
        compare_configs(config, nnx_config(target))
        model = target
    else:
        if mistake == "wrong_epsilon":
            config = dataclasses.replace(config, bn_epsilon=1e-3)
        elif mistake == "gelu_swapped":
            config = dataclasses.replace(
                config, gelu_approximate=tuple(not a for a in config.gelu_approximate)
            )
        elif mistake == "nchw_flatten":
            config = dataclasses.replace(config, flatten_order="NCHW")
        # Abstract (shapes only, no random init to compile): conversion sets every variable.
        model = nnx.eval_shape(lambda: twins.NNXDigitsNet(config, rngs=nnx.Rngs(0)))
    for torch_name, array in arrays.items():
        layer, _, param = torch_name.partition(".")
        rule = RULES[LAYER_KINDS[layer], param]
        if param == "num_batches_tracked":
            model.bn1_num_batches.set_value(jnp.asarray(array.astype(np.int32)))
            continue
        if mistake == "running_stats_not_copied" and param in ("running_mean", "running_var"):
            continue
        variable = getattr(getattr(model, layer), rule.nnx_attribute)
        if mistake == "missing_transpose" and LAYER_KINDS[layer] == "linear" and param == "weight":
            value = array.reshape(array.shape[::-1])
        else:
            value = rule.to_nnx(array)
        if tuple(variable.get_value().shape) != value.shape:
            raise ConversionError(
                f"{torch_name} -> {nnx_name(torch_name)}: shape {value.shape}, the model "
                f"holds {tuple(variable.get_value().shape)}"
            )
        if np.dtype(variable.get_value().dtype) != value.dtype:
            raise ConversionError(
                f"{torch_name} -> {nnx_name(torch_name)}: dtype {value.dtype}, the model "
                f"holds {np.dtype(variable.get_value().dtype)}"
            )
        variable.set_value(jnp.asarray(value))
    if mistake == "running_stats_not_copied":
        model.bn1.mean.set_value(jnp.zeros(model.bn1.mean.get_value().shape, jnp.float32))
        model.bn1.var.set_value(jnp.ones(model.bn1.var.get_value().shape, jnp.float32))
    abstract = [
        ".".join(map(str, path))
        for path, leaf in nnx.to_flat_state(nnx.state(model))
        if not isinstance(leaf.get_value(), jax.Array)
    ]
    if abstract:  # every variable of DigitsNet has a torch counterpart: none may stay unset
        raise ConversionError(f"not set by the conversion: {', '.join(abstract)}")
    return model


def nnx_to_torch(model: twins.NNXDigitsNet) -> dict[str, np.ndarray]:
    """The NNX model's weights as a torch-layout state dict (NumPy; ``as_tensors`` for torch)."""
    out = {}
    for torch_name, shape in twins.TORCH_SHAPES.items():
        layer, _, param = torch_name.partition(".")
        rule = RULES[LAYER_KINDS[layer], param]
        if param == "num_batches_tracked":
            out[torch_name] = np.asarray(model.bn1_num_batches[...]).astype(np.int64)
            continue
        value = rule.to_torch(np.asarray(getattr(getattr(model, layer), rule.nnx_attribute)[...]))
        if value.shape != shape:
            raise ConversionError(f"{nnx_name(torch_name)}: shape {value.shape} -> {shape}")
        if value.dtype != np.float32:
            raise ConversionError(f"{nnx_name(torch_name)}: dtype {value.dtype}, expected float32")
        out[torch_name] = value
    return out


def as_tensors(state: Mapping[str, np.ndarray]) -> dict:
    """A NumPy state dict as torch tensors (copies), for ``load_state_dict``."""
    import torch

    return {name: torch.from_numpy(np.array(value)) for name, value in state.items()}


def from_torch_model(module, *, target=None, mistake: str = "none") -> twins.NNXDigitsNet:
    """The torch twin converted to NNX, its configuration read from the module."""
    return torch_to_nnx(module.state_dict(), torch_config(module), target=target, mistake=mistake)


def to_torch_model(model: twins.NNXDigitsNet):
    """The NNX twin converted to a torch twin (eval mode) with the same configuration."""
    return twins.torch_model(nnx_to_torch(model), nnx_config(model))


def seeded_nnx(seed: int = 0, config: twins.Config = twins.SPEC) -> twins.NNXDigitsNet:
    """The NNX twin holding ``twins.seeded_weights(seed)`` (converted without torch: the same
    numbers as ``from_torch_model(twins.seeded_torch(seed))``)."""
    return torch_to_nnx(twins.seeded_weights(seed), config)


@dataclasses.dataclass(frozen=True)
class Parity:
    """A converted NNX model against its torch source on one batch, layer by layer."""

    mistake: str
    diff: activations.Diff
    logits_nnx_BK: np.ndarray
    logits_torch_BK: np.ndarray

    @property
    def expected_layer(self) -> str | None:
        """Where the injected mistake should first show (None: no mistake, all should agree)."""
        return MISTAKES[self.mistake].first_layer


def parity(seed: int, batch: int, mistake: str = "none", tolerance: float | None = None) -> Parity:
    """Convert the torch twin with ``seeded_weights(seed)`` (injecting ``mistake``), run both on
    ``batch`` digits images (drawn by ``seed``), and diff every layer (float32 tolerance)."""
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    source = twins.seeded_torch(seed)
    model = from_torch_model(source, mistake=mistake)
    x_BHWC = twins.digits_batch(batch, seed)
    run = twins.nnx_activations(model, x_BHWC)
    reference = twins.torch_activations(source, x_BHWC)
    return Parity(
        mistake, activations.diff(run, reference, tolerance), run[-1][1], reference[-1][1]
    )
