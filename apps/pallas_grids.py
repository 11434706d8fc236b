import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Pallas grids and BlockSpecs")

with app.setup:
    import jax
    import marimo as mo
    import numpy as np

    from core import lab, numerics
    from core.kernels import tiling
    from core.lab import exercises
    from core.lessons.pallas import pallas_grids

    FLAGS = lab.Flags(
        lab.Flag("kernel", "matmul", "the kernel", choices=pallas_grids.KERNELS),
        lab.Flag("m", 256, "rows M of x and of the output", lo=8, hi=1024, step=8),
        lab.Flag("k", 256, "contracting size K (matmul)", lo=128, hi=1024, step=128),
        lab.Flag("n", 256, "columns N of the output", lo=128, hi=1024, step=128),
        lab.Flag("bm", 128, "block rows bm", lo=8, hi=1024, step=8),
        lab.Flag("bn", 128, "block columns bn", lo=8, hi=1024, step=8),
        lab.Flag("dtype", "float32", "element type", choices=pallas_grids.DTYPES),
        lab.Flag("program", 1, "the program instance to highlight (row-major)", lo=0, hi=63),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        lab.Flag(
            "ragged_rows",
            200,
            "rows of the padding demo's array (256 columns)",
            lo=8,
            hi=512,
            step=8,
        ),
        lab.Flag(
            "ragged_block_rows",
            128,
            "block rows of the padding demo (need not divide its rows)",
            lo=8,
            hi=512,
            step=8,
        ),
        description="Pallas grids and BlockSpecs: which block every program instance touches.",
    )
    ARGS = FLAGS.parse()
    RUNS_ON = (
        "compiled by Mosaic on this TPU"
        if jax.default_backend() == "tpu"
        else ("in TPU interpret mode on this CPU")
    )
    RAGGED_RUNS_ON = (
        "compiled by Mosaic on this TPU"
        if jax.default_backend() == "tpu"
        else "in Pallas's interpret mode on this CPU"
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Pallas grids and BlockSpecs
    {lab.phase_line("pallas_grids")}

    A Pallas kernel is a function of **blocks**. `pl.pallas_call` runs it once per point of a
    **grid**; each run is a *program instance* with ids `pl.program_id(0), pl.program_id(1)`.
    A `BlockSpec(block_shape, index_map)` per operand says which block that instance sees:
    `index_map(i, j)` returns the block's index, and Pallas copies that block into fast memory
    (VMEM on a TPU) before the kernel body runs. In this lesson you will

    - choose an array shape, a block shape and see the grid it gives;
    - see which block of every input each program instance reads and which output block it
      writes, for a vector add and for a matmul by row and column strips;
    - check the kernel against NumPy float64, and see the block shapes a TPU refuses and why;
    - see what Pallas does with a block that does not divide the array: it pads the last block
      on input and drops the excess on output.
    """)
    return


@app.cell
def _():
    kernel = FLAGS.control("kernel", ARGS)
    m = FLAGS.control("m", ARGS, label="M")
    k = FLAGS.control("k", ARGS, label="K (matmul)")
    n = FLAGS.control("n", ARGS, label="N")
    bm = FLAGS.control("bm", ARGS, label="block rows bm")
    bn = FLAGS.control("bn", ARGS, label="block cols bn")
    dtype = FLAGS.control("dtype", ARGS)
    program = FLAGS.control("program", ARGS, label="highlight program")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([kernel, dtype, seed], justify="start"),
            mo.hstack([m, k, n], justify="start"),
            mo.hstack([bm, bn, program], justify="start"),
        ]
    )
    return bm, bn, dtype, k, kernel, m, n, program, seed


@app.cell
def _(bm, bn, dtype, k, kernel, m, n, program):
    _ops = pallas_grids.operands(kernel.value, m.value, k.value, n.value, bm.value, bn.value)
    _shape_rows = [
        {
            "operand": op.name,
            "array": str(op.shape),
            "block": str(op.block),
            "index_map(i, j)": op.index_map,
            "blocks": str(op.grid),
        }
        for op in _ops
    ]
    lab.guard(
        pallas_grids.problem(
            kernel.value, m.value, k.value, n.value, bm.value, bn.value, dtype.value, program.value
        ),
        lab.table(_shape_rows),
        headline="This pallas_call cannot run on a TPU.",
    )
    # names defined after the guard: a stopped guard stops every cell that uses them
    ops = _ops
    blocks = (bm.value, bn.value)
    grid = tiling.grid_of((m.value, n.value), (bm.value, bn.value))
    ids = pallas_grids.program_ids(m.value, n.value, bm.value, bn.value)
    chosen = ids[program.value]
    mo.vstack(
        [
            lab.table(_shape_rows),
            mo.md(
                f"""
    ```python
    pl.pallas_call(kernel, grid={grid}, in_specs=[{
                    ", ".join(
                        f"pl.BlockSpec({op.block}, lambda i, j: {op.index_map})" for op in ops[:2]
                    )
                }], out_specs=pl.BlockSpec({ops[2].block}, lambda i, j: {ops[2].index_map}), ...)
    ```
    The grid is {grid}: {len(ids)} program instances, run one after another in row-major
    order (on a TPU core they are a loop; the last grid axis is the fastest). Pallas's TPU
    rule: a block's last two dims must be divisible by {tiling.BLOCK_RULE[0]} and
    {tiling.BLOCK_RULE[1]} (for every dtype) or equal the array's: try bn = 64. A block need
    not divide the array: Pallas pads the last block with unspecified values and drops the
    excess from the output (the last section shows it). This lesson's kernels ask for whole
    blocks all the same (try bm = 96): the padding is garbage, harmless in rows that are
    dropped but wrong wherever it is summed, as in a matmul's K blocks. For {
                    dtype.value
                }, blocks in multiples of
    {tiling.native_tile(dtype.value)[0]} x {tiling.native_tile(dtype.value)[1]} match the
    vector register's layout (16-bit types pack two rows per sublane): faster, not required.
    """
            ),
        ]
    )
    return blocks, chosen, ids, ops


@app.cell
def _(chosen, ops):
    mo.vstack(
        [
            mo.md(
                f"### What program {chosen} touches\n"
                "Orange: the block Pallas hands to this program instance. Move *highlight "
                "program* to walk the grid."
            ),
            mo.hstack(
                [pallas_grids.block_picture(op, *chosen) for op in ops], justify="start", wrap=True
            ),
        ]
    )
    return


@app.cell
def _(ids, ops):
    lab.table(
        pallas_grids.access_rows(ops, ids),
        caption="Every program instance: the block of each operand it reads or writes",
    )
    return


@app.cell
def _(blocks, dtype, k, kernel, m, n, seed):
    x, y = pallas_grids.example_data(
        jax.random.key(seed.value), kernel.value, m.value, k.value, n.value, dtype.value
    )
    result = pallas_grids.run(kernel.value, x, y, *blocks)
    mo.md(f"Ran the {kernel.value} kernel {RUNS_ON}: output {tuple(result.shape)} {result.dtype}.")
    return result, x, y


@app.cell
def _(dtype, kernel, result, x, y):
    # Independent reference: the same inputs widened to NumPy float64, x + y or x @ y there.
    reference = pallas_grids.reference(kernel.value, x, y)
    check = lab.Check(
        f"Pallas {kernel.value} ({dtype.value}, {RUNS_ON}) equals NumPy float64 "
        f"{'x + y' if kernel.value == 'add' else 'x @ y'}, shape {reference.shape}",
        numerics.scaled_max_error(result, reference),
        numerics.tolerance(dtype.value),
        facts={"shapes match": tuple(result.shape) == reference.shape},
    )
    check
    return (check,)


@app.cell
def _():
    ragged_rows = FLAGS.control("ragged_rows", ARGS, label="array rows")
    ragged_block_rows = FLAGS.control("ragged_block_rows", ARGS, label="block rows")
    mo.vstack(
        [
            mo.md(
                f"""
    ## Blocks that do not divide the array

    Pallas does not require a block to divide its array. The grid is then
    ceil(rows / block rows) block rows, and the last one hangs past the edge: on **input**
    Pallas pads it (the kernel sees the array's rows, then padding), on **output** it writes
    back only the rows inside the array and drops the rest. Below, `x + y` over an array of
    `rows x {pallas_grids.RAGGED_COLS}` in blocks of `block rows x
    {pallas_grids.RAGGED_BLOCK_COLS}` ({RAGGED_RUNS_ON}). The kernel also copies the x block
    it received into a second output made of whole blocks, so you can see the padding.
    """
            ),
            mo.hstack([ragged_rows, ragged_block_rows], justify="start"),
        ]
    )
    return ragged_block_rows, ragged_rows


@app.cell
def _(ragged_block_rows, ragged_rows, seed):
    lab.guard(
        pallas_grids.ragged_problem(ragged_rows.value, ragged_block_rows.value),
        headline="This block cannot tile the padding demo's array.",
    )
    _block = (ragged_block_rows.value, pallas_grids.RAGGED_BLOCK_COLS)
    ragged_x, ragged_y = pallas_grids.ragged_data(seed.value, ragged_rows.value)
    ragged_out, _seen = (np.asarray(a) for a in pallas_grids.ragged_add(ragged_x, ragged_y, _block))
    # Independent reference: NumPy float64 x + y over the array's own shape.
    _reference = pallas_grids.reference("add", ragged_x, ragged_y)
    ragged_check = lab.Check(
        f"Pallas x + y with blocks {_block} over an array {_reference.shape} "
        f"({RAGGED_RUNS_ON}) equals NumPy float64 x + y: the padding was dropped",
        numerics.scaled_max_error(ragged_out, _reference),
        numerics.tolerance("float32"),
        facts={"the output has the array's shape": ragged_out.shape == _reference.shape},
    )
    _x = np.asarray(ragged_x, np.float64)
    _rows = pallas_grids.ragged_rows(ragged_rows.value, ragged_block_rows.value)
    _step = ragged_block_rows.value
    for _row in _rows:
        _i = _row["block row i"]
        _row["sum as the kernel saw x"] = f"{_seen[_i * _step : (_i + 1) * _step].sum():.6g}"
        _row["sum of x's rows"] = f"{_x[_i * _step : (_i + 1) * _step].sum():.6g}"
    _padding = _seen[ragged_rows.value :]
    _padding_line = (
        f"The last block row carries **{_padding.shape[0]} padding rows** "
        f"({_padding.size:,} values; {int(np.isnan(_padding).sum()):,} of them NaN here)."
        if _padding.size
        else "The block rows divide the array: no padding at all (try 200 rows)."
    )
    mo.vstack(
        [
            ragged_check,
            mo.hstack(
                [
                    pallas_grids.ragged_picture(ragged_rows.value, ragged_block_rows.value),
                    lab.table(_rows, caption="Each block row: what the kernel saw and kept"),
                ],
                justify="start",
                wrap=True,
            ),
            mo.md(
                f"""
    {_padding_line} What padding holds is unspecified: interpret mode fills it with NaN, so a
    kernel that uses it shows it; on a TPU it is whatever that memory held. An elementwise
    kernel does not care: a padded input row only makes an output row that is dropped, and the
    check above passes. A kernel that **sums across** the ragged dimension does care: the sums
    of each block as the kernel saw it (table) take the padding in. That is why this lesson's
    kernels, the matmul above all, ask for whole blocks: a matmul sums over K, and padded K
    values would be added into every output element. A kernel that must take a ragged block
    masks the padded tail itself (compare the row index, from `pl.program_id`, with the
    array's size).
    """
            ),
        ]
    )
    return (ragged_check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("pallas_grids", ARGS)
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("pallas_grids")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_ragged_check_passes(ragged_check):
    ragged_check.assert_passed()
    return


@app.cell
def test_every_output_block_written_once(ids, ops):
    out = ops[-1]
    written = [out.block_index(i, j) for i, j in ids]
    assert sorted(written) == [(r, c) for r in range(out.grid[0]) for c in range(out.grid[1])]
    return


if __name__ == "__main__":
    app.run()
