"""Flash attention, forward and backward Pallas kernels; the references beside them.

Shapes: q, k, v, o, do are (B, H, T, D) (batch, heads, sequence, head dim); the kernels see
them as (N, T, D) with N = B * H. Per-row statistics (log-sum-exp L, delta) are (N, T, 1) f32.

- Forward: grid (N, T/bq, T/bk), the k axis last and "arbitrary" (a reduction: its steps run
  in order on one core). Scratch in VMEM: the running max m and sum l (bq, 1) and the
  accumulator acc (bq, D), all f32; ``pl.when(j == 0)`` starts them, ``pl.when(j == last)``
  writes O = acc / l and L = m / sqrt(D) + log(l) (the online softmax). Causal: a k block
  entirely above the diagonal is skipped (``pl.when``) and its index map is clamped to the
  last block the q block needs, so the pipeline fetches nothing new for it; only a block that
  crosses the diagonal is masked, one wholly below it runs a step without the mask.
- Vector work per score is kept small (the MXU does 4 D flops per score, 512 at D = 128,
  while the softmax is elementwise on the vector unit): m is kept in units of the raw score
  Q K^T (a positive scale does not move a max) and P = exp2((S - m) * log2(e) / sqrt(D)), the
  scale and the change of base one multiply. The mask's iotas, compares and selects run only
  on the blocks that cross the diagonal: at T = 8192 with 1024 blocks, 8 of the 36 computed.
- Backward (the flash identity): P = exp(S - L) is recomputed from the saved L (kept as the
  forward kernel wrote it, (N, T, 1), so it is not laid out again between the passes), never
  stored (as exp2(Q K^T * log2(e) / sqrt(D) - L * log2(e)), L * log2(e) formed per row);
  dV = P^T dO, dP = dO V^T, dS = P * (dP - delta) with delta = rowsum(dO * O),
  dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D). Two kernels: dK, dV on grid (N, T/bk, T/bq)
  (q blocks the reduction), dQ on grid (N, T/bq, T/bk).
- ``flash_attention``: a jax.custom_vjp whose backward is those kernels (``backward=
  "kernel"``) or the VJP of ``mha_reference`` (``backward="reference"``).
- Segment ids (optional, ``segment_ids`` (B, T) int32, self-attention): query t sees key s
  only when their ids are equal (packed documents; the byte Transformer's training mask with
  causal=True). Every kernel reads the ids of its q block as (bq, 1), a block of a (B, T, 1)
  copy, and those of its k block as (1, bk), row j of a (B, T/bk, bk) copy held whole per
  batch row, and masks where they differ. Mosaic wants the last two dims of a block whole or
  multiples of (8, 128): a (1, bk) block of a (B, 1, T) copy is neither when bk < 128 and
  bk < T (it failed to lower on a v5e with bk = 8), a whole (T/bk, bk) slab always is. A k
  block wholly in other segments is still computed (only the causal skip is static); its
  scores are MASK_VALUE, its weights vanish once the row meets its own diagonal block, which
  it always does last.

References (core/kernels/attention_reference.py, re-exported here): ``mha_reference`` (jnp,
differentiable), ``attention_numpy`` and ``attention_grad_numpy`` (NumPy float64, the closed
forms: O = softmax(Q K^T / sqrt(D) + mask) V and its gradient).
``interpret``: ``matmul.interpret_params()`` on CPU, ``False`` to compile through Mosaic.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from core.kernels import matmul
from core.kernels.attention_reference import (  # noqa: F401 (re-exported: the references)
    MASK_VALUE,
    attention_grad_numpy,
    attention_numpy,
    mha_reference,
)

BACKWARDS = ("kernel", "reference")
# q, k, v, O (and their gradients) as (B, H, T, D), or as (B, T, H, D): the layout a
# Transformer's projections produce, read in place (head h is lanes h * D to (h + 1) * D of a
# (B, T, H * D) view), so the model needs no transposes around the kernel.
LAYOUTS = ("BHTD", "BTHD")
# What the forward kernel computes: "attention", or "matmuls_only", an ablation for measuring
# what bounds it: the same grid, blocks, causal skip and the two matmuls (O = sum over the
# computed k blocks of (Q K^T) V, no mask, no softmax), so its time against the kernel's is
# the vector unit's share. Forward only; never for a result.
VARIANTS = ("attention", "matmuls_only")
LOG2_E = math.log2(math.e)  # exp(x) = exp2(x * LOG2_E)
_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # a @ b.T for 2-D a, b
_CONTRACT_FIRST = (((0,), (0,)), ((), ()))  # a.T @ b


@dataclasses.dataclass(frozen=True)
class Config:
    """How the kernels tile attention: block sizes along T for q and k, causal, backward."""

    block_q: int = 128
    block_k: int = 128
    causal: bool = False
    backward: str = "kernel"
    interpret: object = None  # None: interpret mode off a TPU (matmul.default_interpret)
    variant: str = "attention"  # VARIANTS: "matmuls_only" is a forward-only ablation
    layout: str = "BHTD"  # LAYOUTS: how q, k, v, O are laid out (see check_layout)

    def __post_init__(self):
        if self.block_q < 1 or self.block_k < 1:
            raise ValueError(f"block sizes must be positive, got {self.block_q}, {self.block_k}")
        if self.backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {BACKWARDS}, got {self.backward!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    def check_layout(self, heads: int, d: int) -> None:
        """BTHD reads head h as lanes h * D to (h + 1) * D of a (B, T, H * D) array: Mosaic
        takes a block's last dim whole or in multiples of 128, so D must be one (or H 1)."""
        if self.layout == "BTHD" and heads > 1 and d % 128:
            raise ValueError(
                f"layout BTHD needs a head dim that is a multiple of 128 (each head is a lane "
                f"block of H * D), got D = {d} with H = {heads}; use layout BHTD"
            )

    def check_shape(self, t: int) -> None:
        if t % self.block_q or t % self.block_k:
            raise ValueError(
                f"block_q {self.block_q} and block_k {self.block_k} must divide T = {t}"
            )

    @property
    def mode(self):
        return matmul.default_interpret() if self.interpret is None else self.interpret


def _causal_mask(s, i, j, block_q, block_k):
    rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = j * block_k + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return jnp.where(cols <= rows, s, MASK_VALUE)


def _masked(s, i, j, cfg, seg_refs, causal_mask: bool):
    """Scores s (bq, bk) of q block i and k block j with the causal mask (when
    ``causal_mask``: the block crosses the diagonal) and the segment mask (seg_refs: () or
    (q ids (bq, 1), k ids (T/bk, bk): row j is k block j's))."""
    if causal_mask:
        s = _causal_mask(s, i, j, cfg.block_q, cfg.block_k)
    if seg_refs:
        seg_q, seg_k = seg_refs
        s = jnp.where(seg_q[...] == seg_k[pl.ds(j, 1), :], s, MASK_VALUE)
    return s


def _needed(i, j, block_q, block_k):
    """Whether k block j has a key at or below the diagonal of q block i (causal)."""
    return j * block_k <= i * block_q + block_q - 1


def _below_diagonal(i, j, block_q, block_k):
    """Whether every key of k block j is at or below the diagonal of every row of q block i
    (causal): its last key precedes q block i's first row, so the block needs no mask."""
    return j * block_k + block_k - 1 <= i * block_q


def causal_block_counts(t: int, block_q: int, block_k: int) -> dict[str, int]:
    """How a causal forward's (q block, k block) pairs divide at sequence length t: {"unmasked":
    wholly below the diagonal, a step without the mask; "masked": across it; "skipped": above
    it, no step}. T = 8192, 1024 blocks: 28 unmasked, 8 masked, 28 skipped."""
    Config(block_q, block_k).check_shape(t)
    counts = {"unmasked": 0, "masked": 0, "skipped": 0}
    for i in range(t // block_q):
        for j in range(t // block_k):
            if _below_diagonal(i, j, block_q, block_k):
                counts["unmasked"] += 1
            elif _needed(i, j, block_q, block_k):
                counts["masked"] += 1
            else:
                counts["skipped"] += 1
    return counts


def _steps(step, i, j, cfg):
    """Run ``step(causal_mask)`` where block (i, j) needs it: not causal, ``step(False)``;
    causal, ``step(False)`` wholly below the diagonal, ``step(True)`` across it, nothing
    above it."""
    if not cfg.causal:
        step(False)
        return
    below = _below_diagonal(i, j, cfg.block_q, cfg.block_k)
    pl.when(below)(lambda: step(False))
    crossing = jnp.logical_and(_needed(i, j, cfg.block_q, cfg.block_k), jnp.logical_not(below))
    pl.when(crossing)(lambda: step(True))


# --- forward ----------------------------------------------------------------------------------


def _forward_kernel(*refs, cfg, scale, segmented):
    q_ref, k_ref, v_ref = refs[:3]
    seg_refs = refs[3:5] if segmented else ()
    o_ref, lse_ref, m_ref, l_ref, acc_ref = refs[5:] if segmented else refs[3:]
    i, j = pl.program_id(1), pl.program_id(2)
    scale_log2 = scale * LOG2_E

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def _step(causal_mask):
        q, k, v = q_ref[...], k_ref[...], v_ref[...]
        s = jax.lax.dot_general(q, k, _CONTRACT_LAST, preferred_element_type=jnp.float32)
        if cfg.variant == "matmuls_only":
            acc_ref[...] += jnp.dot(s.astype(v.dtype), v, preferred_element_type=jnp.float32)
            return
        s = _masked(s, i, j, cfg, seg_refs, causal_mask)  # raw scores Q K^T
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        p = jnp.exp2((s - m_new) * scale_log2)
        alpha = jnp.exp2((m_prev - m_new) * scale_log2)  # rescales what the old max summed
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        acc_ref[...] = alpha * acc_ref[...] + pv
        m_ref[...] = m_new

    _steps(_step, i, j, cfg)

    @pl.when(j == pl.num_programs(2) - 1)
    def _finish():
        if cfg.variant == "matmuls_only":
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)
            lse_ref[...] = jnp.zeros_like(lse_ref)
            return
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] * scale + jnp.log(l_ref[...])


def _kv_block(cfg):
    """(n, k block) of forward program (n, i, j): clamped to the last needed block when
    causal, so a skipped step fetches nothing new."""
    if not cfg.causal:
        return lambda n, i, j: (n, j)
    return lambda n, i, j: (n, jnp.minimum(j, (i * cfg.block_q + cfg.block_q - 1) // cfg.block_k))


def _rows_spec(cfg, heads: int, rows: int, d: int, block):
    """BlockSpec of ``rows`` rows of one head of q, k, v, O or their gradients, where
    ``block(*grid ids) -> (n, row block)`` and n = b * heads + h. BHTD: the (N, T, D) array;
    BTHD: the (B, T, H * D) array, head h its lanes h * D to (h + 1) * D."""
    if cfg.layout == "BHTD":

        def index_map(*ids):
            n, rows_block = block(*ids)
            return (n, rows_block, 0)
    else:

        def index_map(*ids):
            n, rows_block = block(*ids)
            return (n // heads, rows_block, n % heads)

    return pl.BlockSpec((None, rows, d), index_map)


def _stats_spec(rows: int, block):
    """BlockSpec of a per-row statistic (L, delta; (N, T, 1) f32 in either layout)."""

    def index_map(*ids):
        n, rows_block = block(*ids)
        return (n, rows_block, 0)

    return pl.BlockSpec((None, rows, 1), index_map)


def _segment_specs(heads: int, t: int, bq: int, bk: int, q_block):
    """BlockSpecs of the q ids (B, T, 1) and k ids (B, T/bk, bk) for flattened (N = B H) grids:
    program n reads row n // heads; q_block gives the (n, block) of q. The k ids come whole
    per row (the kernel picks its k block's row), so the block is valid for Mosaic whatever
    bk is."""

    def q_map(*ids):
        n_, block = q_block(*ids)
        return (n_ // heads, block, 0)

    def k_map(n_, *_):
        return (n_ // heads, 0, 0)

    return [pl.BlockSpec((None, bq, 1), q_map), pl.BlockSpec((None, t // bk, bk), k_map)]


def _rows_shape(cfg, n: int, heads: int, t: int, d: int) -> tuple[int, int, int]:
    """The kernels' q/k/v/O array shape: (N, T, D) (BHTD) or (B, T, H * D) (BTHD)."""
    return (n, t, d) if cfg.layout == "BHTD" else (n // heads, t, heads * d)


def forward_call(
    n: int, t: int, d: int, dtype, cfg: Config, heads: int = 1, segmented: bool = False
):
    """The pallas_call of the forward: (q, k, v) -> (O, L (N, T, 1) f32), q, k, v and O of
    _rows_shape (N = B * heads). ``segmented``: the call also takes (q ids (B, T, 1), k ids
    (B, T/bk, bk)) int32."""
    cfg.check_shape(t)
    cfg.check_layout(heads, d)
    bq, bk = cfg.block_q, cfg.block_k
    q_block = lambda n_, i, j: (n_, i)  # noqa: E731
    q_spec = _rows_spec(cfg, heads, bq, d, q_block)
    kv_spec = _rows_spec(cfg, heads, bk, d, _kv_block(cfg))
    segments = _segment_specs(heads, t, bq, bk, q_block) if segmented else []
    return pl.pallas_call(
        functools.partial(_forward_kernel, cfg=cfg, scale=1.0 / math.sqrt(d), segmented=segmented),
        out_shape=(
            jax.ShapeDtypeStruct(_rows_shape(cfg, n, heads, t, d), dtype),
            jax.ShapeDtypeStruct((n, t, 1), jnp.float32),
        ),
        grid=(n, t // bq, t // bk),
        in_specs=[q_spec, kv_spec, kv_spec, *segments],
        out_specs=(q_spec, _stats_spec(bq, q_block)),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, 1), jnp.float32),
            pltpu.VMEM((bq, d), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=cfg.mode,
    )


# --- backward ---------------------------------------------------------------------------------


def _probabilities(q, k, lse_log2, i, j, cfg, scale, seg_refs, causal_mask):
    """P = exp(S - L) of one (q block i, k block j) pair, recomputed (never stored), as
    exp2(Q K^T * log2(e) / sqrt(D) - L * log2(e)); ``lse_log2`` is L * log2(e) (bq, 1)."""
    s = jax.lax.dot_general(q, k, _CONTRACT_LAST, preferred_element_type=jnp.float32)
    s = _masked(s, i, j, cfg, seg_refs, causal_mask)
    return jnp.exp2(s * (scale * LOG2_E) - lse_log2)


def _dkdv_kernel(*refs, cfg, scale, segmented):
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    seg_refs = refs[6:8] if segmented else ()
    dk_ref, dv_ref, dk_acc, dv_acc = refs[8:] if segmented else refs[6:]
    j, i = pl.program_id(1), pl.program_id(2)  # k block j owns the output; q blocks reduce

    @pl.when(i == 0)
    def _init():
        dk_acc[...] = jnp.zeros_like(dk_acc)
        dv_acc[...] = jnp.zeros_like(dv_acc)

    def _step(causal_mask):
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        lse_log2 = lse_ref[...] * LOG2_E  # (bq, 1): per row, not per score
        p = _probabilities(q, k, lse_log2, i, j, cfg, scale, seg_refs, causal_mask)
        dv_acc[...] += jax.lax.dot_general(
            p.astype(do.dtype), do, _CONTRACT_FIRST, preferred_element_type=jnp.float32
        )
        dp = jax.lax.dot_general(do, v, _CONTRACT_LAST, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dk_acc[...] += scale * jax.lax.dot_general(
            ds.astype(q.dtype), q, _CONTRACT_FIRST, preferred_element_type=jnp.float32
        )

    _steps(_step, i, j, cfg)

    @pl.when(i == pl.num_programs(2) - 1)
    def _finish():
        dk_ref[...] = dk_acc[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _dq_kernel(*refs, cfg, scale, segmented):
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
    seg_refs = refs[6:8] if segmented else ()
    dq_ref, dq_acc = refs[8:] if segmented else refs[6:]
    i, j = pl.program_id(1), pl.program_id(2)

    @pl.when(j == 0)
    def _init():
        dq_acc[...] = jnp.zeros_like(dq_acc)

    def _step(causal_mask):
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        lse_log2 = lse_ref[...] * LOG2_E  # (bq, 1): per row, not per score
        p = _probabilities(q, k, lse_log2, i, j, cfg, scale, seg_refs, causal_mask)
        dp = jax.lax.dot_general(do, v, _CONTRACT_LAST, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dq_acc[...] += scale * jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    _steps(_step, i, j, cfg)

    @pl.when(j == pl.num_programs(2) - 1)
    def _finish():
        dq_ref[...] = dq_acc[...].astype(dq_ref.dtype)


def _row_sums(x, y, cfg, heads: int):
    """rowsum(x * y) per head and row, (N, T, 1) f32, of two arrays of _rows_shape."""
    product = x.astype(jnp.float32) * y.astype(jnp.float32)
    if cfg.layout == "BHTD":
        return jnp.sum(product, axis=-1, keepdims=True)
    b, t, _ = x.shape
    sums_BTH = jnp.sum(product.reshape(b, t, heads, -1), axis=-1)
    return jnp.transpose(sums_BTH, (0, 2, 1)).reshape(b * heads, t, 1)


def _backward_kernels(q, k, v, o, lse, do, cfg: Config, heads: int = 1, segments=None):
    """dQ, dK, dV (of _rows_shape, like q) from the two backward kernels; lse (N, T, 1) as
    the forward kernel wrote it.
    ``segments``: None, or (q ids (B, T, 1), k ids (B, T/bk, bk)) int32."""
    n, t, _ = lse.shape
    d = q.shape[-1] // (heads if cfg.layout == "BTHD" else 1)
    bq, bk = cfg.block_q, cfg.block_k
    scale = 1.0 / math.sqrt(d)
    delta = _row_sums(do, o, cfg, heads)
    semantics = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))
    segmented = segments is not None
    ids = tuple(segments) if segmented else ()

    # dK, dV: program (n, j, i); q blocks i reduce. Causal: q blocks above the diagonal are
    # skipped, their index clamped up to the first q block that sees k block j.
    if cfg.causal:
        q_block = lambda n_, j, i: (n_, jnp.maximum(i, (j * bk) // bq))  # noqa: E731
    else:
        q_block = lambda n_, j, i: (n_, i)  # noqa: E731
    q_rows = _rows_spec(cfg, heads, bq, d, q_block)
    q_stats = _stats_spec(bq, q_block)
    k_rows = _rows_spec(cfg, heads, bk, d, lambda n_, j, i: (n_, j))
    seg_specs = _segment_specs(heads, t, bq, bk, q_block) if segmented else []
    dk, dv = pl.pallas_call(
        functools.partial(_dkdv_kernel, cfg=cfg, scale=scale, segmented=segmented),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(n, t // bk, t // bq),
        in_specs=[q_rows, k_rows, k_rows, q_rows, q_stats, q_stats, *seg_specs],
        out_specs=(k_rows, k_rows),
        scratch_shapes=[pltpu.VMEM((bk, d), jnp.float32), pltpu.VMEM((bk, d), jnp.float32)],
        compiler_params=semantics,
        interpret=cfg.mode,
    )(q, k, v, do, lse, delta, *ids)

    q_block = lambda n_, i, j: (n_, i)  # noqa: E731
    q_rows = _rows_spec(cfg, heads, bq, d, q_block)
    q_stats = _stats_spec(bq, q_block)
    kv_rows = _rows_spec(cfg, heads, bk, d, _kv_block(cfg))
    seg_specs = _segment_specs(heads, t, bq, bk, q_block) if segmented else []
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, cfg=cfg, scale=scale, segmented=segmented),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(n, t // bq, t // bk),
        in_specs=[q_rows, kv_rows, kv_rows, q_rows, q_stats, q_stats, *seg_specs],
        out_specs=q_rows,
        scratch_shapes=[pltpu.VMEM((bq, d), jnp.float32)],
        compiler_params=semantics,
        interpret=cfg.mode,
    )(q, k, v, do, lse, delta, *ids)
    return dq, dk, dv


# --- the differentiable kernel ----------------------------------------------------------------


def _dims(x, cfg) -> tuple[int, int, int, int]:
    """(B, H, T, D) of a q-like array in ``cfg.layout``: (B, H, T, D) or (B, T, H, D)."""
    if cfg.layout == "BHTD":
        return x.shape
    b, t, h, d = x.shape
    return b, h, t, d


def _rows(x, cfg):
    """The kernels' view of a q-like array: (N, T, D) for BHTD, (B, T, H * D) for BTHD; both
    reshapes of the row-major array, so no copy."""
    b, h, t, d = _dims(x, cfg)
    return x.reshape(b * h, t, d) if cfg.layout == "BHTD" else x.reshape(b, t, h * d)


def _segment_layouts(segment_ids_BT, b: int, t: int, block_k: int):
    """(q ids (B, T, 1), k ids (B, T/block_k, block_k)) int32 of (B, T) segment ids (row j of
    the k ids: k block j's); ValueError on a shape that is not q's (B, T)."""
    ids = jnp.asarray(segment_ids_BT)
    if ids.shape != (b, t):
        raise ValueError(f"segment_ids must be (B, T) = {(b, t)}, got {tuple(ids.shape)}")
    ids = ids.astype(jnp.int32)
    return ids[:, :, None], ids.reshape(b, t // block_k, block_k)


def _forward_rows(q, k, v, cfg: Config, segment_ids_BT=None):
    """(O in q's layout, L as the kernel wrote it, (N, T, 1) f32): the backward reads that
    L as it is, so it is never laid out again between the passes."""
    b, h, t, d = _dims(q, cfg)
    cfg.check_shape(t)  # before the k ids are cut into blocks of block_k
    ids = () if segment_ids_BT is None else _segment_layouts(segment_ids_BT, b, t, cfg.block_k)
    call = forward_call(b * h, t, d, q.dtype, cfg, heads=h, segmented=bool(ids))
    o, lse_rows = call(_rows(q, cfg), _rows(k, cfg), _rows(v, cfg), *ids)
    return o.reshape(q.shape), lse_rows


def forward(q, k, v, cfg: Config, segment_ids_BT=None):
    """The forward kernel: (O in q's layout and dtype, L (B, H, T) f32 log-sum-exp); q, k, v
    (B, H, T, D), or (B, T, H, D) with ``cfg.layout == "BTHD"``. ``segment_ids_BT``: (B, T)
    ints; query t sees key s only where their ids are equal."""
    b, h, t, _ = _dims(q, cfg)
    o, lse_rows = _forward_rows(q, k, v, cfg, segment_ids_BT)
    return o, lse_rows.reshape(b, h, t)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention(q, k, v, segment_ids, cfg):
    return _forward_rows(q, k, v, cfg, segment_ids)[0]


def _attention_fwd(q, k, v, segment_ids, cfg):
    o, lse_rows = _forward_rows(q, k, v, cfg, segment_ids)
    return o, (q, k, v, segment_ids, o, lse_rows)


def _to_bhtd(x, cfg):
    """A q-like array as (B, H, T, D) (BTHD: a transpose, its own inverse)."""
    return x if cfg.layout == "BHTD" else jnp.transpose(x, (0, 2, 1, 3))


def _attention_bwd(cfg, residuals, do):
    q, k, v, segment_ids, o, lse = residuals
    if cfg.backward == "reference":

        def reference(q, k, v):
            args = (_to_bhtd(x, cfg) for x in (q, k, v))
            out = mha_reference(*args, causal=cfg.causal, segment_ids_BT=segment_ids)
            return _to_bhtd(out, cfg)

        _, vjp = jax.vjp(reference, q, k, v)
        return (*vjp(do), None)
    b, h, t, _ = _dims(q, cfg)
    segments = None
    if segment_ids is not None:
        segments = _segment_layouts(segment_ids, b, t, cfg.block_k)
    rows = [_rows(x, cfg) for x in (q, k, v, o)]
    grads = _backward_kernels(*rows, lse, _rows(do, cfg), cfg, heads=h, segments=segments)
    return (*(g.reshape(q.shape) for g in grads), None)


_attention.defvjp(_attention_fwd, _attention_bwd)


@functools.partial(
    jax.jit, static_argnames=("causal", "block_q", "block_k", "backward", "interpret", "layout")
)
def flash_attention(
    q_BHTD,
    k_BHTD,
    v_BHTD,
    causal: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    backward: str = "kernel",
    interpret=None,
    segment_ids_BT=None,
    layout: str = "BHTD",
):
    """softmax(Q K^T / sqrt(D) + causal mask + segment mask) V by the flash kernels;
    differentiable in q, k, v. ``segment_ids_BT``: None, or (B, T) ints (see the module).
    ``layout`` "BTHD": q, k, v and O are (B, T, H, D) (LAYOUTS; D a multiple of 128)."""
    cfg = Config(block_q, block_k, causal, backward, interpret, layout=layout)
    return _attention(q_BHTD, k_BHTD, v_BHTD, segment_ids_BT, cfg)


# Interpret mode measures semantics, not speed: XLA:CPU compiling the interpreter's loop at its
# default optimization level takes several times longer for one forward and buys nothing
# here. Compiled Mosaic kernels on a TPU keep the default.
COMPILER_OPTIONS = {} if jax.default_backend() == "tpu" else {"xla_backend_optimization_level": 0}
_STATIC = ("causal", "block_q", "block_k", "backward", "interpret")


@functools.partial(jax.jit, static_argnames=_STATIC, compiler_options=COMPILER_OPTIONS)
def forward_and_grads(
    q_BHTD,
    k_BHTD,
    v_BHTD,
    do_BHTD,
    causal: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    backward: str = "kernel",
    interpret=None,
):
    """One program: (O, L, (dQ, dK, dV)) for upstream gradient dO.

    O and L from the forward kernel, the gradients from the custom_vjp's backward rule on
    them (``backward``: "kernel" or "reference"): the forward runs once (jax.grad of
    ``flash_attention`` gives the same gradients; its test says so).
    """
    cfg = Config(block_q, block_k, causal, backward, interpret)
    o, lse_rows = _forward_rows(q_BHTD, k_BHTD, v_BHTD, cfg)
    grads = _attention_bwd(cfg, (q_BHTD, k_BHTD, v_BHTD, None, o, lse_rows), do_BHTD)[:3]
    return o, lse_rows.reshape(q_BHTD.shape[:3]), grads


@functools.partial(
    jax.jit,
    static_argnames=_STATIC[:3] + ("interpret", "variant"),
    compiler_options=COMPILER_OPTIONS,
)
def forward_with_lse(
    q_BHTD,
    k_BHTD,
    v_BHTD,
    causal=False,
    block_q=128,
    block_k=128,
    interpret=None,
    variant="attention",
):
    """The forward kernel alone: (O, L), for checking the saved log-sum-exp too; ``variant``
    "matmuls_only" is the ablation (VARIANTS), L then zeros."""
    cfg = Config(block_q, block_k, causal, "kernel", interpret, variant)
    return forward(q_BHTD, k_BHTD, v_BHTD, cfg)


# --- references -------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames="causal", compiler_options=COMPILER_OPTIONS)
def reference_and_grads(q_BHTD, k_BHTD, v_BHTD, do_BHTD, causal: bool = False):
    """``mha_reference``'s O and jax.grad of it for upstream dO: (O, (dQ, dK, dV)), jitted."""
    o, vjp = jax.vjp(functools.partial(mha_reference, causal=causal), q_BHTD, k_BHTD, v_BHTD)
    return o, vjp(do_BHTD)


# --- compiled for a TPU topology (no TPU needed) -----------------------------------------------


def _compile_replicated(fn, shapes, topology_name: str):
    """Compile ``fn`` on every chip of the topology with replicated operands (shard_map:
    Mosaic kernels are not auto-partitioned). Returns (CompileReport, compiled)."""
    from core.tpu import topology_compile

    P = jax.sharding.PartitionSpec
    mesh = topology_compile.topology_mesh(topology_name)
    specs = (P(),) * len(shapes)
    per_chip = jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False)
    return topology_compile.compile_for_topology(per_chip, shapes, specs, topology_name)


def compile_for_topology(
    topology_name: str, shape_BHTD, cfg: Config, dtype=jnp.float32, kernel: bool = True
):
    """Compile the forward for a TPU topology: the Mosaic kernel (``kernel=True``, O only)
    or ``mha_reference`` (XLA's attention: the T x T scores in HBM). Needs libtpu.

    Returns (core.tpu.topology_compile.CompileReport, whether the HLO holds the TPU custom
    call); memory_analysis() in the report is one chip's.
    """
    cfg = dataclasses.replace(cfg, interpret=False)
    cfg.check_shape(shape_BHTD[2])
    if kernel:
        fn = lambda q, k, v: forward(q, k, v, cfg)[0]  # noqa: E731
    else:
        fn = functools.partial(mha_reference, causal=cfg.causal, precision=None)
    shapes = (jax.ShapeDtypeStruct(tuple(shape_BHTD), dtype),) * 3
    report, compiled = _compile_replicated(fn, shapes, topology_name)
    return report, matmul.TPU_CUSTOM_CALL in compiled.as_text()


def compile_gradients_for_topology(topology_name: str, shape_BHTD, cfg: Config):
    """Compile the forward and the kernel backward with segment ids ((B, T) int32) for a TPU
    topology: every kernel through Mosaic, which checks each block shape against the TPU's
    tiling (needs libtpu). Returns (CompileReport, whether the HLO holds the TPU custom call).
    The operands are (B, T, H, D) when ``cfg.layout`` is "BTHD".
    """
    cfg = dataclasses.replace(cfg, interpret=False, backward="kernel")
    cfg.check_shape(shape_BHTD[2])

    def gradients(q, k, v, segment_ids_BT):
        def loss(q, k, v):
            return jnp.sum(_attention(q, k, v, segment_ids_BT, cfg).astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    b, h, t, d = shape_BHTD
    shape = (b, h, t, d) if cfg.layout == "BHTD" else (b, t, h, d)
    shapes = (jax.ShapeDtypeStruct(shape, jnp.float32),) * 3
    shapes += (jax.ShapeDtypeStruct((b, t), jnp.int32),)
    report, compiled = _compile_replicated(gradients, shapes, topology_name)
    return report, matmul.TPU_CUSTOM_CALL in compiled.as_text()
