import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Attention from small pieces")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts, exercises
    from core.lm import attention, attention_torch

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seq_len", 8, "sequence length T (tokens)", lo=2, hi=24),
        lab.Flag("heads", 2, "attention heads H", lo=1, hi=8),
        lab.Flag("head_dim", 4, "channels per head K (width D = H * K)", lo=1, hi=16),
        lab.Flag(
            "dtype",
            "float32",
            "dtype of x, the weights, q, k, v and the output",
            choices=attention.DTYPES,
        ),
        lab.Flag("causal", True, "mask out later positions (a language model's attention)"),
        lab.Flag("head", 0, "which head the pictures show", lo=0, hi=7),
        lab.Flag("row", 5, "which query position the softmax picture shows", lo=0, hi=23),
        lab.Flag("seed", 0, "PRNG seed for x and the projection weights", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Attention from small pieces: q, k, v, scores, mask, softmax, output; "
            "checked against torch and jax.nn."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Attention from small pieces
    {lab.phase_line("attention")}

    Attention lets every position of a sequence **look things up** in the other positions:
    each token asks a question (its *query*), every token advertises what it holds (its *key*)
    and what it will hand over (its *value*). How well a query matches a key decides how much
    of that key's value flows back. This is the core of a Transformer, but not all of it:
    attention by itself knows nothing of **order**. Without a mask, shuffle the tokens and the
    outputs come out shuffled the same way (attention is *permutation-equivariant*); the causal
    mask tells a token which tokens came before it, but not in what order. A Transformer adds
    position information (learned position embeddings, or rotary embeddings, RoPE, in the
    lesson on the Transformer block).

    In this lesson you will build attention from pieces small enough to see whole:

    1. turn token vectors `x` into queries, keys and values with three matrix products;
    2. score every query against every key, and learn why the scores are divided by `√K`;
    3. hide the future with a **causal mask**, the one line that makes a language model;
    4. turn one row of scores into probabilities with **softmax**, and mix the values with them;
    5. check the result against two independent implementations, PyTorch's
       `scaled_dot_product_attention` and `jax.nn.dot_product_attention`;
    6. *prove* causality with gradients: no output may change when a later input changes.

    Shapes carry their dimensions in their names: `x_BTD` is batch × time × width,
    `q_BTHK` splits the width into `H` heads of `K` channels, `scores_BHTS` pairs every
    query position `t` with every key position `s`.
    """)
    return


@app.cell
def _():
    seq_len = FLAGS.control("seq_len", ARGS, label="sequence length T")
    heads = FLAGS.control("heads", ARGS, label="heads H")
    head_dim = FLAGS.control("head_dim", ARGS, label="head dim K")
    dtype = FLAGS.control("dtype", ARGS)
    causal = FLAGS.control("causal", ARGS, label="causal mask")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([seq_len, heads, head_dim], justify="start"),
            mo.hstack([dtype, causal, seed], justify="start"),
        ]
    )
    return causal, dtype, head_dim, heads, seed, seq_len


@app.cell
def _(causal, dtype, head_dim, heads, seed, seq_len):
    config = attention.AttentionConfig(
        seq_len=seq_len.value,
        num_heads=heads.value,
        head_dim=head_dim.value,
        dtype=dtype.value,
        causal=causal.value,
    )
    key = jax.random.key(seed.value)
    x_BTD = attention.example_inputs_BTD(jax.random.fold_in(key, 0), config)  # one sequence: B = 1
    # w_DHK for q, k, v
    projections = attention.init_projections(jax.random.fold_in(key, 1), config)
    q_BTHK, k_BTHK, v_BTHK = attention.project_qkv(projections, x_BTD)
    pieces = attention.attention_pieces(q_BTHK, k_BTHK, v_BTHK, causal=config.causal)
    lab.table(
        [
            {
                "array": "x_BTD",
                "shape": str(tuple(x_BTD.shape)),
                "what it is": "T token vectors of width D = H·K",
            },
            {
                "array": "w_DHK (×3)",
                "shape": str(tuple(projections["wq"].shape)),
                "what it is": "learned projections for q, k, v",
            },
            {
                "array": "q_BTHK, k_BTHK, v_BTHK",
                "shape": str(tuple(q_BTHK.shape)),
                "what it is": "x @ w: one K-vector per position and head",
            },
            {
                "array": "scores_BHTS",
                "shape": str(tuple(pieces.scores_BHTS.shape)),
                "what it is": "q·k/√K for every (query t, key s) pair",
            },
            {
                "array": "out_BTHK",
                "shape": str(tuple(pieces.out_BTHK.shape)),
                "what it is": "probability-weighted sums of v",
            },
        ],
        caption=(
            f"**The arrays** (dtype `{config.dtype}`; scores and probabilities are always float32):"
        ),
    )
    return config, k_BTHK, pieces, projections, q_BTHK, v_BTHK, x_BTD


@app.cell
def _(config):
    # Pickers for one head and one query row; their range follows H and T.
    head = mo.ui.slider(
        0,
        config.num_heads - 1,
        value=min(ARGS.head, config.num_heads - 1),
        label="show head",
        show_value=True,
    )
    row = mo.ui.slider(
        0,
        config.seq_len - 1,
        value=min(ARGS.row, config.seq_len - 1),
        label="query row t",
        show_value=True,
    )
    picker_problem = None
    if not lab.interactive() and ARGS.head >= config.num_heads:
        picker_problem = (
            f"--head {ARGS.head} does not exist: with --heads {config.num_heads} "
            f"the heads are 0..{config.num_heads - 1}."
        )
    elif not lab.interactive() and ARGS.row >= config.seq_len:
        picker_problem = (
            f"--row {ARGS.row} does not exist: with --seq-len {config.seq_len} "
            f"the rows are 0..{config.seq_len - 1}."
        )
    lab.guard(picker_problem, headline="Nothing to show.")
    # The check and the Jacobian cells take `pickers_ok`, so a refused pick stops them too
    # (headless only; it changes with config, as they do, never with the sliders).
    pickers_ok = True
    return head, pickers_ok, row


@app.function
def heatmap(matrix, title, row_title="query t", col_title="key s", scheme="redblue", hidden=None):
    """core.lab.charts.heatmap with this lesson's axis names: values written in (white on dark
    cells) up to 12 positions, beyond that every k-th position labelled; ``hidden`` grey."""
    return charts.heatmap(matrix, title, row_title, col_title, scheme=scheme, hidden=hidden)


@app.cell
def _(head, k_BTHK, q_BTHK, x_BTD):
    _h = head.value
    as_f32 = lambda a: np.asarray(a.astype("float32"))  # noqa: E731  (bf16 -> numbers to draw)
    mo.vstack(
        [
            mo.md(
                f"""
    ## 1 · Queries, keys and values

    Each position `t` holds a vector `x[t]` of width D = {x_BTD.shape[-1]}. Three learned
    matrices turn it into a **query** `q[t] = x[t] @ w_q` ("what am I looking for?"), a
    **key** `k[t] = x[t] @ w_k` ("what do I contain?") and a **value** `v[t] = x[t] @ w_v`
    ("what do I pass on?"). With several heads, each head has its own K = {q_BTHK.shape[-1]}
    channels of q, k and v, so training can teach each head to look for something different.
    Here the weights are random draws: the heads differ only by chance.
    """
            ),
            head,
            mo.hstack(
                [
                    heatmap(as_f32(x_BTD[0]), "x: token vectors", "position t", "channel d"),
                    heatmap(as_f32(q_BTHK[0, :, _h]), f"q, head {_h}", "position t", "channel k"),
                    heatmap(as_f32(k_BTHK[0, :, _h]), f"k, head {_h}", "position t", "channel k"),
                ],
                justify="start",
                wrap=True,
            ),
        ]
    )
    return (as_f32,)


@app.cell
def _(as_f32, config, head, k_BTHK, pieces, q_BTHK):
    _h = head.value
    _raw = np.einsum("tk,sk->ts", as_f32(q_BTHK[0, :, _h]), as_f32(k_BTHK[0, :, _h]))
    mo.vstack(
        [
            mo.md(
                f"""
    ## 2 · Scores: every query meets every key

    `score[t, s] = q[t] · k[s] / √K` is large when query `t` and key `s` point the same way.
    All T × T of them come from one batched matrix product,
    `jnp.einsum("bthk,bshk->bhts", q, k)`, accumulated in float32 even when q and k are
    bfloat16 (`preferred_element_type=jnp.float32`).

    **Why `/ √K`?** A dot product of K random terms has a spread that grows like √K. Here
    the raw products `q·k` have standard deviation **{_raw.std():.2f}**; divided by
    √{config.head_dim} = {np.sqrt(config.head_dim):.2f} they have
    **{_raw.std() / np.sqrt(config.head_dim):.2f}**.
    Without the division, wide heads would give huge scores, and softmax would put almost all
    weight on one key, with vanishing gradients for the rest.
    """
            ),
            heatmap(as_f32(pieces.scores_BHTS[0, _h]), f"scores, head {_h}: q·k/√K"),
        ]
    )
    return


@app.cell
def _(as_f32, config, head, pieces):
    _h = head.value
    allowed_TS = (
        np.asarray(attention.causal_mask_TS(config.seq_len))
        if config.causal
        else np.ones((config.seq_len,) * 2, bool)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## 3 · The causal mask: no peeking at the future

    A language model predicts token `t + 1` from tokens `0 .. t`. If position `t` could
    attend to later positions it would read the answer. The **causal mask** allows key `s`
    only when `s ≤ t`: the lower triangle. Masked scores are replaced by a huge negative
    number (`{attention.MASK_VALUE:.0e}`) so that softmax gives them a weight of **exactly** 0.

    Causal mask is **{"on" if config.causal else "off"}**: {int(allowed_TS.sum())} of
    {allowed_TS.size} (query, key) pairs are allowed.
    {"" if config.causal else "Switch it on to see the future disappear."}
    """
            ),
            heatmap(
                as_f32(pieces.scores_BHTS[0, _h]),
                f"masked scores, head {_h} (grey: masked)",
                hidden=~allowed_TS,
            ),
        ]
    )
    return (allowed_TS,)


@app.cell
def _(allowed_TS, head, pieces, row):
    _h, _t = head.value, row.value
    _scores = np.asarray(pieces.scores_BHTS[0, _h, _t], np.float64)
    _probs = np.asarray(pieces.probs_BHTS[0, _h, _t], np.float64)
    _allowed = allowed_TS[_t]
    _frame = pd.DataFrame(
        {
            "key s": np.arange(len(_scores)),
            "score": np.where(_allowed, _scores, np.nan),
            "probability": _probs,
            "key is": np.where(_allowed, "allowed", "masked"),
        }
    )
    _color = alt.Color(
        "key is:N", scale=alt.Scale(domain=["allowed", "masked"], range=["#4c78a8", "#bbbbbb"])
    )
    _ticks = alt.Axis(labelAngle=0, values=charts.tick_values(len(_scores)))  # <= 12 labels
    _keys = alt.X("key s:O", scale=alt.Scale(domain=list(range(len(_scores)))), axis=_ticks)
    _score_bars = (
        alt.Chart(_frame, title=f"row {_t}: scores (masked keys have none)")
        .mark_bar()
        .encode(
            x=_keys,
            y=alt.Y("score:Q"),
            color=_color,
            tooltip=["key s", alt.Tooltip("score:Q", format=".4f"), "key is"],
        )
    )
    _prob_bars = (
        alt.Chart(_frame, title=f"row {_t}: softmax probabilities")
        .mark_bar()
        .encode(
            x=_keys,
            y=alt.Y("probability:Q", scale=alt.Scale(domain=[0, 1])),
            color=_color,
            tooltip=["key s", alt.Tooltip("probability:Q", format=".4f"), "key is"],
        )
    )
    _top = int(np.argmax(_probs))
    mo.vstack(
        [
            mo.md(
                f"""
    ## 4 · Softmax, one row at a time

    Each query row becomes a probability distribution over keys:
    `p[t, s] = exp(score[t, s] − m) / Σ_s' exp(score[t, s'] − m)`, with `m` the row's
    largest score. Subtracting `m` changes nothing mathematically but keeps `exp` from
    overflowing; the softmax runs in float32 for every dtype.

    Row **{_t}**: {int(_allowed.sum())} allowed keys; the probabilities sum to
    **{_probs.sum():.6f}**; the masked keys get exactly
    **{_probs[~_allowed].sum() if (~_allowed).any() else 0.0:g}**;
    query {_t} attends most to key **{_top}** (p = {_probs[_top]:.3f}).
    """
            ),
            row,
            mo.hstack(
                [
                    _score_bars.properties(width=260, height=160),
                    _prob_bars.properties(width=260, height=160),
                ],
                justify="start",
            ),
        ]
    )
    return


@app.cell
def _(as_f32, config, head, pieces, v_BTHK):
    _h = head.value
    mo.vstack(
        [
            mo.md(
                """
    ## 5 · Probabilities mix the values

    The output at position `t` is the probability-weighted average of the values:
    `out[t] = Σ_s p[t, s] · v[s]`, again one batched product,
    `jnp.einsum("bhts,bshk->bthk", p, v)`. A row of `p` that is almost one-hot copies one
    value; a flat row averages many. With the mask on, `out[t]` is built only from
    `v[0 .. t]`.
    """
            ),
            mo.hstack(
                [
                    heatmap(
                        np.asarray(pieces.probs_BHTS[0, _h]),
                        f"probabilities p, head {_h}",
                        scheme="blues",
                    ),
                    heatmap(as_f32(v_BTHK[0, :, _h]), f"v, head {_h}", "position s", "channel k"),
                    heatmap(
                        as_f32(pieces.out_BTHK[0, :, _h]),
                        f"out = p @ v, head {_h}",
                        "position t",
                        "channel k",
                    ),
                ],
                justify="start",
                wrap=True,
            ),
            mo.md(
                "Every head does this in parallel with its own q, k, v. "
                f"The {config.num_heads} heads' outputs, side by side, make an output of width "
                f"H·K = {config.width} per position "
                "(a Transformer then mixes them with one more matrix, `w_o`)."
            ),
        ]
    )
    return


@app.cell
def _(config, pieces):
    _frames = [
        {"head": f"head {h}", "query t": t, "key s": s, "p": float(p)}
        for h in range(config.num_heads)
        for (t, s), p in np.ndenumerate(np.asarray(pieces.probs_BHTS[0, h]))
    ]
    _size = max(6, min(16, 140 // config.seq_len))
    mo.vstack(
        [
            mo.md(
                "### All heads at once: each head's pattern of where to look\n"
                "The weights are random, not trained: these patterns come from the draws of "
                "the seed (change it and they change). Training is what gives a head a purpose."
            ),
            alt.Chart(pd.DataFrame(_frames))
            .mark_rect()
            .encode(
                x=alt.X("key s:O", axis=None),
                y=alt.Y("query t:O", axis=None),
                color=alt.Color("p:Q", scale=alt.Scale(scheme="blues", domain=[0, 1]), title="p"),
                tooltip=["head", "query t", "key s", alt.Tooltip("p:Q", format=".3f")],
            )
            .properties(width=_size * config.seq_len, height=_size * config.seq_len)
            .facet(facet=alt.Facet("head:N", title=None), columns=4),
        ]
    )
    return


@app.cell
def _(config, k_BTHK, pickers_ok, pieces, q_BTHK, v_BTHK):
    assert pickers_ok  # used in the body, so marimo orders this after the pickers' guard
    lab.require("torch", why="the check's reference is torch's scaled_dot_product_attention")
    # Independent references on the same q, k, v: PyTorch in float64, and XLA's own
    # attention (jax.nn.dot_product_attention) in the lesson's dtype.
    check = lab.Check(
        f"attention in {config.dtype} ({'causal' if config.causal else 'no mask'}) "
        "vs torch sdpa and jax.nn.dot_product_attention",
        {
            "torch.nn.functional.scaled_dot_product_attention (float64)": numerics.scaled_max_error(
                pieces.out_BTHK,
                attention_torch.torch_reference(q_BTHK, k_BTHK, v_BTHK, config.causal),
            ),
            f"jax.nn.dot_product_attention ({config.dtype})": numerics.scaled_max_error(
                pieces.out_BTHK, attention.jax_nn_reference(q_BTHK, k_BTHK, v_BTHK, config.causal)
            ),
        },
        numerics.tolerance(config.dtype),
    )
    mo.vstack(
        [
            mo.md(
                "## 6 · Check: the pieces equal attention as others implement it\n"
                "Assembled, the pieces are "
                "`core.lm.attention.dot_product_attention(q, k, v, causal)`. "
                "Two implementations that share no code with it must agree, to within the "
                f"precision of `{config.dtype}` (relative error ≤ {check.tolerance:g})."
            ),
            check,
        ]
    )
    return (check,)


@app.cell
def _(config, pickers_ok, projections, x_BTD):
    assert pickers_ok  # after the pickers' guard, like the check

    # d out[t] / d x[s] for every pair: Jacobian of the whole layer (x -> q, k, v -> out).
    def _layer(x_TD):
        return attention.self_attention_BTHK(projections, x_TD[None], causal=config.causal)[0]

    gradient_norms_TS = attention.norms_of_jacobian_TS(
        jax.jit(attention.jacobian, static_argnums=0)(_layer, x_BTD[0])
    )
    later_TS = np.triu(np.ones(gradient_norms_TS.shape, bool), k=1)
    later_max = float(gradient_norms_TS[later_TS].max()) if later_TS.any() else 0.0
    later_min = float(gradient_norms_TS[later_TS].min()) if later_TS.any() else 0.0
    later_zeros = int(np.sum(gradient_norms_TS[later_TS] == 0.0))
    return gradient_norms_TS, later_max, later_min, later_zeros


@app.cell
def _(config, gradient_norms_TS, later_max, later_min, later_zeros):
    _zeros = gradient_norms_TS == 0.0
    _smallest = "" if config.causal else f" (smallest: {later_min:.3g})"
    # Exact claims, so the bound is 0: causal, no gradient from a later input may be nonzero;
    # without the mask, no later input may have a gradient of exactly 0.
    if config.causal:
        causality = lab.Check(
            "every d out[t] / d x[s] with s > t is exactly 0 (causal)",
            {"largest ‖d out[t] / d x[s]‖ with s > t": later_max},
            0.0,
        )
    else:
        causality = lab.Check(
            "without the mask, every output depends on every later input",
            {"pairs s > t with d out[t] / d x[s] exactly 0": float(later_zeros)},
            0.0,
        )
    mo.vstack(
        [
            mo.md(
                f"""
    ## 7 · Causality, proved with gradients

    A picture of the mask shows what we *meant*; gradients show what the code *does*. The
    Jacobian `d out[t] / d x[s]` (one backward pass per output number, through projections,
    scores, mask, softmax and values) measures how much output `t` moves when input `s` moves.
    For a causal layer every entry with `s > t` must be **exactly zero**, not merely small: a
    masked key gets probability exactly 0, so no derivative flows through it.

    Largest norm above the diagonal: **{later_max:g}**{_smallest}.
    """
            ),
            causality,
            heatmap(
                gradient_norms_TS,
                "‖d out[t] / d x[s]‖ (grey: exactly 0)",
                "output t",
                "input s",
                scheme="greens",
                hidden=_zeros,
            ),
        ]
    )
    return (causality,)


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## Try this

    - Switch **causal** off: the grey triangle disappears from the scores, the gradient
      picture fills in, and every row's probabilities spread over all keys.
    - Raise **head dim K** to 16 and watch the std of the raw products grow while the scaled
      scores stay near 1.
    - Pick **bfloat16**: the outputs now carry 8 significant bits, about 2.4 decimal digits
      (8 · log₁₀ 2), and the check's
      tolerance widens from 1e-5 to 2e-2, but masked probabilities are still exactly 0 and
      the causality proof still holds exactly.
    - Move the **query row** to 0: with the mask on, the first token can only attend to itself
      (probability exactly 1).

    Next lesson: pack several documents into one row and extend the mask so that they cannot
    see each other.
    """)
    return


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("attention", ARGS)
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("attention")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_causality_by_gradient(causality, config, later_max):
    causality.assert_passed()
    assert later_max == 0.0 or not config.causal
    return


@app.cell
def test_probabilities_are_distributions(allowed_TS, pieces):
    probs = np.asarray(pieces.probs_BHTS)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    assert np.all(probs[..., ~allowed_TS] == 0.0)
    return


if __name__ == "__main__":
    app.run()
