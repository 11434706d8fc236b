import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Tracing, static arguments, and recompilation",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.perf import compilation

    lab.use_cpu_devices()
    MIN_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
    FLAGS = lab.Flags(
        lab.Flag(
            "lengths",
            "5, 6, 7, 5, 6, 7, 12, 13, 14, 3",
            "input lengths, one call each (comma-separated)",
        ),
        lab.Flag(
            "center",
            "alternate",
            "the static flag center on each call",
            choices=compilation.CENTER_PATTERNS,
        ),
        lab.Flag("min_bucket", 4, "smallest bucket (a power of two)", choices=MIN_BUCKETS),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description=(
            "Tracing, static arguments, and recompilation: count compiles, read the jaxpr, pad "
            "to buckets."
        ),
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Tracing, static arguments, and recompilation
    {lab.phase_line("tracing_recompilation")}

    `jax.jit` does not compile *your function*; it compiles what your function does for one
    **input signature**: the shapes and dtypes of the array arguments and the *values* of the
    static arguments. The first call with a new signature **traces** the Python code (it runs
    once, with placeholder arrays) and compiles the result; later calls with the same
    signature reuse it. A new length or a new static value means a new trace and a new
    compile. In this lesson you will

    - count compilations with a Python side effect in the traced function (it runs only while
      tracing) and with JAX's own cache size;
    - read the **jaxpr**, the program JAX traced, and see how a static flag changes it;
    - stop the recompiles: **pad** inputs to a few bucket lengths (powers of two) with a
      **mask**, and check the padded results equal NumPy on the unpadded data.
    """)
    return


@app.cell
def _():
    lengths_text = mo.ui.text(
        value=ARGS.lengths, label="input lengths, one call each", full_width=True
    )
    center = FLAGS.control("center", ARGS, label="static flag center")
    min_bucket = FLAGS.control("min_bucket", ARGS, label="smallest bucket")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack([lengths_text, mo.hstack([center, min_bucket, seed], justify="start")])
    return center, lengths_text, min_bucket, seed


@app.cell
def _(center, lengths_text):
    try:
        lengths = compilation.parse_lengths(lengths_text.value)
        problem = None
    except ValueError as error:
        lengths, problem = [], f"--lengths: {error}"
    lab.guard(problem, headline="These lengths do not work.")
    centers = compilation.centers_for(center.value, len(lengths))
    mo.md(
        """
    ```python
    def masked_moment(x, mask, center):           # center: a Python bool
        count = jnp.sum(mask)
        mean = jnp.sum(x * mask) / count
        d = (x - mean) * mask if center else x * mask  # a Python `if`: center must be static
        return jnp.sum(d * d) / count                  # variance (center) or mean of x²

    f = jax.jit(masked_moment, static_argnames="center")
    ```
    """
    )
    return centers, lengths


@app.cell
def _(centers, lengths, min_bucket, seed):
    exact = compilation.run_calls(lengths, centers, "exact", seed=seed.value)
    bucketed = compilation.run_calls(
        lengths, centers, "pow2", int(min_bucket.value), seed=seed.value
    )
    call_rows = [
        {
            "call": e.call,
            "length": e.length,
            "center": e.center,
            "exact: shape": f"({e.padded},)",
            "exact: compiled?": e.reason,
            "exact ms": f"{1e3 * e.seconds:.2f}",
            "buckets: shape": f"({b.padded},)",
            "buckets: compiled?": b.reason,
            "buckets ms": f"{1e3 * b.seconds:.2f}",
        }
        for e, b in zip(exact, bucketed, strict=True)
    ]
    cumulative = pd.DataFrame(
        [
            {
                "call": r.call,
                "strategy": strategy,
                "compilations so far": int(sum(x.traced for x in records[: r.call + 1])),
            }
            for strategy, records in (
                ("exact shapes", exact),
                (f"buckets (powers of two, >= {min_bucket.value})", bucketed),
            )
            for r in records
        ]
    )
    cumulative_chart = (
        alt.Chart(cumulative, title="compilations so far, call by call")
        .mark_line(point=True, interpolate="step-after")
        .encode(
            x="call:O",
            y=alt.Y("compilations so far:Q", axis=alt.Axis(tickMinStep=1)),
            color="strategy:N",
            strokeDash="strategy:N",
        )
        .properties(width=420, height=200)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Every call, and whether it compiled

    Exact shapes: **{sum(r.traced for r in exact)}** compilations for {len(lengths)} calls (JAX's
    cache holds {exact[-1].cache_size}). Padded to buckets: **{sum(r.traced for r in bucketed)}**
    (cache: {bucketed[-1].cache_size}). A compile shows in the wall time of its call
    (milliseconds on {MACHINE}); a cache hit costs a dispatch.
    """
            ),
            lab.table(call_rows),
            cumulative_chart,
        ]
    )
    return bucketed, exact


@app.cell
def _(bucketed, centers, exact, lengths, min_bucket):
    # Independent references: NumPy float64 (np.var / mean of x²) on the UNPADDED data, and
    # the closed-form compile count: one per distinct (padded length, center) pair.
    expected = {
        "exact": compilation.expected_compiles(lengths, centers, "exact"),
        "buckets": compilation.expected_compiles(lengths, centers, "pow2", int(min_bucket.value)),
    }
    observed = {"exact": sum(r.traced for r in exact), "buckets": sum(r.traced for r in bucketed)}
    cache_sizes = {"exact": exact[-1].cache_size, "buckets": bucketed[-1].cache_size}
    counts_match = observed == expected and all(
        v in (None, observed[k]) for k, v in cache_sizes.items()
    )
    check = lab.Check(
        "padded/bucketed and exact results equal NumPy float64 on the unpadded data, and the "
        "compile counts equal the distinct buckets (closed form: exact "
        f"{expected['exact']}, buckets {expected['buckets']}; traced {observed['exact']}, "
        f"{observed['buckets']})",
        # one scalar per call, each relative to max(|reference|, 1)
        numerics.elementwise_relative_error(
            [r.result for r in exact + bucketed], [r.reference for r in exact + bucketed]
        ),
        numerics.tolerance("float32"),
        facts={"compile counts equal the closed form and JAX's cache size": counts_match},
    )
    mo.vstack(
        [
            check,
            lab.table(
                [
                    {
                        "strategy": k,
                        "compilations (trace counter)": observed[k],
                        "JAX cache size": cache_sizes[k],
                        "closed form": expected[k],
                    }
                    for k in observed
                ]
            ),
        ]
    )
    return check, counts_match, observed


@app.cell
def _(bucketed):
    first = bucketed[0]
    other_center = not first.center
    mo.vstack(
        [
            mo.md(
                f"""
    ## What JAX traced: the jaxpr

    `jax.make_jaxpr(partial(masked_moment, center=...))(x, mask)` for the first call's
    bucket, length {first.padded}. The shape is **part of the program** (`f32[{first.padded}]`),
    which is why a new length needs a new compile. The static flag is gone: Python already
    took the branch, so `center={first.center}` and `center={other_center}` are two different
    programs (only one of them subtracts the mean).
    """
            ),
            mo.hstack(
                [
                    mo.vstack(
                        [
                            mo.md(f"`center={_c}`"),
                            text.code_block(
                                compilation.jaxpr_text(first.padded, _c), "text", "jaxpr"
                            ),
                        ]
                    )
                    for _c in (first.center, other_center)
                ],
                widths="equal",
            ),
        ]
    )
    return


@app.cell
def _(bucketed, seed):
    # Why the mask: padded zeros are real numbers to the arithmetic.
    longest = max(bucketed, key=lambda r: r.padded - r.length)
    data = compilation.sequence_data(max(r.length for r in bucketed), seed.value)[: longest.length]
    padded_x, _mask = compilation.pad_to(data, longest.padded)
    without_mask = float(np.var(padded_x) if longest.center else np.mean(padded_x**2))
    mo.vstack(
        [
            mo.md(
                f"""
    ## Why static, and why the mask

    **Static arguments.** Without `static_argnames="center"`, `center` is traced like an array
    and the Python `if` cannot decide: JAX says *{compilation.nonstatic_flag_error()}*
    Static means *part of the signature*: each distinct value compiles its own program, so
    keep static arguments to a few values (a mode, a flag, a size), never data.

    **Padding.** Call {longest.call} has length {longest.length}, padded to {longest.padded}.
    The masked function gives {longest.result:.6f} (NumPy on the unpadded data:
    {longest.reference:.6f}). The same statistic over the padded array *without* the mask:
    **{without_mask:.6f}**: the zeros count as data. Masks keep padding out of every sum and count.
    """
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("tracing_recompilation")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_buckets_never_compile_more_than_exact_shapes(counts_match, observed):
    assert counts_match and observed["buckets"] <= observed["exact"]
    return


@app.cell
def test_every_call_is_padded_to_its_bucket(bucketed, min_bucket):
    for r in bucketed:
        assert r.padded >= max(r.length, int(min_bucket.value)) and r.padded & (r.padded - 1) == 0
    return


if __name__ == "__main__":
    app.run()
