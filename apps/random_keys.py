import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Random keys without surprises")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lessons.control_flow import random_keys

    lab.use_cpu_devices()
    # The default is what this host has, up to 8 (a one-chip TPU host has 1), so the
    # defaults run anywhere; a --devices above the count is still refused, with the reason.
    DEFAULT_DEVICES = min(8, jax.device_count())
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "PRNG seed: jax.random.key(seed)", lo=0, hi=9999),
        lab.Flag("fanout", 2, "keys per split in the key tree", lo=2, hi=4),
        lab.Flag("depth", 2, "levels of splitting in the key tree", lo=1, hi=3),
        lab.Flag("steps", 4, "training steps that fold_in their step number", lo=1, hi=16),
        lab.Flag(
            "devices",
            DEFAULT_DEVICES,
            "devices that each draw their own stream (at most jax.device_count())",
            lo=1,
            hi=64,
        ),
        lab.Flag("per_device", 6, "numbers each device draws", lo=1, hi=32),
        lab.Flag(
            "samples",
            5000,
            "samples for the KS test and the histograms",
            lo=20,
            hi=200_000,
            step=10,
        ),
        lab.Flag("bins", 40, "histogram bins", lo=5, hi=100),
        description="Random keys without surprises: split, fold_in, the reuse bug, a KS test.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Random keys without surprises
    {lab.phase_line("random_keys")}

    NumPy hides a random state inside the library and moves it along every time you draw.
    JAX has no hidden state: randomness comes from a **key**, a small value you pass around,
    and the same key always gives the same numbers. That makes every experiment repeatable,
    and it makes one bug easy to write: using a key twice. In this lesson you will

    - make a key with `jax.random.key(seed)`, read its bits with `jax.random.key_data`, and
      **split** it into a tree of keys;
    - derive a key per training step and per device with `jax.random.fold_in`;
    - see the **reuse bug**: one key, two "independent" draws, identical numbers;
    - test samples against their distribution (Kolmogorov-Smirnov, `scipy.stats.kstest`) and
      compare their histogram with the density.
    """)
    return


@app.cell
def _():
    device_count = jax.device_count()
    seed = FLAGS.control("seed", ARGS)
    fanout = FLAGS.control("fanout", ARGS)
    depth = FLAGS.control("depth", ARGS)
    steps = FLAGS.control("steps", ARGS)
    devices = mo.ui.slider(
        1, device_count, value=min(ARGS.devices, device_count), label="devices", show_value=True
    )
    per_device = FLAGS.control("per_device", ARGS, label="numbers per device")
    samples = FLAGS.control("samples", ARGS)
    bins = FLAGS.control("bins", ARGS)
    mo.vstack(
        [
            mo.md(f"JAX sees **{device_count}** {jax.default_backend().upper()} devices."),
            mo.hstack([seed, fanout, depth, steps], justify="start", wrap=True),
            mo.hstack([devices, per_device, samples, bins], justify="start", wrap=True),
        ]
    )
    return (
        bins,
        depth,
        device_count,
        devices,
        fanout,
        per_device,
        samples,
        seed,
        steps,
    )


@app.cell
def _(seed):
    root_key = jax.random.key(seed.value)
    # One key per purpose, split once from the root: nothing below draws from the same key twice.
    purpose_keys = dict(
        zip(
            ("tree", "reuse", "steps", "devices", "normal", "uniform"),
            jax.random.split(root_key, 6),
            strict=True,
        )
    )
    root_words = random_keys.key_words(root_key)
    mo.md(
        f"""
    ## A key is a value

    `key = jax.random.key({seed.value})` is a typed array of shape `{root_key.shape}` and dtype
    `{root_key.dtype}`; its bits are `jax.random.key_data(key) = {list(root_words)}`: the seed
    itself, not yet mixed. The lesson splits it once, into one key per purpose:

    `tree, reuse, steps, devices, normal, uniform = jax.random.split(key, 6)`
    """
    )
    return purpose_keys, root_words


@app.cell
def _(depth, fanout, purpose_keys):
    tree_nodes = random_keys.key_tree(purpose_keys["tree"], fanout.value, depth.value)
    tree_frame = pd.DataFrame(
        [
            {
                "path": n.path,
                "level": n.level,
                "position": n.position,
                "key_data": f"[{n.words[0]}, {n.words[1]}]",
                "hex": n.hex,
            }
            for n in tree_nodes
        ]
    )
    node_at = {n.path: n for n in tree_nodes}
    tree_edges = pd.DataFrame(
        [
            {
                "level": node_at[n.parent].level,
                "position": node_at[n.parent].position,
                "level2": n.level,
                "position2": n.position,
            }
            for n in tree_nodes
            if n.parent
        ]
    )
    leaf_count = fanout.value**depth.value
    y_scale = alt.Scale(domain=[-0.5, leaf_count - 0.5], reverse=True, nice=False)
    x_scale = alt.Scale(domain=[-0.2, depth.value + 0.9], nice=False)
    tree_chart = (
        alt.Chart(tree_edges)
        .mark_rule(color="#999999")
        .encode(
            x=alt.X(
                "level:Q",
                scale=x_scale,
                title="split level",
                axis=alt.Axis(tickMinStep=1, format="d"),
            ),
            y=alt.Y("position:Q", scale=y_scale, axis=None),
            x2="level2:Q",
            y2="position2:Q",
        )
        + alt.Chart(tree_frame)
        .mark_circle(size=90)
        .encode(
            x="level:Q",
            y="position:Q",
            color=alt.Color("level:O", legend=None),
            tooltip=["path", "key_data", "hex"],
        )
        + alt.Chart(tree_frame)
        .mark_text(align="left", dx=8, fontSize=10)
        .encode(x="level:Q", y="position:Q", text="hex:N")
    ).properties(
        title=f"split({fanout.value}) applied {depth.value} times: key data in hex",
        width=160 * (depth.value + 1),
        height=max(120, 18 * leaf_count),
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Split: a tree of keys

    `jax.random.split(key, {fanout.value})` returns {fanout.value} new keys; split each again
    and you get a tree. Every key is distinct ({len({n.words for n in tree_nodes})} distinct
    key-data pairs for {len(tree_nodes)} nodes), and the whole tree is a pure function of
    the seed: run it again and every bit is the same. Hover a node for its full key data.
    """
            ),
            tree_chart,
        ]
    )
    return (tree_nodes,)


@app.cell
def _(purpose_keys, samples):
    reuse = random_keys.reuse_demo(purpose_keys["reuse"], samples.value)
    shown = min(8, samples.value)
    reuse_rows = [
        {
            "i": i,
            "normal(key)": f"{reuse.reused_a[i]:+.6f}",
            "normal(key) again": f"{reuse.reused_b[i]:+.6f}",
            "same?": "yes" if reuse.reused_a[i] == reuse.reused_b[i] else "no",
            "normal(k1)": f"{reuse.split_a[i]:+.6f}",
            "normal(k2)": f"{reuse.split_b[i]:+.6f}",
        }
        for i in range(shown)
    ]
    scatter_n = min(800, samples.value)
    pairs = pd.concat(
        [
            pd.DataFrame(
                {
                    "first draw": reuse.reused_a[:scatter_n],
                    "second draw": reuse.reused_b[:scatter_n],
                    "keys": "one key, used twice",
                }
            ),
            pd.DataFrame(
                {
                    "first draw": reuse.split_a[:scatter_n],
                    "second draw": reuse.split_b[:scatter_n],
                    "keys": "k1, k2 = split(key)",
                }
            ),
        ]
    )
    pair_chart = (
        alt.Chart(pairs)
        .mark_circle(size=12, opacity=0.5)
        .encode(
            x="first draw:Q",
            y="second draw:Q",
            color=alt.Color("keys:N", legend=None, sort=["one key, used twice"]),
        )
        .properties(width=220, height=220)
        .facet(
            column=alt.Column(
                "keys:N", title=None, sort=["one key, used twice", "k1, k2 = split(key)"]
            )
        )
        .properties(title=f"the first {scatter_n} pairs of draws")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## The reuse bug

    ```python
    noise = jax.random.normal(key, (n,))
    dropout_mask = jax.random.normal(key, (n,))   # the same key again: the same numbers
    ```

    Nothing warns you. Over all {samples.value} draws: identical with a reused key:
    **{reuse.reused_identical}** (correlation {reuse.correlation("reused"):.3f}); identical after
    `k1, k2 = jax.random.split(key)`: **{reuse.split_identical}** (correlation
    {reuse.correlation("split"):+.3f}).
    """
            ),
            lab.table(reuse_rows),
            pair_chart,
        ]
    )
    return (reuse,)


@app.cell
def _(purpose_keys, steps):
    step_result = random_keys.step_keys(purpose_keys["steps"], steps.value)
    step_words = step_result.words
    step_rows = [
        {"step": t, "step_key = fold_in(key, step): key data (hex)": random_keys.key_hex(w)}
        for t, w in enumerate(step_words)
    ]
    collide = step_result.split_equals_fold_in
    mo.vstack(
        [
            mo.md(
                """
    ## fold_in: a key per step

    A training loop does not need to carry a key from step to step:
    `step_key = jax.random.fold_in(key, step)` mixes the step number into the key, so step
    1000 can be recomputed on its own (after a restart, say) and gets the same randomness.
    """
            ),
            lab.table(step_rows),
            mo.callout(
                mo.md(
                    f"**A surprise worth knowing**: `split(key, {steps.value})[i] == "
                    f"fold_in(key, i)` for every i here: **{collide}**. JAX's default threefry "
                    "derives both from the same counter, so splitting a key *and* folding step "
                    "numbers into it gives colliding keys. Give each use its own parent key (as "
                    "this lesson does with `purpose_keys`)."
                ),
                kind="warn" if collide else "info",
            ),
        ]
    )
    return (step_words,)


@app.cell
def _(device_count, devices, per_device, purpose_keys):
    # Headless, a flag asking for more devices than exist stops the lesson; the slider cannot.
    device_problem = None
    if not lab.interactive() and ARGS.devices > device_count:
        device_problem = (
            f"--devices {ARGS.devices} asks for more devices than JAX sees ({device_count}): "
            f"pass at most {device_count}."
        )
    lab.guard(device_problem, headline="Not enough devices.")

    device_samples_DN = random_keys.per_device_samples_DN(
        purpose_keys["devices"], devices.value, per_device.value
    )
    device_reference_DN = random_keys.per_device_reference_DN(
        purpose_keys["devices"], devices.value, per_device.value
    )
    device_error = numerics.max_abs_error(device_samples_DN, device_reference_DN)
    device_rows_distinct = len({tuple(r) for r in np.asarray(device_samples_DN)}) == devices.value
    held_by = {
        int(range(devices.value)[s.index[0]][0]): s.device.id
        for s in device_samples_DN.addressable_shards
    }
    _held = [held_by[d] for d in range(devices.value)]
    device_chart = charts.heatmap(
        np.asarray(device_samples_DN),
        "each device's draws: fold_in(key, axis_index)",
        row_title="device" if _held == list(range(devices.value)) else f"row (devices {_held})",
        col_title="draw",
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## fold_in: a stream per device

    Inside `jax.shard_map` over {devices.value} devices every device receives the same key
    and folds in its own index:

    ```python
    def draw(key):
        device_key = jax.random.fold_in(key, jax.lax.axis_index("device"))
        return jax.random.normal(device_key, (1, {per_device.value}))
    ```

    Rows differ from device to device ({"all" if device_rows_distinct else "**not all**"}
    {devices.value} rows distinct), no device talks to another, and each row equals the
    same `fold_in(key, d)` drawn on one device with `vmap` (max difference {device_error:.2g}).
    """
            ),
            device_chart,
        ]
    )
    return device_error, device_rows_distinct


@app.cell
def _(bins, purpose_keys, samples):
    drawn = {
        d: random_keys.sample(purpose_keys[d], d, samples.value) for d in random_keys.DISTRIBUTIONS
    }
    ks_results = {d: random_keys.ks_test(x, d) for d, x in drawn.items()}
    few_per_bin = samples.value < 5 * bins.value
    mo.vstack(
        [
            mo.md(
                f"""
    ## Do the numbers follow the distribution?

    The Kolmogorov-Smirnov statistic is the largest gap between the samples' empirical CDF
    and the true CDF; its p-value is the chance of a gap that large from a correct
    generator. The check below asks for p > {random_keys.KS_ALPHA:g}: a correct generator
    fails it one seed in {1 / random_keys.KS_ALPHA:,.0f} (per distribution), so a pass on
    your seed is evidence, not proof.
    """
            ),
            lab.table(
                [
                    {
                        "distribution": r.distribution,
                        "samples": r.n,
                        "KS statistic": f"{r.statistic:.4f}",
                        "p-value": f"{r.pvalue:.3f}",
                        f"p > {random_keys.KS_ALPHA:g}": str(r.pvalue > random_keys.KS_ALPHA),
                    }
                    for r in ks_results.values()
                ]
            ),
            *(
                [
                    mo.callout(
                        mo.md(
                            f"Only {samples.value / bins.value:.1f} samples per bin: the "
                            "histograms below are mostly noise. Raise **samples** or lower "
                            "**bins**."
                        ),
                        kind="warn",
                    )
                ]
                if few_per_bin
                else []
            ),
        ]
    )
    return drawn, ks_results


@app.cell
def _(device_error, device_rows_distinct, ks_results, reuse):
    # Independent references: scipy.stats' CDFs for the KS tests, and np.array_equal on the
    # host for the reuse bug; the per-device streams redrawn on one device (vmap, no shard_map).
    check = lab.Check(
        "KS p-values vs scipy.stats ("
        + ", ".join(f"{d} {r.pvalue:.3f}" for d, r in ks_results.items())
        + f", need > {random_keys.KS_ALPHA:g}); reuse bug detected (reused key: identical draws "
        f"{reuse.reused_identical}, split keys: {reuse.split_identical}); per-device streams "
        "distinct and equal to fold_in(key, d) drawn on one device",
        {"per-device streams vs fold_in(key, d) on one device": device_error},
        numerics.tolerance("float32"),
        facts={
            **{
                f"KS {d}: p-value > {random_keys.KS_ALPHA:g}": r.pvalue > random_keys.KS_ALPHA
                for d, r in ks_results.items()
            },
            "a reused key gives identical draws": reuse.reused_identical,
            "split keys give different draws": not reuse.split_identical,
            "every device's row is distinct": device_rows_distinct,
        },
    )
    check
    return (check,)


@app.cell
def _(bins, drawn):
    def histogram_chart(distribution):
        rows = pd.DataFrame(
            random_keys.histogram_vs_pdf(drawn[distribution], distribution, bins.value)
        ).assign(zero=0.0)
        bars = (
            alt.Chart(rows)
            .mark_rect(opacity=0.6, stroke="white", strokeWidth=0.5)
            .encode(
                x=alt.X("bin_left:Q", title="value"),
                x2="bin_right:Q",
                y=alt.Y("density:Q", title="density"),
                y2="zero:Q",
            )
        )
        curve = (
            alt.Chart(rows)
            .mark_line(color="#e45756", strokeWidth=2)
            .encode(x="centre:Q", y="pdf:Q")
        )
        return (bars + curve).properties(
            title=f"{distribution}: histogram vs pdf (red)", width=300, height=200
        )

    mo.hstack([histogram_chart(d) for d in random_keys.DISTRIBUTIONS])
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("random_keys")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_reuse_bug_is_visible(reuse):
    assert reuse.reused_identical and np.array_equal(reuse.reused_a, reuse.reused_b)
    assert not reuse.split_identical
    return


@app.cell
def test_key_tree_is_distinct_and_complete(depth, fanout, tree_nodes):
    assert len(tree_nodes) == sum(fanout.value**level for level in range(depth.value + 1))
    assert len({n.words for n in tree_nodes}) == len(tree_nodes)
    return


@app.cell
def test_seed_is_the_key_data(root_words, seed, step_words):
    assert root_words == (0, seed.value)
    assert len(set(step_words)) == len(step_words)
    return


if __name__ == "__main__":
    app.run()
