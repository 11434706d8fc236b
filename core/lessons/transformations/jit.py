"""What makes ``jax.jit`` trace a function again: one call per cause, counted live.

A jitted function is traced once per call **signature**: the pytree structure of its
arguments, each leaf's shape, dtype, weak type (a Python scalar is weakly typed, a typed array
is not) and sharding, and the values of its static arguments. A call whose signature was seen
before reuses the cached trace; any other call traces (and compiles) again.

:func:`retrace_table` runs a fixed sequence of calls of one fresh jitted function and counts
its traces with a Python side effect inside it (a list append runs only while tracing, never
when the compiled program runs).
:func:`expected_retraces` applies the rule above to the same calls without calling JAX's
cache: each call's signature written out by hand, traced again iff not seen before.
:data:`EXPECTED` is that rule's answer as a closed-form table.

Glossary: N elements of the example vector (8, one per device of the lab's 8 CPU devices).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

N = 8


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of the traced function: what changes, its arguments and its signature."""

    name: str
    code: str  # what the call looks like
    args: Callable[[], tuple]  # builds (tree, scale) outside the counted region
    static: str  # the static argument's value
    signature: tuple  # (tree structure, leaves (shape, dtype, weak, sharding), scale, static)


def _vector(dtype="float32", n=N):
    return jnp.arange(n, dtype=dtype)


def _sharded(mesh):
    return jax.device_put(
        _vector(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    )


def calls(devices: int) -> list[Call]:
    """The sequence, each call differing from an earlier one in one thing (or nothing).

    ``devices`` > 1 adds a call with the vector sharded over a mesh of that many devices."""
    one = ("f32[8]", "float32", False, "one device")
    scalar_weak = ("f32[]", "float32", True, "one device")
    scalar_typed = ("f32[]", "float32", False, "one device")
    out = [
        Call(
            "first call",
            "f(x, 2.0)",
            lambda: (_vector(), 2.0),
            "sum",
            ("x", one, scalar_weak, "sum"),
        ),
        Call(
            "same signature, new values",
            "f(x + 1, 2.0)",
            lambda: (_vector() + 1, 2.0),
            "sum",
            ("x", one, scalar_weak, "sum"),
        ),
        Call(
            "new shape",
            "f(jnp.arange(16.0), 2.0)",
            lambda: (_vector(n=2 * N), 2.0),
            "sum",
            ("x", ("f32[16]", "float32", False, "one device"), scalar_weak, "sum"),
        ),
        Call(
            "new dtype",
            "f(x.astype(bfloat16), 2.0)",
            lambda: (_vector("bfloat16"), 2.0),
            "sum",
            ("x", ("bf16[8]", "bfloat16", False, "one device"), scalar_weak, "sum"),
        ),
        Call(
            "new pytree structure",
            "f((x, x), 2.0)",
            lambda: ((_vector(), _vector()), 2.0),
            "sum",
            ("(x, x)", one, scalar_weak, "sum"),
        ),
        Call(
            "new static argument value",
            'f(x, 2.0, mode="diff")',
            lambda: (_vector(), 2.0),
            "diff",
            ("x", one, scalar_weak, "diff"),
        ),
        Call(
            "same static value as before",
            'f(x, 2.0, mode="sum")',
            lambda: (_vector(), 2.0),
            "sum",
            ("x", one, scalar_weak, "sum"),
        ),
        Call(
            "typed scalar, not a Python float",
            "f(x, jnp.float32(2.0))",
            lambda: (_vector(), jnp.float32(2.0)),
            "sum",
            ("x", one, scalar_typed, "sum"),
        ),
        Call(
            "another Python float",
            "f(x, 3.0)",
            lambda: (_vector(), 3.0),
            "sum",
            ("x", one, scalar_weak, "sum"),
        ),
    ]
    if devices > 1:
        mesh = jax.make_mesh((devices,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        sharded = ("f32[8]", "float32", False, f"split over {devices} devices")
        out.append(
            Call(
                "new sharding",
                f'f(device_put(x, P("x") over {devices} devices), 2.0)',
                lambda: (_sharded(mesh), 2.0),
                "sum",
                ("x", sharded, scalar_weak, "sum"),
            )
        )
    return out


def expected_retraces(sequence: list[Call]) -> list[bool]:
    """The rule: a call traces again iff its signature was not seen before (no JAX involved)."""
    seen, out = set(), []
    for call in sequence:
        out.append(call.signature not in seen)
        seen.add(call.signature)
    return out


# The rule's answer for the sequence of :func:`calls`, in order (the sharding call last).
EXPECTED = {
    "first call": True,
    "same signature, new values": False,
    "new shape": True,
    "new dtype": True,
    "new pytree structure": True,
    "new static argument value": True,
    "same static value as before": False,
    "typed scalar, not a Python float": True,
    "another Python float": False,
    "new sharding": True,
}


def traced_function(traces: list):
    """A fresh jitted ``f(tree, scale, mode)``: appends to ``traces`` each time it is traced."""

    @functools.partial(jax.jit, static_argnames="mode")
    def f(tree, scale, mode="sum"):
        traces.append(mode)  # a Python side effect: runs while tracing, not when executing
        total = sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree.leaves(tree))
        return total * scale if mode == "sum" else total - scale

    return f


def retrace_table(devices: int) -> list[dict]:
    """Run :func:`calls` on one fresh jitted function: per call, whether it traced again (seen
    live), the rule's expectation and the result's relative error against NumPy float64."""
    traces: list = []
    f = traced_function(traces)
    sequence = calls(devices)
    rows = []
    for call, expect in zip(sequence, expected_retraces(sequence), strict=True):
        tree, scale = call.args()
        before = len(traces)
        result = float(f(tree, scale, mode=call.static))
        total = sum(np.asarray(leaf, np.float64).sum() for leaf in jax.tree.leaves(tree))
        reference = total * float(scale) if call.static == "sum" else total - float(scale)
        rows.append(
            {
                "call": call.name,
                "code": call.code,
                "traced again?": "yes" if len(traces) > before else "no",
                "rule says": "yes" if expect else "no",
                "result error": abs(result - reference) / max(abs(reference), 1.0),
            }
        )
    return rows
