"""The assessment item of the phase "Neural network training".

- ``nn_training.parameter_count`` (predict a count): trainable numbers of a Flax NNX model.
"""

from __future__ import annotations

from flax import nnx

from core.assessment.bank.common import run_source
from core.assessment.items import Item, PredictItem
from core.nn import nnx_models


class ParameterCount(PredictItem):
    """The number of trainable parameters of a small Flax NNX model."""

    id = "nn_training.parameter_count"
    phase = "Neural network training"
    lesson = "flax_nnx"
    title = "Parameters of an NNX model"
    rel_tol = 0.0
    abs_tol = 0.5

    WIDTHS = (6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
    BUILD = "model = Net(nnx.Rngs(0))"

    def params(self, generator):
        linears = int(generator.integers(2, 5))
        sizes = [int(generator.choice(self.WIDTHS)) for _ in range(linears)]
        sizes.append(int(generator.integers(2, 11)))  # classes
        hidden = range(linears - 1)  # layers followed by an activation
        layer_norm = tuple(bool(generator.integers(2)) for _ in hidden)
        no_bias = int(generator.integers(linears - 1)) if generator.integers(3) == 0 else -1
        return {
            "sizes": tuple(sizes),
            "layer_norm": layer_norm,  # after hidden layer i
            "no_bias": no_bias,  # the index of a hidden layer built with use_bias=False, or -1
            "dropout": bool(generator.integers(2)),
        }

    def source(self, params) -> str:
        sizes, linears = params["sizes"], len(params["sizes"]) - 1
        init, call = [], []
        for i in range(linears):
            bias = ", use_bias=False" if i == params["no_bias"] else ""
            init.append(
                f"        self.linear{i} = nnx.Linear({sizes[i]}, {sizes[i + 1]}{bias}, rngs=rngs)"
            )
            call.append(f"        h = self.linear{i}(h)")
            if i < linears - 1:
                if params["layer_norm"][i]:
                    init.append(f"        self.norm{i} = nnx.LayerNorm({sizes[i + 1]}, rngs=rngs)")
                    call.append(f"        h = self.norm{i}(h)")
                call.append("        h = nnx.relu(h)")
        if params["dropout"]:
            init.append("        self.dropout = nnx.Dropout(0.1, rngs=rngs)")
            call.insert(len(call) - 1, "        h = self.dropout(h)")
        return (
            "from flax import nnx\n\n\n"
            "class Net(nnx.Module):\n"
            "    def __init__(self, rngs: nnx.Rngs):\n"
            + "\n".join(init)
            + "\n\n    def __call__(self, x):\n        h = x\n"
            + "\n".join(call)
            + "\n        return h\n\n\n"
            f"{self.BUILD}\n"
        )

    def prompt(self, params):
        return (
            f"```python\n{self.source(params)}```\n\n"
            "How many trainable parameters (the elements of `nnx.state(model, nnx.Param)`) "
            "does `model` have?"
        )

    def live(self, params):
        # The class as shown, built abstractly (shapes only, no initializers run: fast).
        namespace, _ = run_source(self.source(params).replace(self.BUILD, ""))
        net = namespace["Net"]
        model = nnx.eval_shape(lambda: net(nnx.Rngs(0)))
        return float(nnx_models.count_params(model))

    def _terms(self, params) -> list[tuple[str, int, str]]:
        """(layer, parameters, formula) per layer that has any."""
        sizes, terms = params["sizes"], []
        for i in range(len(sizes) - 1):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            if i == params["no_bias"]:
                terms.append((f"linear{i}", fan_in * fan_out, f"{fan_in}×{fan_out} (no bias)"))
            else:
                formula = f"{fan_in}×{fan_out} + {fan_out}"
                terms.append((f"linear{i}", fan_in * fan_out + fan_out, formula))
            if i < len(sizes) - 2 and params["layer_norm"][i]:
                terms.append((f"norm{i}", 2 * fan_out, f"2×{fan_out} (scale and bias)"))
        return terms

    def derive(self, params):
        terms = self._terms(params)
        total = sum(count for _, count, _ in terms)
        rows = "\n".join(f"| {name} | {formula} | {count} |" for name, count, formula in terms)
        derivation = (
            "An `nnx.Linear(in, out)` holds an (in, out) kernel and an (out,) bias "
            "(none with `use_bias=False`); an `nnx.LayerNorm(d)` a (d,) scale and a (d,) "
            "bias; `relu` and `Dropout` hold no parameters.\n\n"
            f"| layer | in×out + out | parameters |\n|---|---|---|\n{rows}\n\n"
            f"Total: {' + '.join(str(c) for _, c, _ in terms)} = **{total}**."
        )
        return float(total), derivation

    def wrong(self, params, expected):
        sizes = params["sizes"]
        biases = sum(sizes[i + 1] for i in range(len(sizes) - 1) if i != params["no_bias"])
        last = len(sizes) - 2
        last_layer = sizes[last] * sizes[last + 1] + (
            sizes[last + 1] if last != params["no_bias"] else 0
        )
        found = {
            "biases forgotten": expected - biases,
            "the output layer left out (hidden layers only)": expected - last_layer,
        }
        norms = sum(2 * sizes[i + 1] for i, on in enumerate(params["layer_norm"]) if on)
        if norms:
            found["LayerNorm's scale and bias left out"] = expected - norms
        return found


ITEMS: tuple[Item, ...] = (ParameterCount(),)
