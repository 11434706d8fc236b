"""Flash attention against its references: TPU interpret mode here, Mosaic on a TPU.

Each class runs in "interpret" mode (races detected, uninitialized memory NaN) and "tpu" mode
(compiled through Mosaic; skipped unless the backend is a TPU), unchanged. The property test
draws shapes, block sizes, dtypes and causal flags with hypothesis and runs them in jax's HLO
interpreter; the "ci" profile keeps it to a few examples (each one lowers, compiles and runs
three kernels: ~2 s of CPU), the benchmark
benchmarks/flash_attention_properties.py runs the same property with the "benchmark" profile.
Every example hypothesis ever found failing is in REGRESSION_CASES, with what it caught.
"""

from __future__ import annotations

import dataclasses

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies

from core import numerics
from core.kernels import flash_attention, matmul, tiling
from core.tpu import topology_compile

# derandomize: CI draws the same examples every run (a failure is reproducible, not flaky);
# no database: nothing is written beside the checkout.
hypothesis.settings.register_profile(
    "ci", max_examples=5, deadline=None, derandomize=True, database=None
)
hypothesis.settings.register_profile(
    "benchmark", max_examples=300, deadline=None, derandomize=False, database=None
)
CI = hypothesis.settings.get_profile("ci")


# "interpret": TPU interpret mode (races, NaN-poisoned memory); "hlo": jax's plain HLO
# interpreter (the same kernel semantics, no race detector, ~2x cheaper per case); "tpu":
# compiled by Mosaic. The one mapping lives in core.kernels.matmul.
interpret_for = matmul.interpret_for


# The property's breadth runs in the HLO interpreter; the classes below run every kernel in
# TPU interpret mode, where a missing init or a race shows.
PROPERTY_MODE = "hlo"


@dataclasses.dataclass(frozen=True)
class Case:
    """One drawn configuration of the property."""

    batch: int
    heads: int
    t: int
    d: int
    block_q: int
    block_k: int
    causal: bool
    dtype: str
    seed: int = 0


def operands(case: Case):
    """q, k, v and the upstream gradient dO, (B, H, T, D) standard normals in case.dtype.

    Drawn with NumPy and cast there (ml_dtypes' bfloat16): eager jax.random would compile
    small programs for every new shape, a few tenths of a second per case.
    """
    rng = np.random.default_rng(case.seed)
    shape = (4, case.batch, case.heads, case.t, case.d)
    return tuple(jnp.asarray(x) for x in rng.standard_normal(shape).astype(jnp.dtype(case.dtype)))


# Interpret mode runs every program as its own step on the CPU (a few ms each, three kernels
# per example): at most this many programs per kernel keeps an example near 2 s.
MAX_PROGRAMS = 16


@strategies.composite
def cases(draw):
    dtype = draw(strategies.sampled_from(["float32", "bfloat16"]))
    t = draw(strategies.sampled_from([8, 16, 32, 64]))
    batch, heads = draw(strategies.sampled_from([(1, 1), (1, 2), (2, 1)]))
    sublanes = tiling.min_tile(dtype)[0]
    blocks = [b for b in (8, 16, 32, 64) if b <= t and t % b == 0 and (b % sublanes == 0 or b == t)]
    block_q = draw(strategies.sampled_from(blocks))
    fits = [b for b in blocks if batch * heads * (t // block_q) * (t // b) <= MAX_PROGRAMS]
    return Case(
        batch=batch,
        heads=heads,
        t=t,
        d=draw(strategies.sampled_from([8, 16, 32, 64, 128])),
        block_q=block_q,
        block_k=draw(strategies.sampled_from(fits)),
        causal=draw(strategies.booleans()),
        dtype=dtype,
        seed=draw(strategies.integers(0, 2**16)),
    )


def property_errors(case: Case, mode: str = PROPERTY_MODE) -> dict[str, float]:
    """The kernel's O, L, dQ, dK, dV against the jnp reference and jax.grad of it (same
    inputs) and against NumPy float64 closed forms: {what: scaled max error}."""
    q, k, v, do = operands(case)
    o, lse, grads = flash_attention.forward_and_grads(
        q, k, v, do, case.causal, case.block_q, case.block_k, "kernel", interpret_for(mode)
    )
    ref_o, ref_grads = flash_attention.reference_and_grads(q, k, v, do, case.causal)
    np_o, np_lse = flash_attention.attention_numpy(q, k, v, case.causal)
    np_grads = flash_attention.attention_grad_numpy(q, k, v, do, case.causal)
    errors = {
        "O vs mha_reference": numerics.scaled_max_error(o, ref_o),
        "O vs float64": numerics.scaled_max_error(o, np_o),
        "L vs float64": numerics.scaled_max_error(lse, np_lse),
    }
    for name, g, ref_g, np_g in zip(("dQ", "dK", "dV"), grads, ref_grads, np_grads, strict=True):
        assert g.dtype == jnp.dtype(case.dtype)
        errors[f"{name} vs jax.grad(mha_reference)"] = numerics.scaled_max_error(g, ref_g)
        errors[f"{name} vs float64"] = numerics.scaled_max_error(g, np_g)
    return errors


def tolerances(case: Case) -> dict[str, float]:
    """The dtype's tolerance; L is f32 in every case (computed from f32 scores)."""
    tol = numerics.tolerance(case.dtype)
    # kernel and jnp reference each round to bfloat16 on their own: two roundings apart
    pair = 2 * tol
    return {
        "O vs mha_reference": pair,
        "O vs float64": tol,
        "L vs float64": numerics.tolerance("float32"),
        **{f"{g} vs jax.grad(mha_reference)": pair for g in ("dQ", "dK", "dV")},
        **{f"{g} vs float64": tol for g in ("dQ", "dK", "dV")},
    }


def failures(case: Case, mode: str = PROPERTY_MODE) -> dict[str, tuple[float, float]]:
    """What exceeds its tolerance: {what: (error, tolerance)} (empty when the case passes)."""
    errors, bounds = property_errors(case, mode), tolerances(case)
    return {n: (e, bounds[n]) for n, e in errors.items() if not e <= bounds[n]}


# Every example hypothesis ever found failing, kept after the fix, with what it caught. Each
# runs before the drawn ones (hypothesis.example), so a regression fails first.
REGRESSION_CASES = [
    # hypothesis' shrunk find when the online softmax's rescale alpha = exp(m_old - m_new) was
    # removed (a planted bug, benchmark run of 2026-12-01): the smallest case with two k
    # blocks, O off by 0.8 of its scale
    Case(1, 1, 16, 8, 8, 8, False, "float32", 0),
]
# Edges chosen by hand (not finds), run the same way.
EDGE_CASES = [
    # one block per axis: the init, the step and the finalize in the same program
    Case(1, 1, 8, 8, 8, 8, True, "float32"),
    # causal with block_q < block_k: a k block straddles the diagonal of several q blocks
    Case(1, 2, 32, 16, 8, 32, True, "float32", 3),
    # causal with blocks wholly below the diagonal (run without the mask) beside blocks that
    # cross it, square and in both oblongs
    Case(1, 1, 32, 16, 8, 8, True, "float32", 5),
    Case(1, 1, 32, 16, 8, 16, True, "bfloat16", 6),
    Case(1, 1, 32, 16, 16, 8, True, "float32", 7),
]


def _with_examples(test):
    for case in reversed(REGRESSION_CASES + EDGE_CASES):
        test = hypothesis.example(case)(test)
    return test


@pytest.mark.cpu_only(
    "jax's HLO interpreter runs the kernel on the host's CPU, the same on every host and run in CI"
)
@hypothesis.settings(CI)
@_with_examples
@hypothesis.given(cases())
def test_kernel_matches_references_property(case):
    assert failures(case) == {}, case


class TestForward:
    # One case per class (float32 is TestBackward's): each compiles interpreted kernels, and
    # the property covers the shapes, blocks and flags.
    @pytest.mark.parametrize(
        "case", [Case(2, 1, 32, 128, 16, 32, True, "bfloat16", 2)], ids=["bf16-causal"]
    )
    def test_matches_numpy(self, mode, case):
        q, k, v, _ = operands(case)
        o, lse = flash_attention.forward_with_lse(
            q, k, v, case.causal, case.block_q, case.block_k, interpret_for(mode)
        )
        np_o, np_lse = flash_attention.attention_numpy(q, k, v, case.causal)
        assert o.dtype == jnp.dtype(case.dtype) and lse.dtype == jnp.float32
        assert numerics.scaled_max_error(o, np_o) <= numerics.tolerance(case.dtype)
        assert numerics.scaled_max_error(lse, np_lse) <= numerics.tolerance("float32")
        if case.causal:  # row 0 attends only to key 0: O[0] = V[0]
            first = numerics.scaled_tolerance(1e-6)  # one key: softmax weight 1, O = V
            assert numerics.scaled_max_error(o[:, :, 0], v[:, :, 0]) <= first
        if mode == "interpret":
            assert matmul.races_found() is False  # the detector ran and found none


class TestBackward:
    CASE = Case(1, 2, 16, 16, 16, 8, True, "float32", 4)

    @pytest.mark.parametrize("backward", flash_attention.BACKWARDS)
    def test_custom_vjp_matches_closed_form(self, mode, backward):
        """jax.grad through flash_attention's custom_vjp (both backward rules) equals the
        NumPy float64 closed form: the wiring forward_and_grads skips."""
        case = self.CASE
        q, k, v, do = operands(case)

        def loss(q, k, v):
            o = flash_attention.flash_attention(
                q, k, v, case.causal, case.block_q, case.block_k, backward, interpret_for(mode)
            )
            return jnp.sum(o * do)

        grad = jax.grad(loss, argnums=(0, 1, 2))
        grads = jax.jit(grad, compiler_options=flash_attention.COMPILER_OPTIONS)(q, k, v)
        expected = flash_attention.attention_grad_numpy(q, k, v, do, case.causal)
        for g, ref in zip(grads, expected, strict=True):
            assert numerics.scaled_max_error(g, ref) <= numerics.tolerance("float32")
        if mode == "interpret":
            assert matmul.races_found() is False


def test_a_wrong_backward_is_caught():
    """The property can fail: the reference's gradient with the wrong causal flag is refused."""
    case = Case(1, 1, 16, 8, 8, 8, True, "float32")
    q, k, v, do = operands(case)
    _, grads = flash_attention.reference_and_grads(q, k, v, do, causal=False)
    expected = flash_attention.attention_grad_numpy(q, k, v, do, causal=True)
    assert numerics.scaled_max_error(grads[0], expected[0]) > numerics.tolerance("float32")


@pytest.mark.parametrize("t, block_q, block_k", [(32, 8, 8), (32, 8, 16), (32, 16, 8), (64, 64, 8)])
def test_causal_block_counts_match_the_mask(t, block_q, block_k):
    """Each (q block, k block) pair classified from the causal mask's own elements (NumPy's
    tril): unmasked where every element is kept, skipped where none is, masked otherwise."""
    keep = np.tril(np.ones((t, t), bool))
    expected = {"unmasked": 0, "masked": 0, "skipped": 0}
    for i in range(t // block_q):
        for j in range(t // block_k):
            block = keep[i * block_q : (i + 1) * block_q, j * block_k : (j + 1) * block_k]
            kind = "unmasked" if block.all() else "masked" if block.any() else "skipped"
            expected[kind] += 1
    assert flash_attention.causal_block_counts(t, block_q, block_k) == expected


def test_causal_block_counts_at_the_chip_benchmark_shape():
    counts = flash_attention.causal_block_counts(8192, 1024, 1024)
    assert counts == {"unmasked": 28, "masked": 8, "skipped": 28}


def test_a_mask_left_off_a_crossing_block_is_caught(monkeypatch):
    """The unmasked step is only for blocks wholly below the diagonal: a planted off-by-one
    that runs a crossing block without its mask (every block at or below the diagonal's
    start called "below") puts future keys into O, and the float64 check sees it. A shape of
    its own (D = 24) so no earlier trace of the right kernel is reused from jit's cache."""
    monkeypatch.setattr(
        flash_attention,
        "_below_diagonal",
        lambda i, j, block_q, block_k: j * block_k <= i * block_q,
    )
    case = Case(1, 1, 32, 24, 8, 8, True, "float32", 8)
    q, k, v, _ = operands(case)
    o, _ = flash_attention.forward_with_lse(q, k, v, True, 8, 8, interpret_for("hlo"))
    expected, _ = flash_attention.attention_numpy(q, k, v, causal=True)
    assert numerics.scaled_max_error(o, expected) > 0.01


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_matmuls_only_ablation_computes_its_closed_form(causal):
    """The ablation's O is the sum, over the k blocks the kernel computes, of (Q K^T) V, in
    NumPy float64: every block when not causal; with block_q = block_k, k blocks j <= i when
    causal, the diagonal block whole (no mask, no softmax)."""
    t, block = 32, 8
    rng = np.random.default_rng(9)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 2, t, 8)), jnp.float32) for _ in range(3))
    o, lse = flash_attention.forward_with_lse(
        q, k, v, causal, block, block, interpret_for("hlo"), "matmuls_only"
    )
    scores = np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2)
    if causal:
        blocks = t // block
        scores = scores * np.kron(np.tril(np.ones((blocks, blocks))), np.ones((block, block)))
    expected = scores @ np.asarray(v, np.float64)
    assert numerics.scaled_max_error(o, expected) <= numerics.tolerance("float32")
    assert not np.any(np.asarray(lse))


def test_closed_form_matches_finite_differences():
    """The NumPy gradient is itself right: central differences of sum(O * dO) in float64."""
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 1, 4, 3)) for _ in range(4))
    dq, dk, dv = flash_attention.attention_grad_numpy(q, k, v, do, causal=True)
    loss = lambda q, k, v: float(np.sum(flash_attention.attention_numpy(q, k, v, True)[0] * do))  # noqa: E731
    step = 1e-6
    for which, grad in ((0, dq), (1, dk), (2, dv)):
        args = [q, k, v]
        for index in np.ndindex(q.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[which][index] += step
            minus[which][index] -= step
            numeric = (loss(*plus) - loss(*minus)) / (2 * step)
            assert abs(numeric - grad[index]) <= 1e-7


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"block_q": 0}, "must be positive"),
        ({"backward": "autodiff"}, "backward must be one of"),
        ({"variant": "no_softmax"}, "variant must be one of"),
        ({"layout": "TBHD"}, "layout must be one of"),
    ],
)
def test_config_refuses(kwargs, words):
    with pytest.raises(ValueError, match=words):
        flash_attention.Config(**kwargs)


def test_blocks_must_divide_t():
    with pytest.raises(ValueError, match="must divide T = 48"):
        flash_attention.Config(32, 16).check_shape(48)


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
@pytest.mark.parametrize("variant", flash_attention.VARIANTS)
def test_compiles_through_mosaic_for_v5e(variant):
    shape = (1, 2, 256, 64)
    report, has_custom_call = flash_attention.compile_for_topology(
        "v5e:2x2", shape, flash_attention.Config(128, 64, causal=True, variant=variant)
    )
    assert has_custom_call
    assert report.device_kind.startswith("TPU v5")
    assert report.memory["argument_size_in_bytes"] == 3 * 4 * np.prod(shape)
    assert report.memory["output_size_in_bytes"] == 4 * np.prod(shape)


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
@pytest.mark.parametrize("t, block_q, block_k", [(32, 8, 8), (256, 64, 128), (256, 128, 64)])
def test_segmented_kernels_compile_through_mosaic_for_v5e(t, block_q, block_k):
    """test_segment_ids_mask_packed_documents[tpu] failed on a v5e before running: Mosaic
    refused the k ids' (1, 8) block of a (B, 1, 32) array (the last dim must be whole or a
    multiple of 128). The forward and both backward kernels with segment ids, at that test's
    blocks and at larger ones, now compile through Mosaic for v5e here."""
    report, has_custom_call = flash_attention.compile_gradients_for_topology(
        "v5e:2x2", (2, 2, t, 8), flash_attention.Config(block_q, block_k, causal=True)
    )
    assert has_custom_call and report.device_kind.startswith("TPU v5")


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_the_bthd_layout_compiles_through_mosaic_for_v5e():
    """Each head a 128-lane block of (B, T, H * D): Mosaic takes the forward and both backward
    kernels with segment ids for v5e at the preset's head dim."""
    cfg = flash_attention.Config(128, 128, causal=True, layout="BTHD")
    report, has_custom_call = flash_attention.compile_gradients_for_topology(
        "v5e:2x2", (2, 4, 256, 128), cfg
    )
    assert has_custom_call and report.device_kind.startswith("TPU v5")


def _segmented_reference_float64(q, k, v, do, segment_ids):
    """Attention and its gradient in float64 under the byte Transformer's own training mask
    (core.lm.tokenizer.segment_mask_BTS, causal), written out here: an independent check of
    the kernels' segment masking."""
    from core.lm import tokenizer

    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    mask = tokenizer.segment_mask_BTS(np.asarray(segment_ids), causal=True)[:, None]
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.where(mask, q @ np.swapaxes(k, -1, -2) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return p @ v, (ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ do)


def test_segment_ids_mask_packed_documents(mode):
    """Causal + segment ids (packed documents, a padding tail of id 0) forward and gradients
    equal the float64 attention under tokenizer.segment_mask_BTS; k blocks wholly in another
    document (rows 24.. of batch 0 see none of keys 0..7) are computed and must vanish."""
    b, h, t, d = 2, 2, 32, 8
    rng = np.random.default_rng(3)
    q, k, v, do = (jnp.asarray(rng.standard_normal((b, h, t, d)), jnp.float32) for _ in range(4))
    segment_ids = np.zeros((b, t), np.int32)
    segment_ids[0, :5], segment_ids[0, 5:24], segment_ids[0, 24:30] = 1, 2, 3  # 30.. padding
    segment_ids[1, :] = 7
    interpret = interpret_for(mode)

    def loss(q, k, v):
        o = flash_attention.flash_attention(
            q, k, v, True, 8, 8, "kernel", interpret, segment_ids_BT=jnp.asarray(segment_ids)
        )
        return jnp.sum(o * do), o

    (_, o), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    expected_o, expected_grads = _segmented_reference_float64(q, k, v, do, segment_ids)
    assert numerics.scaled_max_error(o, expected_o) <= numerics.tolerance("float32")
    for grad, expected in zip(grads, expected_grads, strict=True):
        assert numerics.scaled_max_error(grad, expected) <= numerics.tolerance("float32")
    # the segment mask matters here: the causal-only kernel differs
    causal_only = flash_attention.flash_attention(q, k, v, True, 8, 8, "kernel", interpret)
    assert numerics.scaled_max_error(causal_only, expected_o) > 0.01


def test_the_bthd_layout_reads_heads_in_place(mode):
    """q, k, v as (B, T, H, D) (the layout a Transformer's projections give, D = 128): forward
    and gradients, causal with segment ids, equal the float64 attention of the same arrays
    transposed to (B, H, T, D), and come back as (B, T, H, D)."""
    b, h, t, d = 1, 2, 32, 128
    rng = np.random.default_rng(4)
    q, k, v, do = (jnp.asarray(rng.standard_normal((b, t, h, d)), jnp.float32) for _ in range(4))
    segment_ids = np.repeat(np.array([[1, 2]], np.int32), t // 2, axis=1)
    interpret = interpret_for(mode)

    def loss(q, k, v):
        o = flash_attention.flash_attention(
            q, k, v, True, 8, 16, "kernel", interpret, jnp.asarray(segment_ids), layout="BTHD"
        )
        return jnp.sum(o * do), o

    (_, o), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    to_bhtd = lambda x: np.swapaxes(np.asarray(x), 1, 2)  # noqa: E731
    expected_o, expected_grads = _segmented_reference_float64(
        *(to_bhtd(x) for x in (q, k, v, do)), segment_ids
    )
    assert o.shape == q.shape and all(g.shape == q.shape for g in grads)
    assert numerics.scaled_max_error(to_bhtd(o), expected_o) <= numerics.tolerance("float32")
    for grad, expected in zip(grads, expected_grads, strict=True):
        assert numerics.scaled_max_error(to_bhtd(grad), expected) <= numerics.tolerance("float32")


def test_the_bthd_layout_needs_whole_lane_blocks_per_head():
    q = jnp.zeros((1, 16, 2, 64))
    with pytest.raises(ValueError, match="multiple of 128"):
        flash_attention.flash_attention(q, q, q, True, 8, 8, "kernel", True, layout="BTHD")
    one_head = jnp.zeros((1, 16, 1, 64))  # one head: its block is the whole last dim
    out = flash_attention.flash_attention(
        one_head, one_head, one_head, True, 8, 8, "kernel", True, layout="BTHD"
    )
    assert out.shape == one_head.shape


def test_segment_ids_must_be_b_by_t():
    q = jnp.zeros((1, 1, 16, 8))
    with pytest.raises(ValueError, match=r"segment_ids must be \(B, T\)"):
        flash_attention.flash_attention(
            q, q, q, True, 8, 8, "kernel", True, segment_ids_BT=jnp.zeros((1, 8), jnp.int32)
        )
