"""Causal attention kernels side by side: this project's flash kernel, JAX's Pallas flash
attention, JAX's splash attention and XLA's attention, over block sizes, with a time budget.

Shapes: q, k, v (B, H, T, D) (batch, heads, sequence, head dim), one dtype. Every kernel is
called as ``attend(q, k, v) -> o`` (B, H, T, D), causal, scale 1 / sqrt(D):

    "this"       core.kernels.flash_attention (blocks block_q x block_k)
    "jax_flash"  jax.experimental.pallas.ops.tpu.flash_attention (BlockSizes: block_q, and
                 block_k_major = block_k for every pass; block_b 1)
    "splash"     jax.experimental.pallas.ops.tpu.splash_attention, a CausalMask per head
                 (BlockSizes: block_q, block_kv = block_kv_compute = block_k, every pass;
                 splash takes unscaled scores, so q is scaled first), vmapped over B
    "xla"        flash_attention.mha_reference at XLA's default precision (the T x T
                 scores in HBM; no blocks: block_q = block_k = 0)

FLOPs (``causal_flops``): the forward's two matmuls, QK^T and PV, are 2 * 2 * B H T^2 D over
the full square; causal attention needs the lower half, so the forward counts
2 * B * H * T^2 * D. Forward + backward counts 3x that: the backward's four matmuls (dV, dP,
dQ, dK) are twice the forward's two; the score matrix the backward recomputes (S = QK^T
again) is not counted, as model FLOPs never count recomputation.

Bookkeeping (tested on CPU, no timing): ``block_pairs`` (which blocks a T allows),
``Budget`` (a wall-clock cap after which the remaining configurations are recorded as
skipped, with the reason), ``row`` (one result's schema), ``best_per_kernel`` (each kernel's
fastest configuration per T and pass, among those that ran).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.kernels import flash_attention

KERNELS = ("this", "jax_flash", "splash", "xla")
PASSES = ("forward", "forward_backward")
STATUSES = ("ok", "error", "skipped")
BLOCKS = (128, 256, 512, 1024)
FLOP_FORMULA = (
    "forward: 2 B H T^2 D (QK^T and PV, 2 B H T^2 D each over the full T x T, halved for "
    "the causal mask); forward + backward: 3 x forward (dV, dP, dQ, dK; the recomputed "
    "scores not counted)"
)


def causal_flops(b: int, h: int, t: int, d: int, backward: bool = False) -> int:
    """Model FLOPs of causal attention (FLOP_FORMULA): forward, or forward + backward."""
    forward = 2 * 2 * b * h * t * t * d // 2
    return 3 * forward if backward else forward


def block_pairs(t: int, blocks: Iterable[int] = BLOCKS) -> list[tuple[int, int]]:
    """(block_q, block_k) for every pair of ``blocks`` that is <= T and divides it."""
    usable = [block for block in blocks if block <= t and t % block == 0]
    return [(bq, bk) for bq in usable for bk in usable]


@dataclasses.dataclass
class Budget:
    """A wall-clock cap: ``expired()`` once ``seconds`` have passed since it was made."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    start: float = dataclasses.field(init=False)

    def __post_init__(self):
        if not self.seconds > 0:
            raise ValueError(f"a time budget must be > 0 seconds, got {self.seconds}")
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def expired(self) -> bool:
        return self.elapsed() >= self.seconds

    def reason(self) -> str:
        return f"time budget of {self.seconds:g} s spent ({self.elapsed():.0f} s elapsed)"


def row(
    kernel: str,
    pass_: str,
    t: int,
    block_q: int,
    block_k: int,
    status: str,
    *,
    shape: tuple[int, int, int, int],
    peak_flops: float | None = None,
    seconds: Sequence[float] = (),
    compile_s: float | None = None,
    reason: str = "",
    chain: int = 1,
    variant: str = "attention",
) -> dict:
    """One configuration's result: median seconds of ``seconds`` (the timed calls: seconds
    per kernel call, each a dispatch of ``chain`` chained calls divided by ``chain``),
    TFLOP/s from causal_flops, and the fraction of ``peak_flops`` (None without a peak).
    ``variant``: "attention", or this kernel's forward ablation (flash_attention.VARIANTS),
    whose rate counts the same FLOPs for comparison and never competes in best_per_kernel."""
    if kernel not in KERNELS or pass_ not in PASSES or status not in STATUSES:
        raise ValueError(f"unknown kernel, pass or status: {kernel!r}, {pass_!r}, {status!r}")
    if variant != "attention" and (kernel, pass_) != ("this", "forward"):
        raise ValueError(f"variant {variant!r} is this kernel's forward only")
    if status == "ok" and not seconds:
        raise ValueError("an 'ok' row needs its timed calls")
    b, h, _, d = shape
    flops = causal_flops(b, h, t, d, backward=pass_ == "forward_backward")
    return {
        "kernel": kernel,
        "pass": pass_,
        "T": t,
        "block_q": block_q,
        "block_k": block_k,
        "status": status,
        "variant": variant,
        "chain": chain,
        **timing_fields(seconds, compile_s, flops, peak_flops),
        "reason": reason,
    }


def timing_fields(
    seconds: Sequence[float], compile_s: float | None, flops: float, peak_flops: float | None
) -> dict:
    """A sweep row's timing: calls, the median of ``seconds`` (None without calls), compile
    seconds, ``flops`` per call, TFLOP/s and the fraction of ``peak_flops`` (None without)."""
    median = float(np.median(seconds)) if seconds else None
    rate = flops / median if median else None
    return {
        "calls": len(seconds),
        "median_s": median,
        "compile_s": compile_s,
        "flops": flops,
        "tflops_per_s": rate / 1e12 if rate else None,
        "fraction_of_peak": rate / peak_flops if rate and peak_flops else None,
    }


def best_per_kernel(rows: Iterable[dict]) -> list[dict]:
    """Each (kernel, pass, T)'s fastest 'ok' row (ties: the first), sorted by pass, T, kernel;
    an ablation's rows (variant other than "attention") are not attention and never count."""
    best: dict[tuple, dict] = {}
    for item in rows:
        if item["status"] != "ok" or item.get("variant", "attention") != "attention":
            continue
        key = (item["pass"], item["T"], item["kernel"])
        if key not in best or item["median_s"] < best[key]["median_s"]:
            best[key] = item
    return [best[key] for key in sorted(best, key=lambda k: (PASSES.index(k[0]), k[1], k[2]))]


def speedups(best: Iterable[dict], kernel: str = "this") -> list[dict]:
    """Per (pass, T): ``kernel``'s best time against the fastest other kernel's best."""
    table: dict[tuple, dict[str, dict]] = {}
    for item in best:
        table.setdefault((item["pass"], item["T"]), {})[item["kernel"]] = item
    out = []
    for (pass_, t), by_kernel in table.items():
        others = {name: r for name, r in by_kernel.items() if name != kernel}
        if kernel not in by_kernel or not others:
            continue
        rival_name, rival = min(others.items(), key=lambda pair: pair[1]["median_s"])
        out.append(
            {
                "pass": pass_,
                "T": t,
                "kernel": kernel,
                "rival": rival_name,
                "speedup": rival["median_s"] / by_kernel[kernel]["median_s"],
            }
        )
    return out


# --- the kernels, one calling convention ------------------------------------------------------


def make_attend(
    kernel: str,
    t: int,
    h: int,
    d: int,
    block_q: int,
    block_k: int,
    interpret,
    variant: str = "attention",
):
    """``attend(q, k, v) -> o`` (B, H, T, D) for ``kernel`` at these blocks; ``interpret``:
    a Pallas interpret value (CPU) or False (compiled by Mosaic). ``variant`` (this kernel
    only): an ablation of its forward (flash_attention.VARIANTS), not differentiable."""
    scale = 1.0 / math.sqrt(d)
    if variant != "attention":
        if kernel != "this":
            raise ValueError(f"variant {variant!r} is this kernel's only, not {kernel!r}")

        cfg = flash_attention.Config(block_q, block_k, True, "kernel", interpret, variant)
        return lambda q, k, v: flash_attention.forward(q, k, v, cfg)[0]
    if kernel == "this":
        return functools.partial(
            flash_attention.flash_attention,
            causal=True,
            block_q=block_q,
            block_k=block_k,
            interpret=interpret,
        )
    if kernel == "jax_flash":
        return _jax_flash(scale, block_q, block_k, interpret)
    if kernel == "splash":
        return _splash(t, h, scale, block_q, block_k, interpret)
    if kernel == "xla":
        return functools.partial(flash_attention.mha_reference, causal=True, precision=None)
    raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def _jax_flash(scale, block_q, block_k, interpret):
    from jax.experimental.pallas.ops.tpu import flash_attention as jax_flash

    sizes = jax_flash.BlockSizes(
        block_q=block_q,
        block_k_major=block_k,
        block_k=block_k,
        block_b=1,
        block_q_major_dkv=block_q,
        block_k_major_dkv=block_k,
        block_k_dkv=block_k,
        block_q_dkv=block_q,
        block_k_major_dq=block_k,
        block_k_dq=block_k,
        block_q_dq=block_q,
    )

    return functools.partial(
        jax_flash.flash_attention, causal=True, sm_scale=scale, block_sizes=sizes
    )


def _interpret_context(kernel: str, interpret):
    """JAX's flash attention has no interpret argument: off a TPU its programs are traced
    under pltpu.force_tpu_interpret_mode (the backward too, so the whole program is)."""
    from jax.experimental.pallas import tpu as pltpu

    if kernel != "jax_flash" or interpret is False:
        return contextlib.nullcontext()
    params = interpret if isinstance(interpret, pltpu.InterpretParams) else None
    return pltpu.force_tpu_interpret_mode(params or pltpu.InterpretParams())


def _splash(t, h, scale, block_q, block_k, interpret):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    sizes = sk.BlockSizes(
        block_q=block_q,
        block_kv=block_k,
        block_kv_compute=block_k,
        block_q_dkv=block_q,
        block_kv_dkv=block_k,
        block_kv_dkv_compute=block_k,
        block_q_dq=block_q,
        block_kv_dq=block_k,
    )
    mask = sm.MultiHeadMask([sm.CausalMask((t, t)) for _ in range(h)])
    kernel = sk.make_splash_mha_single_device(
        mask, block_sizes=sizes, interpret=interpret is not False
    )

    def attend(q, k, v):
        return jax.vmap(kernel)((q * scale).astype(q.dtype), k, v)

    return attend


def programs(kernel: str, attend, interpret, chain: int = 1) -> dict[str, Callable]:
    """jitted 'forward' (q, k, v) -> o and 'forward_backward' (q, k, v, do) -> (dq, dk, dv)
    (one program: the forward, then the backward on its residuals) of make_attend's
    ``attend`` for ``kernel``.

    ``chain`` > 1: each program runs ``chain`` calls in one dispatch (a fori_loop, each
    call's outputs the next call's inputs: forward O becomes q; dQ, dK, dV become q, k, v, so
    nothing is dead code and no call can be hoisted), so a timed dispatch divided by
    ``chain`` is the kernel's time without the host's dispatch and sync, which a single call
    pays in full. It returns the last call's outputs."""
    if chain < 1:
        raise ValueError(f"chain must be >= 1, got {chain}")

    def forward(q, k, v):
        with _interpret_context(kernel, interpret):
            return attend(q, k, v)

    def forward_backward(q, k, v, do):
        with _interpret_context(kernel, interpret):
            _, vjp = jax.vjp(attend, q, k, v)
            return vjp(do)

    if chain == 1:
        return {"forward": jax.jit(forward), "forward_backward": jax.jit(forward_backward)}

    def forward_chain(q, k, v):
        def call(_, q):
            return forward(q, k, v).astype(q.dtype)

        return jax.lax.fori_loop(0, chain, call, q)

    def forward_backward_chain(q, k, v, do):
        def call(_, qkv):
            grads = forward_backward(*qkv, do)
            return tuple(g.astype(x.dtype) for g, x in zip(grads, qkv, strict=True))

        return jax.lax.fori_loop(0, chain, call, (q, k, v))

    return {
        "forward": jax.jit(forward_chain),
        "forward_backward": jax.jit(forward_backward_chain),
    }


def agreement(
    kernel: str, shape: tuple[int, int, int, int], dtype, blocks: tuple[int, int], interpret
) -> dict:
    """Scaled max error of ``kernel``'s O and (dQ, dK, dV) in ``dtype`` against NumPy float64
    (flash_attention.attention_numpy / attention_grad_numpy) on the same rounded inputs."""
    from core import numerics

    b, h, t, d = shape
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, do = (jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
    run = programs(kernel, make_attend(kernel, t, h, d, *blocks, interpret), interpret)
    o = run["forward"](q, k, v)
    grads = run["forward_backward"](q, k, v, do)
    expected_o, _ = flash_attention.attention_numpy(q, k, v, causal=True)
    expected_grads = flash_attention.attention_grad_numpy(q, k, v, do, causal=True)
    errors = [numerics.scaled_max_error(o, expected_o)]
    errors += [numerics.scaled_max_error(g, e) for g, e in zip(grads, expected_grads, strict=True)]
    tolerance = numerics.tolerance(jnp.dtype(dtype).name)
    return {
        "kernel": kernel,
        "dtype": jnp.dtype(dtype).name,
        "T": t,
        "block_q": blocks[0],
        "block_k": blocks[1],
        "reference": "NumPy float64 on the same rounded inputs",
        "o_error": errors[0],
        "dq_error": errors[1],
        "dk_error": errors[2],
        "dv_error": errors[3],
        "tolerance": float(tolerance),
        "agrees": all(error <= tolerance for error in errors),
    }
