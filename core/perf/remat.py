"""Rematerialization (jax.checkpoint) policies on a small MLP: what is saved, what it costs.

Reverse-mode autodiff saves forward-pass values ("residuals") for the backward pass.
``jax.checkpoint(f, policy=...)`` decides which to keep and which to recompute:

- no remat: save whatever the backward pass needs (the default);
- ``everything_saveable``: inside checkpoint, save everything (like no remat);
- ``dots_saveable`` (alias ``checkpoint_dots``): save matmul outputs, recompute the
  elementwise work (tanh) from them;
- ``nothing_saveable``: save only the checkpointed function's inputs; recompute all.

Three different kinds of evidence, kept apart in the lesson: the residuals JAX saves
(``jax.ad_checkpoint.print_saved_residuals``), the compiler's memory estimate
(``memory_analysis()`` of the compiled gradient), and the observed step time.

Dimension glossary: B batch, W width of the hidden layers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import re

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np

from core import numerics

POLICIES = ("none", "everything_saveable", "dots_saveable", "nothing_saveable")


def policy(name: str):
    """The jax.checkpoint policy for ``name`` (None for "none": no checkpoint at all)."""
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {name!r}")
    return None if name == "none" else getattr(jax.checkpoint_policies, name)


def init_mlp(key: jax.Array, width: int, depth: int, batch: int):
    """(params, x, y): ``depth`` tanh layers of width W, inputs x (B, W), targets y (B, W)."""
    if min(width, depth, batch) < 1:
        raise ValueError(f"width, depth and batch must be >= 1, got {(width, depth, batch)}")
    keys = jax.random.split(key, depth + 2)
    params = [
        (
            jax.random.normal(k, (width, width), jnp.float32) / np.sqrt(width),
            jnp.full((width,), 0.01, jnp.float32),
        )
        for k in keys[:depth]
    ]
    x = jax.random.normal(keys[-2], (batch, width), jnp.float32)
    y = jax.random.normal(keys[-1], (batch, width), jnp.float32)
    return params, x, y


def forward(params, x_BW):
    for w_WW, b_W in params:
        x_BW = jnp.tanh(x_BW @ w_WW + b_W)
    return x_BW


def loss_fn(policy_name: str):
    """Mean squared error of the MLP, its forward pass checkpointed with the policy."""
    chosen = policy(policy_name)
    net = forward if policy_name == "none" else jax.checkpoint(forward, policy=chosen)

    def loss(params, x_BW, y_BW):
        return jnp.mean((net(params, x_BW) - y_BW) ** 2)

    return loss


@functools.cache
def grad_fn(policy_name: str):
    """jitted (params, x, y) -> gradients w.r.t. params (one per policy, so compiles are reused)."""
    return jax.jit(jax.grad(loss_fn(policy_name)))


_DTYPE_BYTES = {
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "f64": 8,
    "i32": 4,
    "s32": 4,
    "bool": 1,
    "u8": 1,
    "i8": 1,
}


@dataclasses.dataclass(frozen=True)
class Residual:
    dtype: str
    shape: tuple[int, ...]
    source: str  # what JAX says it is: an argument, or the output of a primitive

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _DTYPE_BYTES.get(self.dtype, 4)

    @property
    def from_argument(self) -> bool:
        return "argument" in self.source


def parse_residual_line(line: str) -> Residual:
    """``"f32[64,128] output of dot_general from ..."`` -> Residual."""
    match = re.match(r"\s*([a-z]+[0-9]*)\[([0-9,\s]*)\]\s*(.*)", line)
    if not match:
        raise ValueError(f"cannot read a residual from {line!r}")
    dims = tuple(int(d) for d in match.group(2).replace(" ", "").split(",") if d)
    return Residual(match.group(1), dims, match.group(3).strip())


def saved_residuals(policy_name: str, params, x_BW, y_BW) -> tuple[list[Residual], str]:
    """What the backward pass keeps, as printed by jax.ad_checkpoint.print_saved_residuals.

    Returns (parsed residuals, the printed text).
    """
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        jax.ad_checkpoint.print_saved_residuals(loss_fn(policy_name), params, x_BW, y_BW)
    text = buffer.getvalue()
    return [parse_residual_line(line) for line in text.splitlines() if line.strip()], text


def compiled_memory(
    policy_name: str, params, x_BW, y_BW, topology: str | None = None
) -> dict[str, int]:
    """memory_analysis() of the compiled gradient: on this CPU (the host's, whatever JAX's
    default backend), or for a TPU topology's chip."""
    from core import runtime
    from core.tpu import topology_compile

    if topology is None:
        with jax.default_device(runtime.cpu_device()):
            compiled = grad_fn(policy_name).lower(params, x_BW, y_BW).compile()
        return topology_compile.memory_dict(compiled)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (params, x_BW, y_BW))
    specs = jax.tree.map(lambda a: jax.sharding.PartitionSpec(), shapes)
    report, _ = topology_compile.compile_for_topology(
        jax.grad(loss_fn(policy_name)), shapes, specs, topology
    )
    return report.memory


def mlp_grads_numpy(params, x_BW, y_BW) -> list[tuple[np.ndarray, np.ndarray]]:
    """Gradients of the MSE loss by hand in numpy float64: the independent reference."""
    weights = [(np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in params]
    activations = [np.asarray(x_BW, np.float64)]
    for w, b in weights:
        activations.append(np.tanh(activations[-1] @ w + b))
    out, y = activations[-1], np.asarray(y_BW, np.float64)
    upstream = 2.0 * (out - y) / out.size  # d mean((out - y)^2) / d out
    grads = []
    for (w, _b), h_in, h_out in zip(
        reversed(weights), reversed(activations[:-1]), reversed(activations[1:]), strict=True
    ):
        pre = upstream * (1.0 - h_out**2)  # through tanh
        grads.append((h_in.T @ pre, pre.sum(axis=0)))
        upstream = pre @ w.T
    return grads[::-1]


def max_grad_difference(grads_a, grads_b) -> float:
    """Largest absolute difference (float64) between two pytrees of the same structure
    (gradients, parameters)."""
    leaves_a, leaves_b = jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)
    if len(leaves_a) != len(leaves_b):
        raise ValueError(f"gradient trees differ: {len(leaves_a)} vs {len(leaves_b)} leaves")
    return max(numerics.max_abs_error(a, b) for a, b in zip(leaves_a, leaves_b, strict=True))
