import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="A first TPU kernel")

with app.setup:
    import inspect

    import jax
    import marimo as mo

    from core import lab, numerics
    from core.lab import exercises, text
    from core.kernels import matmul, tiling
    from core.lessons.pallas import first_tpu_kernel
    from core.tpu import topology_compile

    FLAGS = lab.Flags(
        lab.Flag("m", 256, "rows M of x and of the output", lo=8, hi=1024, step=8),
        lab.Flag("k", 256, "contracting size K", lo=128, hi=1024, step=128),
        lab.Flag("n", 256, "columns N of the output", lo=128, hi=1024, step=128),
        lab.Flag("bm", 128, "block rows bm", lo=8, hi=1024, step=8),
        lab.Flag("bk", 128, "block size bk along K", lo=8, hi=1024, step=8),
        lab.Flag("bn", 128, "block columns bn", lo=8, hi=1024, step=8),
        lab.Flag(
            "dtype",
            "float32",
            "element type of x, y and the output",
            choices=("float32", "bfloat16"),
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="A first TPU kernel: VMEM accumulator, pl.when init/finalize, Mosaic compiles.",
    )
    ARGS = FLAGS.parse()
    ON_TPU = jax.default_backend() == "tpu"
    RUNS_ON = "compiled by Mosaic on this TPU" if ON_TPU else "in TPU interpret mode on this CPU"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # A first TPU kernel
    {lab.phase_line("first_tpu_kernel")}

    The matmul of the previous lesson read whole row and column strips. A real TPU kernel
    also blocks the **contracting** axis K: the grid gets a third axis `k`, and each output
    block is the sum of K/bk block products. The partial sum lives in an **f32 accumulator in
    VMEM scratch** (the TPU core's fast on-chip memory), zeroed when `k == 0` and written to
    the output at the last `k` (`pl.when`). The grid axes get **dimension semantics**: `i`
    and `j` are `"parallel"` (independent: the compiler may split them across cores), `k` is
    `"arbitrary"` (a reduction: its steps must run in order on one core). In this lesson you will

    - read the kernel and walk its grid step by step;
    - run it in TPU interpret mode with race detection and uninitialized memory poisoned to
      NaN, check it against NumPy float64, and watch the poison catch a missing init;
    - compile the same kernel through Mosaic, the TPU kernel compiler, for v5e, v6e and TPU7x
      on this host: it is a real TPU kernel.
    """)
    return


@app.cell
def _():
    text.code_block(
        inspect.getsource(matmul._matmul_kernel)
        + f"\nDIMENSION_SEMANTICS = {matmul.DIMENSION_SEMANTICS}\n"
        + inspect.getsource(matmul.matmul_call),
        "python",
        "the kernel and its call",
    )
    return


@app.cell
def _():
    m = FLAGS.control("m", ARGS, label="M")
    k = FLAGS.control("k", ARGS, label="K")
    n = FLAGS.control("n", ARGS, label="N")
    bm = FLAGS.control("bm", ARGS, label="bm")
    bk = FLAGS.control("bk", ARGS, label="bk")
    bn = FLAGS.control("bn", ARGS, label="bn")
    dtype = FLAGS.control("dtype", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([m, k, n], justify="start"),
            mo.hstack([bm, bk, bn], justify="start"),
            mo.hstack([dtype, seed], justify="start"),
        ]
    )
    return bk, bm, bn, dtype, k, m, n, seed


@app.cell
def _(bk, bm, bn, dtype, k, m, n):
    _grid = tiling.grid_of((m.value, n.value, k.value), (bm.value, bn.value, bk.value))
    _sizes = lab.table(
        [
            {"operand": "x", "array": str((m.value, k.value)), "block": str((bm.value, bk.value))},
            {"operand": "y", "array": str((k.value, n.value)), "block": str((bk.value, bn.value))},
            {
                "operand": "out",
                "array": str((m.value, n.value)),
                "block": str((bm.value, bn.value)),
            },
        ],
        caption=f"grid (M/bm, N/bn, K/bk) = {_grid}",
    )
    lab.guard(
        first_tpu_kernel.problem(
            m.value, k.value, n.value, bm.value, bk.value, bn.value, dtype.value
        ),
        _sizes,
        headline="This kernel cannot run on a TPU with these blocks.",
    )
    # defined after the guard: every cell below that uses them stops with it
    shape = (m.value, k.value, n.value)
    blocks = (bm.value, bk.value, bn.value)
    _vmem = first_tpu_kernel.vmem_bytes(*blocks, dtype.value)
    mo.vstack(
        [
            _sizes,
            mo.md(
                "### The grid walk\nThe first steps, in the order a TPU core runs them (k fastest):"
            ),
            lab.table(first_tpu_kernel.schedule(*shape, *blocks)[: first_tpu_kernel.SCHEDULE_ROWS]),
            lab.table(
                [{"VMEM held": name, "KiB": b / 2**10} for name, b in _vmem.items()],
                caption="What the kernel keeps in VMEM: two buffers per block (the pipeline "
                "fetches the next block while the body works on this one) and the scratch",
            ),
        ]
    )
    return blocks, shape


@app.cell
def _(blocks, dtype, seed, shape):
    _kx, _ky = jax.random.split(jax.random.key(seed.value))
    x = jax.random.normal(_kx, (shape[0], shape[1]), dtype.value)
    y = jax.random.normal(_ky, (shape[1], shape[2]), dtype.value)
    result = matmul.matmul(x, y, *blocks)
    races = None if ON_TPU else matmul.races_found()
    return races, result, x, y


@app.cell
def _(blocks, dtype, races, result, x, y):
    # Independent reference: NumPy float64 x @ y of the same inputs (widened from their dtype).
    reference = matmul.matmul_reference(x, y)
    _facts = {"shapes match": tuple(result.shape) == reference.shape}
    if races is not None:
        _facts["no data race found (interpret mode's detector)"] = not races
    check = lab.Check(
        f"TPU-style Pallas matmul ({dtype.value}, blocks {blocks}, {RUNS_ON}) equals NumPy "
        f"float64 x @ y, shape {reference.shape}",
        numerics.scaled_max_error(result, reference),
        numerics.tolerance(dtype.value),
        facts=_facts,
    )
    check
    return check, reference


@app.cell
def _(blocks, reference, x, y):
    missing_init = first_tpu_kernel.missing_init_rows(x, y, blocks, reference)
    mo.vstack(
        [
            mo.md(
                """
    ### A missing init, caught
    Remove the `pl.when(k == 0)` zeroing and the accumulator starts with whatever VMEM held:
    on a TPU, what the previous kernel left there, so the output can look plausible and be
    wrong. TPU interpret mode (used for this demo even on a TPU) fills uninitialized memory
    with NaN (`uninitialized_memory="nan"`), and the NaN reaches every output element:
    """
            ),
            lab.table(missing_init),
        ]
    )
    return (missing_init,)


@app.cell
def _():
    compile_button = mo.ui.run_button(label="Compile for v5e, v6e and TPU7x")
    mo.vstack(
        [
            mo.md(
                """
    ## A real TPU kernel
    With the `tpu` extra (libtpu), JAX compiles for TPU topologies on this host: the kernel
    goes through Mosaic and becomes a `tpu_custom_call` in the compiled program; the TPU
    compiler's `memory_analysis()` gives the bytes per chip (x, y replicated: each chip
    computes the whole product). Nothing runs: this is evidence about compilation and memory,
    not about speed.
    """
            ),
            compile_button,
        ]
    )
    return (compile_button,)


@app.cell
def _(blocks, compile_button, dtype, shape):
    mo.stop(
        lab.interactive() and not compile_button.value,
        mo.callout(mo.md("Press **Compile** (about a second per generation)."), kind="info"),
    )
    libtpu_problem = topology_compile.libtpu_problem()
    compiled_rows = (
        None if libtpu_problem else first_tpu_kernel.compile_rows(*shape, *blocks, dtype.value)
    )
    (
        mo.callout(mo.md(f"Cannot compile for TPU here: {libtpu_problem}."), kind="info")
        if libtpu_problem
        else lab.table(compiled_rows, caption="Compiled on this CPU host for TPU topologies")
    )
    return (compiled_rows,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "first_tpu_kernel", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("first_tpu_kernel")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_missing_init_is_all_nan(missing_init):
    assert [row["NaN elements"] for row in missing_init] == ["0%", "100%"]
    return


@app.cell
def test_every_generation_compiles(compiled_rows):
    if compiled_rows is not None:  # None: libtpu missing, said so above
        assert [row["compiled"] for row in compiled_rows] == ["yes"] * 3
        assert all(row[f"{matmul.TPU_CUSTOM_CALL} in HLO"] == "yes" for row in compiled_rows)
    return


if __name__ == "__main__":
    app.run()
