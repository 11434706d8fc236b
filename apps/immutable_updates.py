import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Immutable updates and indexing")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.arrays import immutable_updates

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("n", 8, "length N of x", lo=1, hi=32),
        lab.Flag(
            "indices",
            "0, 2, 2, 5, -1, 9",
            f"indices to update/read, comma-separated (at most {immutable_updates.MAX_INDICES}, "
            f"each within +-{immutable_updates.MAX_ABS_INDEX})",
        ),
        lab.Flag("op", "add", "the .at[] update", choices=immutable_updates.OPS),
        lab.Flag(
            "mode",
            "default",
            "out-of-bounds mode of the update",
            choices=immutable_updates.UPDATE_MODES,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Immutable updates and indexing: .at[], duplicates, out-of-bounds indices.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Immutable updates and indexing
    {lab.phase_line("immutable_updates")}

    A JAX array cannot be changed in place, so every `x[idx] = v` becomes
    `x = x.at[idx].set(v)`, a new array (inside `jit`, XLA reuses the buffer when it can).
    The `.at[]` family is also more precise than NumPy's statements in two places that
    bite: **duplicate indices** and **out-of-bounds indices**. In this lesson you will

    - update `x` with `.at[idx].set / add / multiply / min / max` and check each against
      NumPy's unbuffered `ufunc.at` (`np.add.at`, `np.minimum.at`, ...);
    - see that `.at[idx].add` counts every duplicate, like `np.add.at` and unlike NumPy's
      `x[idx] += v`, while `.set` with duplicates keeps one of the values (which one is
      unspecified);
    - see that out-of-bounds indices never raise in JAX: a read **clamps** (or fills, with
      `mode="fill"`), an update is **dropped** (or clamped, with `mode="clip"`), where NumPy
      raises `IndexError`.
    """)
    return


@app.cell
def _():
    n = FLAGS.control("n", ARGS, label="N (length of x)")
    indices_text = mo.ui.text(value=ARGS.indices, label="indices", full_width=False)
    op = FLAGS.control("op", ARGS, label="update op")
    mode = FLAGS.control("mode", ARGS, label="update mode=")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([n, indices_text, seed], justify="start"),
            mo.hstack([op, mode], justify="start"),
        ]
    )
    return indices_text, mode, n, op, seed


@app.cell
def _(indices_text, n, seed):
    try:
        indices_K = immutable_updates.parse_indices(indices_text.value)
        indices_problem = None
    except ValueError as _error:
        indices_K, indices_problem = None, str(_error)
    lab.guard(indices_problem, headline="Can't use these indices.")
    x_N, values_K = immutable_updates.example_arrays(
        jax.random.key(seed.value), n.value, len(indices_K)
    )
    _normalized = immutable_updates.normalized(indices_K, n.value)
    _inside = immutable_updates.in_bounds(indices_K, n.value)
    _counts = {
        int(i): int(c)
        for i, c in zip(*np.unique(_normalized[_inside], return_counts=True), strict=True)
    }
    _notes = []
    if any(c > 1 for c in _counts.values()):
        _repeated = [str(p) for p, c in _counts.items() if c > 1]
        _where = "positions " if len(_repeated) > 1 else "position "
        _notes.append("duplicates at " + _where + ", ".join(_repeated))
    if not _inside.all():
        _notes.append(
            "out of bounds: "
            + ", ".join(str(i) for i, ok in zip(indices_K, _inside, strict=True) if not ok)
        )
    if any(i < 0 for i, ok in zip(indices_K, _inside, strict=True) if ok):
        _notes.append("negative indices count from the end, as in NumPy")
    _note_text = ("**Note:** " + "; ".join(_notes) + ".") if _notes else ""
    mo.md(
        f"""
    `x = {np.asarray(x_N).tolist()}` (N = {n.value}), `idx = {list(indices_K)}`,
    `v = {np.asarray(values_K).tolist()}` (one value per index).

    {_note_text}
    """
    )
    return indices_K, values_K, x_N


@app.cell
def _(indices_K, mode, n, op, values_K, x_N):
    _x_before = np.array(x_N)  # a host copy, to show that x survives the update
    updated_N = immutable_updates.at_update(x_N, indices_K, values_K, op.value, mode.value)
    reference_N = immutable_updates.update_reference(x_N, indices_K, values_K, op.value, mode.value)
    x_unchanged = bool(np.array_equal(np.asarray(x_N), _x_before))
    _targets, _sources = immutable_updates.update_targets(indices_K, n.value, mode.value)
    _landing = {p: [] for p in range(n.value)}
    for _p, _s in zip(_targets, _sources, strict=True):
        _landing[int(_p)].append(f"{float(values_K[_s]):g}")
    _frame = pd.DataFrame(
        [{"position": p, "array": "x (before)", "value": float(x_N[p])} for p in range(n.value)]
        + [
            {"position": p, "array": f"x.at[idx].{op.value}(v)", "value": float(updated_N[p])}
            for p in range(n.value)
        ]
    )
    _bars = (
        alt.Chart(_frame)
        .mark_bar()
        .encode(
            x=alt.X("position:O", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("array:N", sort=["x (before)"]),
            y=alt.Y("value:Q", title="value"),
            color=alt.Color("array:N", sort=["x (before)"], legend=alt.Legend(orient="bottom")),
            tooltip=["position", "array", "value"],
        )
    )
    _reference_ticks = (
        alt.Chart(pd.DataFrame({"position": range(n.value), "NumPy reference": reference_N}))
        .mark_tick(color="black", thickness=2, size=14)
        .encode(
            x="position:O",
            y=alt.Y("NumPy reference:Q", title="value"),
            tooltip=["position", "NumPy reference"],
        )
    )
    _mode_text = "" if mode.value == "default" else f', mode="{mode.value}"'
    mo.vstack(
        [
            mo.md(
                f"## `y = x.at[idx].{op.value}(v{_mode_text})`\nBars: before and after; black "
                "ticks: the NumPy float64 reference "
                f"(`{immutable_updates.reference_spelling(op.value)}` after the same "
                "out-of-bounds rule)."
            ),
            (_bars + _reference_ticks).properties(
                width=max(260, 44 * n.value),
                height=220,
                title=f"x.at[idx].{op.value}(v{_mode_text})",
            ),
            lab.table(
                [
                    {
                        "position": p,
                        "x": f"{float(x_N[p]):g}",
                        "values landing here": ", ".join(_landing[p]) or "-",
                        "jax.numpy": f"{float(updated_N[p]):g}",
                        "NumPy reference": f"{reference_N[p]:g}",
                    }
                    for p in range(n.value)
                ]
            ),
            mo.md(f"`x` itself is unchanged: **{x_unchanged}** (`.at[]` returns a new array)."),
        ]
    )
    return reference_N, updated_N, x_unchanged


@app.cell
def _(indices_K, n, op, values_K, x_N):
    _fancy, _statement, _fancy_error = immutable_updates.numpy_fancy_update(
        x_N, indices_K, values_K, op.value
    )
    _inside = immutable_updates.in_bounds(indices_K, n.value)
    _idx_inside, _values_inside = np.asarray(indices_K)[_inside], np.asarray(values_K)[_inside]
    _fancy_inside, _, _ = immutable_updates.numpy_fancy_update(
        x_N, _idx_inside, _values_inside, op.value
    )
    _at_inside = immutable_updates.at_update(x_N, _idx_inside, _values_inside, op.value, "default")
    _ufunc_inside = immutable_updates.update_reference(
        x_N, _idx_inside, _values_inside, op.value, "default"
    )
    _spelling = immutable_updates.reference_spelling(op.value)
    _differs = [p for p in range(n.value) if _fancy_inside[p] != _ufunc_inside[p]]
    _error_note = (
        mo.callout(
            mo.md(
                f"**NumPy `{_statement}` with all of `idx` raises `IndexError`:** "
                f"{_fancy_error}. The table uses the in-bounds indices only."
            ),
            kind="info",
        )
        if _fancy_error
        else mo.md("")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Duplicates: NumPy's `{_statement}` vs `ufunc.at` vs `.at[]`

    NumPy's `x[idx] += v` is **buffered**: it reads `x[idx]`, adds `v`, and writes the
    result back, so for a duplicated index only one write survives. `np.add.at(x, idx, v)`
    is unbuffered and applies every update; `.at[idx].add` does the same. For `set`, NumPy
    assigns in order (the last value wins); JAX only promises that one of the values is
    written.
    """
            ),
            _error_note,
            lab.table(
                [
                    {
                        "position": p,
                        "x": f"{float(x_N[p]):g}",
                        f"NumPy {_statement}": f"{_fancy_inside[p]:g}",
                        f"NumPy {_spelling}": f"{_ufunc_inside[p]:g}",
                        f"jax.numpy .at[idx].{op.value}": f"{float(_at_inside[p]):g}",
                    }
                    for p in range(n.value)
                ]
            ),
            mo.md(
                f"Positions where NumPy's `{_statement}` disagrees with `ufunc.at`: "
                f"**{', '.join(map(str, _differs)) or 'none'}**"
                + (
                    " (try `add` with a duplicated index)"
                    if not _differs
                    else ": those are the duplicates it lost."
                )
            ),
        ]
    )
    return


@app.cell
def _(indices_K, n, op, values_K, x_N):
    gathered = {
        _m: np.asarray(immutable_updates.gather(x_N, indices_K, _m))
        for _m in immutable_updates.GET_MODES
    }
    updates_by_mode = {
        _m: np.asarray(immutable_updates.at_update(x_N, indices_K, values_K, op.value, _m))
        for _m in immutable_updates.UPDATE_MODES
    }
    _, _numpy_error = immutable_updates.numpy_gather(x_N, indices_K)
    _numpy_says = (
        f"`IndexError`: {_numpy_error}" if _numpy_error else "all indices are in bounds, no error"
    )
    # x[i], one index at a time
    _numpy_each = [immutable_updates.numpy_gather(x_N, (i,)) for i in indices_K]

    def _update_call(m):
        return f".{op.value}(v{'' if m == 'default' else f', mode={m!r}'})"

    _normalized = immutable_updates.normalized(indices_K, n.value)
    _inside = immutable_updates.in_bounds(indices_K, n.value)
    mo.vstack(
        [
            mo.md(
                f"""
    ## Out of bounds: clamp, fill, drop, or raise

    Checking every index on an accelerator would cost a device-to-host round trip, so JAX
    never raises for an out-of-bounds index. **Reads** (`x[idx]`, `x.at[idx].get()`) clamp
    to the nearest valid position by default; `mode="fill"` returns a fill value instead
    (here `{immutable_updates.GET_FILL_VALUE:g}`; NaN by default for floats). **Updates** drop
    out-of-bounds writes by default (`mode="drop"`, alias `"fill"`); `mode="clip"` clamps
    them onto the first or last element. NumPy raises:
    """
            ),
            mo.callout(mo.md(f"**NumPy `x[idx]`:** {_numpy_says}"), kind="info"),
            lab.table(
                [
                    {
                        "idx": i,
                        "means position": int(p) if ok else f"{int(p)} (out of bounds)",
                        "NumPy x[i]": (
                            f"{_numpy_each[k][0][0]:g}"
                            if _numpy_each[k][0] is not None
                            else "IndexError"
                        ),
                        "jnp x[idx]": f"{gathered['default'][k]:g}",
                        'get(mode="clip")': f"{gathered['clip'][k]:g}",
                        'get(mode="fill")': f"{gathered['fill'][k]:g}",
                    }
                    for k, (i, p, ok) in enumerate(
                        zip(indices_K, _normalized, _inside, strict=True)
                    )
                ],
                caption="Reads",
            ),
            lab.table(
                [
                    {"position": p, "x": f"{float(x_N[p]):g}"}
                    | {
                        _update_call(m): f"{updates_by_mode[m][p]:g}"
                        for m in immutable_updates.UPDATE_MODES
                    }
                    for p in range(n.value)
                ],
                caption=f"Updates with .at[idx].{op.value}",
            ),
        ]
    )
    return gathered, updates_by_mode


@app.cell
def _(
    gathered,
    indices_K,
    mode,
    op,
    updated_N,
    updates_by_mode,
    values_K,
    x_N,
    x_unchanged,
):
    # Independent reference: NumPy float64 ufunc.at (np.add.at, np.minimum.at, ...) or in-order
    # assignment, after normalizing negative indices and dropping/clamping out-of-bounds ones.
    _checks = {
        m: immutable_updates.compare_update(
            updates_by_mode[m], x_N, indices_K, values_K, op.value, m
        )
        for m in immutable_updates.UPDATE_MODES
    }
    _errors = {
        f".{op.value} mode={m} vs NumPy (scaled)": c.scaled_error for m, c in _checks.items()
    }
    _errors |= {
        f"get mode={m} vs NumPy clamp/fill": numerics.max_abs_error(
            gathered[m], immutable_updates.gather_reference(x_N, indices_K, m)
        )
        for m in immutable_updates.GET_MODES
    }
    _ambiguous = _checks[mode.value].ambiguous_positions
    check = lab.Check(
        f".at[idx].{op.value} (every update mode) and x[idx] / .get (every mode) match NumPy "
        "float64 ufunc.at / clamp / fill"
        + (
            f"; set() with duplicates at {list(_ambiguous)} wrote one of the candidate values"
            if _ambiguous
            else ""
        ),
        _errors,
        # exact for small whole numbers; multiply can exceed float32's 24 bits
        numerics.tolerance("float32"),
        facts={
            "set() with duplicates wrote one of the candidates": all(
                c.ambiguous_ok for c in _checks.values()
            ),
            "x is unchanged": x_unchanged,
            f"the mode={mode.value} update is the one shown": bool(
                np.array_equal(updated_N, updates_by_mode[mode.value])
            ),
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("immutable_updates")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_add_accumulates_duplicates_like_np_add_at(indices_K, values_K, x_N):
    _result = immutable_updates.at_update(x_N, indices_K, values_K, "add", "drop")
    _reference = np.array(x_N, dtype=np.float64)
    _inside = immutable_updates.in_bounds(indices_K, x_N.shape[0])
    np.add.at(
        _reference,
        immutable_updates.normalized(indices_K, x_N.shape[0])[_inside],
        np.asarray(values_K, np.float64)[_inside],
    )
    np.testing.assert_allclose(_result, _reference, rtol=1e-6)
    return


@app.cell
def test_out_of_bounds_never_raises_in_jax(gathered, indices_K, x_N):
    assert all(v.shape == (len(indices_K),) for v in gathered.values())
    _clamped = np.clip(immutable_updates.normalized(indices_K, x_N.shape[0]), 0, x_N.shape[0] - 1)
    np.testing.assert_array_equal(gathered["default"], np.asarray(x_N)[_clamped])
    return


if __name__ == "__main__":
    app.run()
