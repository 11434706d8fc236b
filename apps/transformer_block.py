import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="A Transformer block and mixed precision",
)

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import ml_dtypes
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.transformers import transformer_block
    from core.lm import attention, transformer

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("width", 64, "model width D", lo=8, hi=256, step=8),
        lab.Flag("heads", 4, "attention heads H (must divide the width)", lo=1, hi=16),
        lab.Flag("seq_len", 64, "sequence length T", lo=2, hi=128),
        lab.Flag(
            "policy",
            "bf16 compute",
            "precision policy: params / compute / accumulate",
            choices=tuple(transformer.POLICIES),
        ),
        lab.Flag("seed", 0, "PRNG seed for the weights and the input", lo=0, hi=9999),
        lab.Flag(
            "positions",
            "RoPE",
            "position information in the block's attention",
            choices=("none", "RoPE"),
        ),
        lab.Flag("swap", 3, "swap token 0 with this token (order test)", lo=1, hi=127),
        description=(
            "A Transformer block and mixed precision: pre-LayerNorm block, precision policies, "
            "bf16 error."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # A Transformer block and mixed precision
    {lab.phase_line("transformer_block")}

    A Transformer is a stack of identical **blocks**. Each block lets positions exchange
    information (attention, from the first lesson of this phase) and then lets each position
    think on its own (a small MLP), with a residual connection around both. TPUs run such
    blocks fastest in **bfloat16**, a 16-bit float with float32's range but only 8 bits of
    precision. In this lesson you will

    - build a **pre-LayerNorm** block in Flax NNX and check it, weight for weight, against an
      independent NumPy float64 implementation;
    - pick a **precision policy** (which numbers are stored, multiplied and summed in which
      dtype) and measure what bf16 compute costs in accuracy, position by position;
    - see *where* bf16 loses precision: a long sum in bf16 stops growing, which is why every
      accumulator (matmul sums, softmax and LayerNorm statistics) stays float32;
    - give the block a sense of **order** with rotary position embeddings (RoPE), and see that
      without them attention cannot tell which token came where.
    """)
    return


@app.cell
def _():
    width = FLAGS.control("width", ARGS, label="width D")
    heads = FLAGS.control("heads", ARGS, label="heads H")
    seq_len = FLAGS.control("seq_len", ARGS, label="sequence length T")
    policy = FLAGS.control("policy", ARGS, label="precision policy")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([width, heads, seq_len], justify="start"),
            mo.hstack([policy, seed], justify="start"),
        ]
    )
    return heads, policy, seed, seq_len, width


@app.cell
def _(heads, policy, seq_len, width):
    # The same shapes under two policies: the float32 reference and the one you picked.
    config_problem = None
    try:
        f32_config = transformer.TransformerConfig(
            width=width.value, num_heads=heads.value, num_layers=1, max_len=seq_len.value
        )
        policy_config = transformer.TransformerConfig(
            width=width.value,
            num_heads=heads.value,
            num_layers=1,
            max_len=seq_len.value,
            precision=transformer.POLICIES[policy.value],
        )
    except ValueError as error:
        config_problem = str(error)
    lab.guard(config_problem, headline="This block cannot be built.")
    return f32_config, policy_config


@app.cell
def _(f32_config, policy_config, seed):
    key = jax.random.key(seed.value)
    # Same key, same draws: the policy block holds the same weights (rounded if params are bf16).
    block = transformer.Block(f32_config, jax.random.fold_in(key, 0))
    policy_block = transformer.Block(policy_config, jax.random.fold_in(key, 0))
    x_BTD = jnp.asarray(
        attention.normal_draws(
            jax.random.fold_in(key, 1), f32_config.max_len * f32_config.width
        ).reshape(1, f32_config.max_len, f32_config.width)
    )
    weights = transformer.block_weights(block)
    _rows = [
        {"parameter": name, "shape": str(p.shape), "stored as": str(p[...].dtype)}
        for name, p in transformer.block_parameters(policy_block).items()
    ]
    mo.vstack(
        [
            mo.md(
                f"""
    ## 1 · The block

    ```
    h = x + Attention(LayerNorm₁(x))  # positions exchange information (causal)
    y = h + MLP(LayerNorm₂(h))        # each position on its own: D → {f32_config.hidden} → D, GELU
    ```

    **Pre**-LayerNorm means the normalization sits *inside* each branch, so the residual
    stream `x → h → y` is a plain sum: gradients reach early layers undisturbed, and deep
    stacks train without the warm-up tricks the original post-LN design needed.
    LayerNorm rescales each position's vector to mean 0 and variance 1, then applies a
    learned scale and bias. Attention has H = {f32_config.num_heads} heads of
    K = {f32_config.head_dim} channels. One block here has
    {sum(w.size for w in weights.values()):,} parameters:
    """
            ),
            lab.table(_rows),
        ]
    )
    return block, policy_block, weights, x_BTD


@app.cell
def _(block, policy, policy_block, policy_config, weights, x_BTD):
    y_f32_BTD = transformer.block_forward(block, x_BTD)
    y_policy_BTD = transformer.block_forward(policy_block, x_BTD)
    # Independent reference: the same block written out in NumPy float64, same weights.
    y_reference_BTD = transformer.block_reference(weights, x_BTD)
    # The check runs the block under the policy you picked, against NumPy float64 with the
    # weights that block stores (bf16 weights upcast exactly), to that policy's tolerance.
    _stored = transformer.block_weights(policy_block)
    y_policy_reference_BTD = transformer.block_reference(_stored, x_BTD)
    # policy_tolerance: numerics.tolerance of the coarsest of the params and compute dtypes.
    check = lab.Check(
        f"Flax NNX block under the policy '{policy.value}' "
        f"(params {policy_config.precision.params}, compute {policy_config.precision.compute}) "
        "vs the same block in NumPy float64 (same stored weights, causal); "
        "error relative to max(max |reference|, 1)",
        numerics.scaled_max_error(y_policy_BTD, y_policy_reference_BTD),
        transformer.policy_tolerance(policy_config.precision),
    )
    check
    return check, y_f32_BTD, y_policy_BTD, y_reference_BTD


@app.cell
def _(policy, policy_config):
    _p = policy_config.precision
    _rows = [
        {
            "numbers": "parameters (what the optimizer updates)",
            "dtype": f"`{_p.params}`",
            "why": "small updates must not round away",
        },
        {
            "numbers": "activations, matmul inputs",
            "dtype": f"`{_p.compute}`",
            "why": "bf16 halves memory traffic; the TPU MXU multiplies bf16 natively",
        },
        {
            "numbers": "matmul accumulators, softmax and LayerNorm statistics, the loss",
            "dtype": f"`{_p.accumulate}`",
            "why": "long sums need the bits (section 3)",
        },
    ]
    mo.vstack(
        [
            mo.md(
                f"""
    ## 2 · A precision policy

    Mixed precision is not one switch but a decision for each kind of number. The policy
    **{policy.value}**:
    """
            ),
            lab.table(_rows),
            mo.md(
                """
    In code: every product is `jnp.einsum(..., x.astype(compute), w.astype(compute),
    preferred_element_type=jnp.float32)`; LayerNorm upcasts to float32 before its mean and
    variance; attention scores and softmax are float32 (see `core/lm/attention.py`). Only the
    block's inputs and outputs travel in the compute dtype.
    """
            ),
        ]
    )
    return


@app.cell
def _(policy, y_f32_BTD, y_policy_BTD, y_reference_BTD):
    def position_errors(result_BTD, reference_BTD):
        """Relative error of each position's output vector: max |diff| / max |reference|."""
        result = np.asarray(jnp.asarray(result_BTD).astype(jnp.float32), np.float64)[0]
        reference = np.asarray(jnp.asarray(reference_BTD).astype(jnp.float32), np.float64)[0]
        return np.abs(result - reference).max(-1) / np.abs(reference).max()

    policy_errors_T = position_errors(y_policy_BTD, y_f32_BTD)
    _frame = pd.concat(
        [
            pd.DataFrame(
                {
                    "keys attended (t + 1)": np.arange(1, len(policy_errors_T) + 1),
                    "relative error": policy_errors_T,
                    "comparison": f"{policy.value} vs float32 block",
                }
            ),
            pd.DataFrame(
                {
                    "keys attended (t + 1)": np.arange(1, len(policy_errors_T) + 1),
                    "relative error": np.maximum(
                        position_errors(y_f32_BTD, y_reference_BTD), 1e-12
                    ),
                    "comparison": "float32 block vs NumPy float64",
                }
            ),
        ]
    )
    _chart = (
        alt.Chart(
            _frame,
            title="output error at each position (a causal block: position t sees t + 1 keys)",
        )
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X("keys attended (t + 1):Q", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("relative error:Q", scale=alt.Scale(type="log")),
            color=alt.Color("comparison:N", legend=alt.Legend(orient="bottom")),
            tooltip=[
                "comparison",
                "keys attended (t + 1)",
                alt.Tooltip("relative error:Q", format=".3g"),
            ],
        )
        .properties(width=520, height=240)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ### Error against the float32 block, position by position

    Because the block is causal, output position `t` of one long run is exactly what a
    sequence of length `t + 1` would give, so one forward pass shows the error for every
    sequence length at once. Worst position: **{policy_errors_T.max():.3g}** (mean
    {policy_errors_T.mean():.3g}). bf16 keeps 8 significant bits (unit roundoff
    2⁻⁸ ≈ 4e-3): rounding x, the weights and the intermediate activations adds a few of
    those, and with float32 accumulators the error does *not* grow with the number of keys
    summed over.
    """
            ),
            _chart,
        ]
    )
    return (policy_errors_T,)


@app.cell
def _(seed):
    accumulation_length = 4096
    dot_errors = transformer.dot_prefix_errors(jax.random.key(seed.value), accumulation_length)
    stall_sums = transformer.running_sums(np.full(2000, 0.01, np.float32), "bfloat16")
    stall_sums_f32 = transformer.running_sums(np.full(2000, 0.01, np.float32), "float32")
    return accumulation_length, dot_errors, stall_sums, stall_sums_f32


@app.cell
def _(accumulation_length, dot_errors, stall_sums, stall_sums_f32):
    _n = np.arange(1, len(stall_sums) + 1)
    _every = slice(None, None, 20)
    _sums = pd.concat(
        [
            pd.DataFrame(
                {
                    "additions": _n[_every],
                    "running sum": stall_sums[_every],
                    "accumulator": "bfloat16",
                }
            ),
            pd.DataFrame(
                {
                    "additions": _n[_every],
                    "running sum": stall_sums_f32[_every],
                    "accumulator": "float32",
                }
            ),
        ]
    )
    _sum_chart = (
        alt.Chart(_sums, title="adding 0.01 two thousand times")
        .mark_line()
        .encode(
            x="additions:Q",
            y="running sum:Q",
            color=alt.Color("accumulator:N", legend=alt.Legend(orient="bottom")),
        )
        .properties(width=300, height=220)
    )
    _lengths = np.unique(np.geomspace(1, accumulation_length, 60).astype(int))
    _dots = pd.concat(
        [
            pd.DataFrame(
                {
                    "length n": _lengths,
                    "relative error": np.maximum(errors[_lengths - 1], 1e-9),
                    "accumulator": name,
                }
            )
            for name, errors in dot_errors.items()
        ]
    )
    _dot_chart = (
        alt.Chart(
            _dots, title="dot product of n bf16 pairs: error vs float64 (exact drawn at 1e-9)"
        )
        .mark_line()
        .encode(
            x=alt.X("length n:Q", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("relative error:Q", scale=alt.Scale(type="log")),
            color=alt.Color("accumulator:N", legend=alt.Legend(orient="bottom")),
        )
        .properties(width=300, height=220)
    )
    _bf16 = ml_dtypes.bfloat16
    mo.vstack(
        [
            mo.md(
                f"""
    ## 3 · Where bf16 loses precision: long sums

    bfloat16 spends its 16 bits on float32's 8 exponent bits (same range, up to ~3e38) and
    only 7 stored mantissa bits. Around 1.0 its numbers are 2⁻⁷ = 0.0078 apart; around 4.0
    they are 0.03125 apart. So `1 + 1/512` in bf16 is `{float(_bf16(1) + _bf16(1 / 512))}`, and
    `4 + 0.01` is `{float(_bf16(4) + _bf16(0.01))}`: once a running sum is large, each small
    addition rounds away. Adding 0.01 two thousand times should give 20; a bf16 accumulator
    stops at **{stall_sums[-1]:g}** and a float32 one reaches {stall_sums_f32[-1]:.4f}.

    A matrix product is thousands of such sums. With a bf16 accumulator the dot product of
    {accumulation_length} pairs is off by **{dot_errors["bfloat16"][-1]:.0%}**; with a float32
    accumulator (bf16 *inputs*, the policy above) by {dot_errors["float32"][-1]:.1e}. That is
    why the policy multiplies in bf16 but sums in float32 (the MXU does exactly this), and
    why LayerNorm's mean and variance and the softmax denominator, sums over D and over keys,
    are computed in float32 too. The same stall hits **bf16 parameters**: an optimizer step
    smaller than half a bf16 spacing of the weight is lost, which is why parameters (or a
    float32 master copy of them) stay float32.
    """
            ),
            mo.hstack([_sum_chart, _dot_chart], justify="start"),
        ]
    )
    return


@app.cell
def _():
    positions_choice = FLAGS.control("positions", ARGS, label="positions")
    swap = FLAGS.control("swap", ARGS, label="swap token 0 with token")
    mo.vstack(
        [
            mo.md(
                """
    ## 4 · Where is the order? Rotary position embeddings

    Attention compares every query with every key; nothing in it says *where* a token sits.
    Without a mask, swap two tokens and the outputs come back swapped the same way: the block
    is **permutation-equivariant**. A language model must know that "dog bites man" is not
    "man bites dog", so position has to enter somewhere. RoPE (Su et al., RoFormer,
    https://arxiv.org/abs/2104.09864) rotates each pair of channels of q and k at position
    `m` by the angle `m · θᵢ`, `θᵢ = 10000^(−2i/K)`. Rotations compose, so after RoPE
    `q_m · k_n` depends on the positions only through `n − m`. The learned position table of
    the LM lesson adds a vector to `x` instead; RoPE has no parameters.
    """
            ),
            mo.hstack([positions_choice, swap], justify="start"),
        ]
    )
    return positions_choice, swap


@app.cell
def _(f32_config, positions_choice, seed, swap, x_BTD):
    _t = f32_config.max_len
    lab.guard(
        None
        if swap.value < _t
        else f"token {swap.value} does not exist: the sequence has {_t} tokens (0..{_t - 1}).",
        headline="Nothing to swap.",
    )
    use_rope = positions_choice.value == "RoPE"
    rope_problem = None
    try:
        rope_config = transformer.TransformerConfig(
            width=f32_config.width,
            num_heads=f32_config.num_heads,
            num_layers=1,
            max_len=_t,
            rope=use_rope,
        )
    except ValueError as error:  # RoPE needs an even head dim
        rope_problem = f"{error}: pick a width and heads whose D / H is even, or positions none."
    lab.guard(rope_problem, headline="RoPE cannot rotate this head.")
    # the same draws as the block above: RoPE adds no parameter
    order_block = transformer.Block(rope_config, jax.random.fold_in(jax.random.key(seed.value), 0))
    # both orders and both masks as the four rows of one batch: one compiled program
    order = transformer_block.order_test(order_block, x_BTD, swap.value)
    order_gaps = order.gaps
    order_reference_BTD = transformer.block_reference(
        transformer.block_weights(order_block),
        x_BTD,
        rope_positions_BT=np.arange(_t)[None] if use_rope else None,
    )
    order_check = lab.Check(
        f"causal block with positions '{positions_choice.value}' (float32) vs the same block in "
        "NumPy float64" + (" with RoPE from the paper's rotation matrices" if use_rope else ""),
        numerics.scaled_max_error(order.causal_y_BTD, order_reference_BTD),
        numerics.tolerance("float32"),
    )
    order_check
    return order_check, order_gaps, use_rope


@app.cell
def _(order_gaps, swap, use_rope):
    _frame = pd.concat(
        [
            pd.DataFrame(
                {
                    "position t": np.arange(len(gaps)),
                    "gap": np.maximum(gaps, 1e-9),
                    "mask": "causal" if causal else "no mask",
                }
            )
            for causal, gaps in order_gaps.items()
        ]
    )
    _free = float(order_gaps[False].max())
    _after = float(order_gaps[True][swap.value :].max())
    _seen = (
        "With RoPE the scores depend on where each token sits, so swapping changes the "
        "outputs: order is seen."
        if use_rope
        else "Without positions both are float32 rounding: the block cannot tell the order of "
        "what it sees. The causal mask alone shows only who came before (positions between "
        "the two swapped tokens do change)."
    )
    _kind = "RoPE" if use_rope else "no positions"
    mo.vstack(
        [
            mo.md(
                f"""
    Swap token 0 with token {swap.value} and compare the block's output with its own output
    swapped the same way. Largest gap without a mask: **{_free:.2g}**; causal, at positions
    t ≥ {swap.value} (which see both tokens either way): **{_after:.2g}** ({_kind}).
    {_seen}
    Switch **positions** to compare.
    """
            ),
            alt.Chart(_frame, title="|swapped output - output swapped| per position (1e-9: none)")
            .mark_line(point=alt.OverlayMarkDef(size=12))
            .encode(
                x=alt.X("position t:Q"),
                y=alt.Y("gap:Q", scale=alt.Scale(type="log")),
                color=alt.Color("mask:N", legend=alt.Legend(orient="bottom")),
                tooltip=["mask", "position t", alt.Tooltip("gap:Q", format=".3g")],
            )
            .properties(width=520, height=200),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## Try this

    - Switch the policy to **f32**: the two lines of the error chart meet at float32 roundoff.
    - Pick **bf16 params + compute**: rounding the stored weights adds error on top of bf16
      compute, and (not shown here) training would lose small updates.
    - Make the width 256 with 3 heads: the block refuses, since 3 does not divide 256.
    - Raise the sequence length to 128 and look at the right end of the error chart: with
      float32 accumulation, attending to more keys does not make bf16 worse.
    """)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("transformer_block")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_policy_error_is_bounded(policy_config, policy_errors_T):
    # Against the float32 block (not float64): float32's tolerance when nothing is bf16; with
    # bf16 params too the stored weights differ from the float32 block's, hence 5e-2.
    all_f32 = policy_config.precision.compute == policy_config.precision.params == "float32"
    bound = numerics.tolerance("float32") if all_f32 else 5e-2
    assert policy_errors_T.max() <= bound
    return


@app.cell
def test_order_check_passes(order_check):
    order_check.assert_passed()
    return


@app.cell
def test_order_is_seen_only_with_positions(order_gaps, use_rope):
    # no mask: equivariant (gap at float32 rounding) without positions, not with RoPE
    assert (order_gaps[False].max() < 1e-4) is not use_rope
    return


@app.cell
def test_bf16_accumulator_stalls(dot_errors, stall_sums):
    assert stall_sums[-1] < 5 and dot_errors["float32"][-1] < 1e-5 < dot_errors["bfloat16"][-1]
    return


if __name__ == "__main__":
    app.run()
