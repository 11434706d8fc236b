"""The assessment item of the phase "Deployment, interoperability & edge AI".

- ``deployment.weight_conversion`` (diagnose): PyTorch-layout weights into a JAX forward.
"""

from __future__ import annotations

import textwrap

import numpy as np

from core.assessment.bank.common import run_program
from core.assessment.items import DiagnoseItem, Evidence, Item


def _torch_forward(state: dict[str, np.ndarray], x_NCHW: np.ndarray) -> np.ndarray:
    """PyTorch's semantics in NumPy float64 (torch itself is not imported: slow): Conv2d
    (OIHW weight, 3x3, padding 1, cross-correlation) + bias, ReLU, mean over H and W, then
    Linear y = h Wᵀ + b with W (out, in)."""
    weight = np.asarray(state["conv.weight"], np.float64)  # (O, I, 3, 3)
    x = np.pad(np.asarray(x_NCHW, np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = x_NCHW.shape[2:]
    conv = np.zeros((x_NCHW.shape[0], weight.shape[0], height, width))
    for dy in range(3):
        for dx in range(3):
            window = x[:, :, dy : dy + height, dx : dx + width]  # (N, I, H, W)
            conv += np.einsum("nihw,oi->nohw", window, weight[:, :, dy, dx])
    conv += np.asarray(state["conv.bias"], np.float64)[None, :, None, None]
    pooled = np.maximum(conv, 0.0).mean(axis=(2, 3))  # (N, C)
    fc_weight = np.asarray(state["fc.weight"], np.float64)
    return pooled @ fc_weight.T + np.asarray(state["fc.bias"], np.float64)


def error_vs_torch(namespace: dict, y) -> float:
    """max |y - torch's output| / max |torch's output| for a conversion program's run
    (``namespace``: its torch_state and x_NCHW; ``y``: the JAX forward pass's output)."""
    reference = _torch_forward(namespace["torch_state"], namespace["x_NCHW"])
    got = np.asarray(y, np.float64)
    return float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))


class WeightConversion(DiagnoseItem):
    id = "deployment.weight_conversion"
    phase = "Deployment, interoperability & edge AI"
    lesson = "torch_to_flax"
    title = "PyTorch weights into a JAX forward pass"
    defects = {
        "linear_not_transposed": (
            "The Linear weight is not transposed: (out, in) used as (in, out)",
            "torch's Linear stores W as (out, in) and computes x Wᵀ + b; a Flax Dense kernel "
            "is (in, out) and computes x K + b, so K = Wᵀ. With a square layer the shapes "
            "still fit and nothing fails: compare one layer's output with the torch "
            "semantics to find it. Fix: `fc.weight.T`.",
        ),
        "conv_wrong_layout": (
            "The conv kernel is transposed to the wrong layout (HWOI, not HWIO)",
            "torch's Conv2d weight is OIHW; `lax.conv_general_dilated` with "
            "dimension_numbers ('NHWC', 'HWIO', 'NHWC') needs HWIO: transpose(2, 3, 1, 0). "
            "transpose(2, 3, 0, 1) gives HWOI, which has the same shape when in = out "
            "channels, so it runs and mixes the channels wrongly.",
        ),
        "bias_dropped": (
            "The conv bias is converted but never added",
            "Conv2d has a bias by default (bias=True); the converted `conv_bias` must be "
            "added before the ReLU. Without it every activation is shifted and the ReLU cuts "
            "at the wrong place: the outputs stay plausible, and wrong.",
        ),
        "bf16_roundtrip": (
            "The weights are rounded through bfloat16 on the way in",
            "Storing the converted weights in bfloat16 keeps 8 bits of mantissa: each weight "
            "moves by up to 2^-8 relative, and the outputs differ from torch's float32 ones "
            "by ~1e-3 relative, far above float32's ~1e-6. Convert in float32 and choose "
            "lower precision later, on purpose, with a measured tolerance.",
        ),
    }

    def params(self, generator):
        return {
            "channels": int(generator.integers(3, 9)),
            "size": int(generator.integers(5, 9)),
            "batch": int(generator.integers(2, 5)),
            "data_seed": int(generator.integers(0, 10_000)),
        }

    def prompt(self, params):
        return (
            "This program converts a PyTorch model's weights (a Conv2d and a Linear, both "
            f"{params['channels']} channels in and out, held as NumPy arrays in torch's layouts) "
            "into a JAX forward pass. It runs and returns numbers of the right shape, but they "
            "do not match the PyTorch model. Which defect is planted?"
        )

    def program(self, defect, params):
        c, s, n = params["channels"], params["size"], params["batch"]
        to_jax = (
            "jnp.asarray(a, jnp.bfloat16).astype(jnp.float32)  # bf16 halves the memory"
            if defect == "bf16_roundtrip"
            else "jnp.asarray(a, jnp.float32)"
        )
        conv_axes = "(2, 3, 0, 1)" if defect == "conv_wrong_layout" else "(2, 3, 1, 0)"
        fc = '"fc.weight"]' if defect == "linear_not_transposed" else '"fc.weight"].T'
        bias = "" if defect == "bias_dropped" else ' + params["conv_bias"]'
        return textwrap.dedent(
            f"""\
            import jax
            import jax.numpy as jnp
            import numpy as np

            rng = np.random.default_rng({params["data_seed"]})
            torch_state = {{  # a torch Conv2d({c}, {c}, 3, padding=1) and Linear({c}, {c})
                "conv.weight": rng.normal(size=({c}, {c}, 3, 3)).astype(np.float32),  # OIHW
                "conv.bias": rng.normal(size=({c},)).astype(np.float32),
                "fc.weight": rng.normal(size=({c}, {c})).astype(np.float32),  # (out, in)
                "fc.bias": rng.normal(size=({c},)).astype(np.float32),
            }}
            x_NCHW = rng.normal(size=({n}, {c}, {s}, {s})).astype(np.float32)


            def to_jax(a):
                return {to_jax}


            params = {{
                "conv": to_jax(torch_state["conv.weight"].transpose{conv_axes}),  # -> HWIO
                "conv_bias": to_jax(torch_state["conv.bias"]),
                "fc": to_jax(torch_state[{fc}),  # -> (in, out)
                "fc_bias": to_jax(torch_state["fc.bias"]),
            }}


            # HIGHEST: float32 products on a TPU too (its DEFAULT is one bfloat16 pass, ~1e-3)
            HIGHEST = jax.lax.Precision.HIGHEST


            def forward(params, x_NHWC):
                h = jax.lax.conv_general_dilated(
                    x_NHWC, params["conv"], (1, 1), "SAME",
                    dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=HIGHEST,
                )
                h = jax.nn.relu(h{bias})
                pooled = h.mean(axis=(1, 2))
                return jnp.dot(pooled, params["fc"], precision=HIGHEST) + params["fc_bias"]


            y = jax.jit(forward)(params, x_NCHW.transpose(0, 2, 3, 1))  # NCHW -> NHWC
            """
        )

    def evidence(self, defect, params):
        errors = {}
        for variant in (defect, "fixed"):
            namespace = run_program(self.program(variant, params), "<conversion program>")
            errors[variant] = error_vs_torch(namespace, namespace["y"])
        markdown = (
            "Both conversions ran here and were compared with the PyTorch model's forward pass "
            "written in NumPy float64 with torch's semantics (Conv2d on NCHW with an OIHW "
            "weight, y = x Wᵀ + b for the Linear; torch itself is not imported):\n\n"
            "| conversion | max error / max output |\n|---|---|\n"
            f"| this program | {errors[defect]:.2e} |\n| fixed | {errors['fixed']:.2e} |\n\n"
            "The fixed conversion agrees to float32 rounding (~1e-6); the planted defect moves "
            "the outputs far beyond it while the shapes stay right."
        )
        return Evidence(
            markdown,
            {
                "the fixed conversion matches torch semantics (< 1e-5 relative)": (
                    errors["fixed"] < 1e-5
                ),
                "the defect changes the result (> 1e-4 relative)": errors[defect] > 1e-4,
            },
        )


ITEMS: tuple[Item, ...] = (WeightConversion(),)
