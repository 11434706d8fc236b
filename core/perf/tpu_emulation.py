"""Run any JAX function with its float32 matmuls computed the way a TPU's MXU computes them.

A TPU runs a float32 ``dot_general`` (and a float32 convolution, on the same MXU) as bfloat16
passes accumulated in float32, as many as the precision asks (DEFAULT 1, HIGH 3, HIGHEST 6;
core.perf.precision.MXU_PASSES). A CPU computes it in float32 whatever the precision says.
``emulate(fn)`` traces ``fn`` to a jaxpr (where each dot_general and conv_general_dilated
carries the precision it was traced at: its ``precision=`` or the
``jax.default_matmul_precision`` in force) and evaluates it with every float32 one replaced by
those bfloat16 passes, on any backend: a check that must hold on a TPU can be tried on a CPU.
Everything else (tanh, exp, reductions) runs as this backend runs it, so this emulates the
MXU, not a TPU's elementwise approximations. Matrix-vector products are emulated in bfloat16
passes too, where a TPU may run them in float32 (jax#16349): the cautious side.

Function calls (jit, custom_jvp/vjp, remat) are evaluated inline; scan, while and cond get
their bodies rewritten. A primitive with any other sub-program (shard_map, pallas_call) is
refused rather than run unemulated if it holds a matmul or a convolution.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

from core.perf import precision as precision_lib

# Primitives whose sub-program is a function call: evaluating it inline gives the same values.
_INLINE = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
}
# Primitives with sub-programs that are rebuilt with the emulation inside and bound again.
_REBIND = {"scan": ("jaxpr",), "while": ("cond_jaxpr", "body_jaxpr"), "cond": ("branches",)}


def precision_name(precision, default: str = "DEFAULT") -> str:
    """ "DEFAULT", "HIGH" or "HIGHEST" for a dot_general's ``precision`` parameter: None, one
    lax.Precision, a pair (the higher of the two wins, as on a TPU), or a DotAlgorithmPreset
    (its name); ``default`` where it says nothing."""
    if precision is None:
        return default
    if isinstance(precision, tuple):
        names = [precision_name(p, default) for p in precision]
        return max(names, key=("DEFAULT", "HIGH", "HIGHEST").index)
    name = getattr(precision, "name", str(precision)).upper()
    if name in ("DEFAULT", "HIGH", "HIGHEST"):
        return name
    if "BF16_BF16_F32_X6" in name or "F32_F32_F32" in name:
        return "HIGHEST"
    if "BF16_BF16_F32_X3" in name or "TF32" in name:
        return "HIGH"
    if "BF16_BF16_F32" in name:
        return "DEFAULT"
    raise ValueError(f"no MXU emulation for the dot precision {precision!r}")


def mxu_dot_general(x, y, *, dimension_numbers, precision: str, preferred_element_type=None):
    """``lax.dot_general`` of float32 operands as the MXU computes it at ``precision``: each
    operand split into bfloat16 terms, the term products of MXU_PASSES accumulated in float32
    (smallest first)."""

    def product(a, b):
        return lax.dot_general(
            a,
            b,
            dimension_numbers,
            precision=lax.Precision.HIGHEST,
            preferred_element_type=jnp.float32,
        )

    out = _mxu_passes(x, y, precision, product)
    return out.astype(preferred_element_type or jnp.float32)


def mxu_conv(x, y, *, precision: str, **params):
    """``lax.conv_general_dilated`` (its primitive's ``params``) of float32 operands as the MXU
    computes it at ``precision``: a convolution is bilinear in its two operands, so it splits
    into the same bfloat16 term products as a matmul."""
    preferred = params.pop("preferred_element_type", None)
    params["precision"] = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)

    def product(a, b):
        return lax.conv_general_dilated_p.bind(a, b, preferred_element_type=jnp.float32, **params)

    return _mxu_passes(x, y, precision, product).astype(preferred or jnp.float32)


def _mxu_passes(x, y, precision: str, product):
    """The float32 sum of ``product`` (bilinear, computed in float32) over the bfloat16 term
    pairs MXU_PASSES[precision] takes of ``x`` and ``y``, smallest first."""
    pairs = precision_lib.MXU_PASSES[precision]
    count = 1 + max(max(pair) for pair in pairs)
    xs = precision_lib.bfloat16_terms(x, count)
    ys = precision_lib.bfloat16_terms(y, count)
    # The terms go back to float32 (exactly: a bfloat16 value is a float32 value, and the
    # product of two 8-bit significands fits float32's 24): XLA:CPU has no bfloat16 x bfloat16
    # -> float32 kernel for every dot shape (matrix-vector products raise UNIMPLEMENTED).
    xs = [t.astype(jnp.float32) for t in xs]
    ys = [t.astype(jnp.float32) for t in ys]
    out = None
    for i, j in reversed(pairs):
        term = product(xs[i], ys[j])
        out = term if out is None else out + term
    return out


def _run(jaxpr, consts, args, default: str):
    """Evaluate ``jaxpr`` (open) on ``args`` with float32 dot_generals emulated."""
    env = {}

    def read(v):
        return v.val if isinstance(v, jex_core.Literal) else env[v]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name == "dot_general" and all(
            getattr(v.aval, "dtype", None) == jnp.float32 for v in eqn.invars
        ):
            outs = [
                mxu_dot_general(
                    *invals,
                    dimension_numbers=eqn.params["dimension_numbers"],
                    precision=precision_name(eqn.params.get("precision"), default),
                    preferred_element_type=eqn.params.get("preferred_element_type"),
                )
            ]
        elif name == "conv_general_dilated" and all(
            getattr(v.aval, "dtype", None) == jnp.float32 for v in eqn.invars
        ):
            params = dict(eqn.params)
            level = precision_name(params.pop("precision"), default)
            outs = [mxu_conv(*invals, precision=level, **params)]
        elif name in _INLINE and _INLINE[name] in eqn.params:
            sub = eqn.params[_INLINE[name]]
            sub_jaxpr, sub_consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, [])
            outs = _run(sub_jaxpr, sub_consts, invals, default)
        elif name in _REBIND:
            params = dict(eqn.params)
            for key in _REBIND[name]:
                value = params[key]
                params[key] = (
                    tuple(_emulated_closed(b, default) for b in value)
                    if isinstance(value, tuple)
                    else _emulated_closed(value, default)
                )
            outs = _as_list(eqn, eqn.primitive.bind(*invals, **params))
        elif any(_holds_dot(p) for p in eqn.params.values()):
            raise NotImplementedError(f"no MXU emulation inside {name!r}")
        else:
            outs = _as_list(eqn, eqn.primitive.bind(*invals, **eqn.params))
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _as_list(eqn, outs) -> list:
    return list(outs) if eqn.primitive.multiple_results else [outs]


def _holds_dot(param) -> bool:
    """Whether ``param`` is or holds a sub-program with a dot_general or a convolution (the
    MXU's work; scatter's combiner, say, holds none: it runs as it is)."""
    if isinstance(param, (tuple, list)):
        return any(_holds_dot(p) for p in param)
    if isinstance(param, jex_core.ClosedJaxpr):
        param = param.jaxpr
    if not isinstance(param, jex_core.Jaxpr):
        return False
    return any(
        eqn.primitive.name in ("dot_general", "conv_general_dilated")
        or any(_holds_dot(p) for p in eqn.params.values())
        for eqn in param.eqns
    )


def _emulated_closed(closed, default: str):
    """``closed`` (a ClosedJaxpr) rebuilt with its dot_generals and convolutions emulated."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    body = functools.partial(_run, closed.jaxpr, closed.consts, default=default)
    return jax.make_jaxpr(lambda *args: body(list(args)))(*avals)


def emulate(fn, default: str = "DEFAULT"):
    """``fn`` with every float32 matmul and convolution computed as a TPU's MXU computes it: at
    the precision each was traced at (its own ``precision=`` or the
    ``jax.default_matmul_precision`` in force when ``emulate(fn)(...)`` is called), ``default``
    where that says DEFAULT or nothing. Returns the same pytree ``fn`` returns; jitted."""

    # One jit for the returned function: its cache (keyed by the arguments' shapes and the
    # jax.default_matmul_precision in force, which is part of every jit key) compiles each
    # program once, where a jit built on every call compiled again on every call.
    @jax.jit
    def emulated(*args, **kwargs):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
        flat = jax.tree.leaves((args, kwargs))
        outs = _run(closed.jaxpr, closed.consts, flat, default)
        return jax.tree.unflatten(jax.tree.structure(shape), outs)

    return emulated
