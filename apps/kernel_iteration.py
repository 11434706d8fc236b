import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Iterate with correctness and performance evidence")

with app.setup:
    import inspect

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.kernels import flash_attention, matmul
    from core.lab import charts, claims, text
    from core.lessons.pallas import kernel_iteration
    from core.tpu import topology_compile

    FLAGS = lab.Flags(
        lab.Flag("t", 256, "sequence length T", lo=16, hi=1024, step=16),
        lab.Flag("d", 64, "head dimension D", lo=8, hi=256, step=8),
        lab.Flag("heads", 1, "attention heads (batch 1)", lo=1, hi=4),
        lab.Flag("block_q", 64, "block size bq along T for q and O", lo=8, hi=512, step=8),
        lab.Flag("block_k", 64, "block size bk along T for k and v", lo=8, hi=512, step=8),
        lab.Flag("causal", True, "causal mask (query i sees keys 0..i)"),
        lab.Flag("dtype", "float32", "element type of q, k, v", choices=kernel_iteration.DTYPES),
        lab.Flag(
            "backward",
            "kernel",
            "backward pass: the Pallas kernels or the reference's VJP",
            choices=flash_attention.BACKWARDS,
        ),
        lab.Flag(
            "long_t",
            4096,
            "T of the TPU compile (kernel vs XLA attention memory)",
            choices=kernel_iteration.LONG_TS,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Flash attention in Pallas: online softmax, causal blocks, custom_vjp.",
    )
    ARGS = FLAGS.parse()
    ON_TPU = jax.default_backend() == "tpu"
    RUNS_ON = "compiled by Mosaic on this TPU" if ON_TPU else "in TPU interpret mode on this CPU"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Iterate with correctness and performance evidence
    {lab.phase_line("kernel_iteration")}

    Attention's score matrix is T x T: XLA's attention writes it to HBM, so memory grows as
    T². **Flash attention** never forms it: each program takes a block of queries, walks the
    key blocks, and keeps a running max `m`, a running sum `l` and an accumulator in VMEM (the
    **online softmax**: when a new block raises the max, what was summed is rescaled by
    `exp(m_old - m_new)`). It saves only `L = m + log l` per row, and the backward pass
    recomputes the probabilities from it. A kernel like this is changed many times; each
    change needs evidence. In this lesson you will

    - run the forward kernel and its backward (a `jax.custom_vjp`: Pallas kernels or the
      reference's VJP) and check O, L, dQ, dK, dV against NumPy float64;
    - see which blocks a causal kernel runs, masks or skips;
    - read the performance evidence that a CPU can give: FLOPs, bytes and VMEM per block
      size (a roofline model), and the TPU compiler's memory for the kernel vs XLA;
    - see how the property tests (hypothesis) search shapes, blocks, dtypes and masks.
    """)
    return


@app.cell
def _():
    mo.vstack(
        [
            mo.md('The forward kernel: grid `(N, T/bq, T/bk)`, the k axis last and `"arbitrary"`:'),
            text.code_block(
                inspect.getsource(flash_attention._forward_kernel), "python", "forward kernel"
            ),
        ]
    )
    return


@app.cell
def _():
    t = FLAGS.control("t", ARGS, label="T")
    d = FLAGS.control("d", ARGS, label="D")
    heads = FLAGS.control("heads", ARGS)
    block_q = FLAGS.control("block_q", ARGS, label="bq")
    block_k = FLAGS.control("block_k", ARGS, label="bk")
    causal = FLAGS.control("causal", ARGS)
    dtype = FLAGS.control("dtype", ARGS)
    backward = FLAGS.control("backward", ARGS)
    long_t = FLAGS.control("long_t", ARGS, label="T of the TPU compile")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([t, d, heads], justify="start"),
            mo.hstack([block_q, block_k, causal], justify="start"),
            mo.hstack([dtype, backward, long_t, seed], justify="start"),
        ]
    )
    return backward, block_k, block_q, causal, d, dtype, heads, long_t, seed, t


@app.cell
def _(block_k, block_q, d, dtype, heads, t):
    _sizes = lab.table(
        [
            {
                "array": "q, O",
                "shape": str((1, heads.value, t.value, d.value)),
                "block": str((block_q.value, d.value)),
            },
            {
                "array": "k, v",
                "shape": str((1, heads.value, t.value, d.value)),
                "block": str((block_k.value, d.value)),
            },
        ],
        caption=f"grid (heads, T/bq, T/bk) = ({heads.value}, {t.value / block_q.value:g}, "
        f"{t.value / block_k.value:g})",
    )
    lab.guard(
        kernel_iteration.problem(
            t.value,
            d.value,
            block_q.value,
            block_k.value,
            dtype.value,
            heads.value,
        ),
        _sizes,
        headline="This kernel cannot run with these controls.",
    )
    # defined after the guard: every cell below that uses them stops with it
    shape = (1, heads.value, t.value, d.value)
    blocks = (block_q.value, block_k.value)
    _sizes
    return blocks, shape


@app.cell
def _(blocks, causal, dtype, shape):
    status = kernel_iteration.block_status(shape[2], *blocks, causal.value)
    _cost = kernel_iteration.forward_cost(
        shape[1], shape[2], shape[3], *blocks, dtype.value, causal.value
    )
    _chart = (
        alt.Chart(pd.DataFrame(status), title="forward kernel: (q block, k block) per head")
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("k block:O"),
            y=alt.Y("q block:O"),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(
                    domain=["computed", "computed, masked", "skipped"],
                    range=[charts.PALETTE[0], charts.PALETTE[1], "#dddddd"],
                ),
                legend=alt.Legend(orient="bottom", title=None),
            ),
            tooltip=["q block", "k block", "status"],
        )
        .properties(width=260, height=260)
    )
    mo.vstack(
        [
            mo.md(
                "### Which blocks run\nCausal: a k block wholly above the diagonal is skipped "
                "(`pl.when`), and its index map is clamped to the last block the q block needs, "
                "so the pipeline fetches nothing new; the diagonal blocks run with a mask."
            ),
            _chart,
            lab.table([_cost], caption="this forward, all heads (a model of the work)"),
        ]
    )
    return (status,)


@app.cell
def _(backward, blocks, causal, dtype, seed, shape):
    _keys = jax.random.split(jax.random.key(seed.value), 4)
    q, k, v, do = (jax.random.normal(_key, shape, dtype.value) for _key in _keys)
    o, lse, grads = flash_attention.forward_and_grads(
        q, k, v, do, causal.value, *blocks, backward.value
    )
    ref_o, ref_grads = flash_attention.reference_and_grads(q, k, v, do, causal.value)
    races = None if ON_TPU else matmul.races_found()
    mo.md(
        f"Ran the forward and the {backward.value} backward on q, k, v, dO {shape} "
        f"({dtype.value}), {RUNS_ON}."
    )
    return do, grads, k, lse, o, q, races, ref_grads, ref_o, v


@app.cell
def _(backward, blocks, causal, do, dtype, grads, k, lse, o, q, races, ref_grads, ref_o, v):
    # Independent references: NumPy float64 softmax(Q K^T / sqrt(D) + mask) V and the float64
    # closed form of its gradient, on the same inputs (widened from their dtype).
    np_o, np_lse = flash_attention.attention_numpy(q, k, v, causal.value)
    np_grads = flash_attention.attention_grad_numpy(q, k, v, do, causal.value)
    _tol = numerics.tolerance(dtype.value)
    _errors = {
        "O vs float64": numerics.scaled_max_error(o, np_o),
        "L vs float64": numerics.scaled_max_error(lse, np_lse),
        "O vs mha_reference (jnp)": numerics.scaled_max_error(o, ref_o),
    }
    _tolerances = {
        "O vs float64": _tol,
        "L vs float64": numerics.tolerance("float32"),  # L is f32 in every dtype
        "O vs mha_reference (jnp)": kernel_iteration.PAIR_FACTOR * _tol,
    }
    for _name, _g, _ref, _np in zip(("dQ", "dK", "dV"), grads, ref_grads, np_grads, strict=True):
        _errors[f"{_name} vs float64 closed form"] = numerics.scaled_max_error(_g, _np)
        _tolerances[f"{_name} vs float64 closed form"] = _tol
        _errors[f"{_name} vs jax.grad(mha_reference)"] = numerics.scaled_max_error(_g, _ref)
        _tolerances[f"{_name} vs jax.grad(mha_reference)"] = kernel_iteration.PAIR_FACTOR * _tol
    _facts = {
        "shapes and dtypes match": o.shape == np_o.shape and all(g.dtype == q.dtype for g in grads),
        "L is finite in every row": bool(jax.numpy.isfinite(lse).all()),
    }
    if causal.value:
        _facts["causal row 0 attends only to key 0 (O[0] = V[0])"] = (
            numerics.scaled_max_error(o[:, :, 0], v[:, :, 0]) <= _tol
        )
    if races is not None:
        _facts["no data race found (interpret mode's detector)"] = not races
    check = lab.Check(
        f"flash attention ({dtype.value}, blocks {blocks}, causal {causal.value}, "
        f"{backward.value} backward, {RUNS_ON}) equals NumPy float64 attention and its gradient",
        _errors,
        _tolerances,
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(causal, dtype, shape):
    cost_rows = kernel_iteration.block_size_rows(
        shape[1], shape[2], shape[3], dtype.value, causal.value
    )
    _ridge = kernel_iteration.ridge_point()
    _frame = pd.DataFrame(cost_rows)
    _line = (
        alt.Chart(_frame)
        .mark_line(point=True, color=charts.PALETTE[0])
        .encode(
            x=alt.X("block (bq = bk):Q", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("intensity (FLOP/byte):Q", scale=alt.Scale(type="log")),
            tooltip=list(_frame.columns),
        )
    )
    _rule = (
        alt.Chart(pd.DataFrame([{"ridge": _ridge}]))
        .mark_rule(strokeDash=[4, 4], color=charts.PALETTE[1])
        .encode(y="ridge:Q")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Performance evidence
    Interpret mode runs the kernel's semantics on the CPU, one program at a time, through
    Python callbacks: its wall time says nothing about a TPU, so none is shown. What this host
    can give: the work per block size (bq = bk, same T, D, heads), and the v5e roofline bound
    from jax's peak figures. Bigger blocks re-read k and v fewer times (T/bq times each), so
    the intensity rises towards v5e's ridge ({_ridge:.0f} FLOP/byte, dashed), at the cost of
    VMEM; a causal kernel with big blocks also computes more masked work on the diagonal.
    """
            ),
            lab.table(cost_rows, caption="forward kernel per block size: a model, not a timing"),
            (_line + _rule).properties(
                width=420, height=220, title="arithmetic intensity per block size (model)"
            ),
        ]
    )
    return (cost_rows,)


@app.cell(hide_code=True)
def _():
    from core.perf import records as _records

    # The chip's curve comes from the kept record (tpu_scripts/flash_vs_jax.py on one v5e),
    # never from this machine: interpret mode's wall time says nothing about a TPU.
    _t = 8192
    _rows = kernel_iteration.tpu_block_curve(_records.latest("flash_vs_jax").figures, _t)
    _frame = pd.DataFrame(_rows)
    _measured = (
        alt.Chart(_frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("block (bq = bk):Q", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("measured on v5e (us):Q", scale=alt.Scale(type="log"),
                    title="forward time (us)"),
            color=alt.Color("kernel:N", scale=alt.Scale(range=list(charts.PALETTE))),
            tooltip=list(_frame.columns),
        )
    )  # fmt: skip
    _bound = (
        alt.Chart(_frame[_frame["kernel"] == "this kernel"])
        .mark_line(strokeDash=[4, 4], color="black")
        .encode(x="block (bq = bk):Q", y="v5e roofline (us):Q")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ### Measured on TPU v5e: the same question on the chip
    The chip's answer to "which block size" for causal attention at T = {_t} (H = 8, D = 128,
    bfloat16, B = 1), this kernel beside JAX's own Pallas kernels, each block size timed
    (median of 20 calls), and the cost model above as a roofline bound for that shape
    (dashed). The model's lesson holds on the chip: bigger blocks are faster, and the gain
    flattens as the bound stops falling; what the model does not see is the rest of the gap
    (the measured time stays well above the bound). Record: {_records.cite("flash_vs_jax")}.
    """
            ),
            (_measured + _bound).properties(
                width=420, height=220, title=f"forward time per block size, T = {_t} (v5e)"
            ),
            lab.table(_rows, caption="measured on one TPU v5e chip vs the roofline model"),
        ]
    )
    return


@app.cell
def _():
    compile_button = mo.ui.run_button(label="Compile for v5e:2x2")
    mo.vstack(
        [
            mo.md(
                f"""
    ### Memory on a TPU, from the compiler
    With the `tpu` extra (libtpu), the forward compiles for {kernel_iteration.TOPOLOGY} on this
    host: the kernel through Mosaic (a `{matmul.TPU_CUSTOM_CALL}` in the HLO), the jnp
    reference through XLA, both at the longer T. `memory_analysis()` gives one chip's bytes.
    Nothing runs: evidence about memory, not speed.
    """
            ),
            compile_button,
        ]
    )
    return (compile_button,)


@app.cell
def _(blocks, causal, compile_button, dtype, long_t, shape):
    mo.stop(
        lab.interactive() and not compile_button.value,
        mo.callout(mo.md("Press **Compile** (a few seconds)."), kind="info"),
    )
    # Checked here, not with the kernel's controls above: the longer T is this compile's
    # alone, so moving it runs nothing of the kernel's again.
    lab.guard(
        kernel_iteration.long_t_problem(*blocks, int(long_t.value)),
        headline="The TPU compile cannot use these blocks.",
    )
    libtpu_problem = topology_compile.libtpu_problem()
    compiled_rows = (
        None
        if libtpu_problem
        else kernel_iteration.compile_rows(
            shape[1], (int(long_t.value),), shape[3], *blocks, dtype.value, causal.value
        )
    )
    if compiled_rows:
        _peak = {row["program"]: row["peak (MiB)"] for row in compiled_rows}
        _ratio = _peak["XLA attention"] / _peak["flash kernel"]
        lab.report("XLA attention peak / flash kernel peak", _ratio, "x")
    (
        mo.callout(mo.md(f"Cannot compile for TPU here: {libtpu_problem}."), kind="info")
        if libtpu_problem
        else lab.table(
            compiled_rows,
            caption=f"Compiled on this host for {kernel_iteration.TOPOLOGY} (one chip); the model "
            "column counts q, k, v, O (and the T x T f32 scores for XLA)",
        )
    )
    return compiled_rows, libtpu_problem


@app.cell
def _(causal, compile_button, dtype, libtpu_problem, long_t, shape):
    # The block sweep of the same compile: one chip's compile-time memory per block size,
    # when the button is pressed (headless stays cheap: the lesson test runs the sweep).
    _sweep = kernel_iteration.BLOCK_SWEEP if compile_button.value else ()
    block_memory_rows = (
        []
        if libtpu_problem
        else kernel_iteration.block_compile_rows(
            shape[1], int(long_t.value), shape[3], dtype.value, causal.value, _sweep
        )
    )
    _itemsize = jax.numpy.dtype(dtype.value).itemsize
    _qkv_mib = 3 * shape[1] * int(long_t.value) * shape[3] * _itemsize / 2**20
    for _row in block_memory_rows:  # the compiler's argument bytes are q, k, v (closed form)
        assert _row["HBM arguments (MiB), compiled"] == _qkv_mib, _row
    (
        lab.table(
            block_memory_rows,
            caption=f"Compile-time memory per block size for {kernel_iteration.TOPOLOGY} (one "
            "chip; the TPU compiler's HBM figures; VMEM from the block specs, a model: "
            "memory_analysis has no VMEM figure for a Mosaic kernel). Nothing ran on a TPU.",
        )
        if block_memory_rows
        else mo.md(
            f"Press **Compile** to compile the kernel at blocks {kernel_iteration.BLOCK_SWEEP}."
        )
    )
    return (block_memory_rows,)


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## Evidence that keeps up with the changes
    One checked configuration proves little about the next block size. The kernel's tests
    (`core/kernels/flash_attention_test.py`) state a **property**: for every shape, block
    size, dtype and causal flag that the tiling rule allows, O, L, dQ, dK and dV match the
    jnp reference, jax.grad of it and the NumPy float64 closed forms within the dtype's
    tolerance. **hypothesis** draws the cases: a small, derandomized profile in `make test`
    (the same cases every run), a large one in
    `python benchmarks/flash_attention_properties.py` (300 cases, a table of errors). Breadth
    runs in jax's plain HLO interpreter (half the cost per case); fixed cases run in TPU
    interpret mode, where races and uninitialized memory show. Every case hypothesis ever
    finds failing is kept as an explicit example (`REGRESSION_CASES`), so a fixed bug stays
    fixed while the kernel keeps changing.
    """)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("kernel_iteration")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_blocks_run_or_skipped(blocks, causal, cost_rows, shape, status):
    skipped = [row for row in status if row["status"] == "skipped"]
    # q block 0 needs keys 0..bq-1: a later k block starts past them iff bq + bk <= T
    assert bool(skipped) == (causal.value and sum(blocks) <= shape[2])
    assert all(row["q block"] < row["k block"] for row in skipped)  # only above the diagonal
    intensities = [row["intensity (FLOP/byte)"] for row in cost_rows]
    assert intensities == sorted(intensities)  # bigger blocks re-read k and v less
    return


@app.cell
def test_kernel_memory_below_xla(
    backward, block_k, block_q, causal, compiled_rows, d, dtype, heads, long_t, seed, t
):
    if compiled_rows is not None:  # None: libtpu missing, said so above
        kernel, xla = compiled_rows
        assert kernel["Mosaic kernel in HLO"] == "yes"
        # XLA's attention holds the T x T f32 scores at its peak, whatever the controls
        assert xla["peak (MiB)"] >= heads.value * xla["T"] ** 2 * 4 / 2**20
        _controls = dict(
            backward=backward, block_k=block_k, block_q=block_q, causal=causal, d=d,
            dtype=dtype, heads=heads, long_t=long_t, seed=seed, t=t,
        )  # fmt: skip
        if claims.at_defaults(FLAGS, {_n: _c.value for _n, _c in _controls.items()}):
            # the lesson's claim at its defaults (T = 4096 >> D = 64): far below XLA
            assert 2 * kernel["peak (MiB)"] < xla["peak (MiB)"]
    return


if __name__ == "__main__":
    app.run()
