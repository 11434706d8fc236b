import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Load, batch, and checkpoint order with Grain",
)

with app.setup:
    import json

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import data, lab
    from core.lab import charts, text

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("examples", 12, "examples in the data set", lo=1, hi=64),
        lab.Flag("batch_size", 4, "examples per batch", lo=1, hi=16),
        lab.Flag("seed", 0, "shuffle seed", lo=0, hi=9999),
        lab.Flag("epochs", 2, "epochs to read", lo=1, hi=4),
        lab.Flag("process_count", 2, "JAX processes (hosts) sharing the data", lo=1, hi=4),
        lab.Flag("process_index", 0, "this process's index", lo=0, hi=3),
        lab.Flag("interrupt_at", 3, "batches read before the iterator state is saved", lo=0, hi=64),
        description=(
            "Load, batch, and checkpoint order with Grain: seeded shuffles, per-process shards, "
            "iterator state."
        ),
    )
    ARGS = FLAGS.parse()
    PROCESS_COLORS = alt.Scale(domain=[0, 1, 2, 3], range=charts.distinct_colors(4))


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Load, batch, and checkpoint order with Grain
    {lab.phase_line("grain_pipeline")}

    [Grain](https://google-grain.readthedocs.io) is the data loader of the JAX ecosystem. Its
    `MapDataset` is a random-access recipe (`source[i]` -> shard -> shuffle -> batch ->
    repeat), so the whole data order is a pure function of a seed and an index, and an
    iterator's position is one small JSON value. In this lesson you will

    - shuffle with a **seed**, reseeded every epoch: a new order each epoch, the same orders
      in every run;
    - **shard** the data across JAX processes (hosts): process *i* of *n* reads examples
      *i, i + n, i + 2n, ...* (`grain.sharding.ShardByJaxProcess` gives *i* and *n* on a real
      multi-host run); see that the shards are disjoint and cover the data;
    - save the iterator's state (`iterator.get_state()`), restore it in a new iterator and
      check that the order continues **exactly** as if nothing had happened.
    """)
    return


@app.cell
def _():
    examples = FLAGS.control("examples", ARGS)
    batch_size = FLAGS.control("batch_size", ARGS, label="batch size B")
    seed = FLAGS.control("seed", ARGS)
    epochs = FLAGS.control("epochs", ARGS)
    process_count = FLAGS.control("process_count", ARGS, label="process count")
    mo.hstack([examples, batch_size, seed, epochs, process_count], justify="start", wrap=True)
    return batch_size, epochs, examples, process_count, seed


@app.cell
def _(process_count):
    process_index = mo.ui.slider(
        0,
        process_count.value - 1,
        value=min(ARGS.process_index, process_count.value - 1),
        label="this process",
        show_value=True,
    )
    process_index
    return (process_index,)


@app.cell
def _(batch_size, epochs, examples, process_count, process_index, seed):
    # Flags that cannot work stop headless; in the UI the controls are bounded.
    problem = None
    if not lab.interactive() and ARGS.process_index >= ARGS.process_count:
        problem = (
            f"--process-index {ARGS.process_index} does not exist with --process-count "
            f"{ARGS.process_count}: indices run from 0 to {ARGS.process_count - 1}."
        )
    elif examples.value < process_count.value:
        problem = (
            f"{examples.value} examples cannot give each of {process_count.value} processes at "
            "least one: use fewer processes or more examples."
        )
    lab.guard(problem, headline="Can't shard this way.")

    columns = data.make_columns(seed.value, examples.value, features=2, classes=3)
    source = data.ColumnSource(columns)
    contract = data.classification_contract(2, 3)
    shards = [data.Shard(i, process_count.value) for i in range(process_count.value)]
    per_epoch = [data.batches_per_epoch(examples.value, batch_size.value, s) for s in shards]
    reads = {}  # process -> list of batches (example ids), all epochs
    for _shard, _batches in zip(shards, per_epoch, strict=True):
        _iterator = data.grain_iterator(
            data.grain_dataset(
                source, contract, batch_size.value, seed.value, _shard, num_epochs=epochs.value
            )
        )
        reads[_shard.index] = data.take_ids(_iterator, _batches * epochs.value)
    mine = data.Shard(process_index.value, process_count.value)
    read_rows = pd.DataFrame(
        [
            {"process": p, "epoch": e, "position": k, "example": ex}
            for p, batches in reads.items()
            for e in range(epochs.value)
            for k, ex in enumerate(sum(batches[e * per_epoch[p] : (e + 1) * per_epoch[p]], []))
        ]
    )
    ownership = (
        alt.Chart(
            read_rows[read_rows["epoch"] == 0], title="which process reads which example (epoch 0)"
        )
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("example:O"),
            y=alt.Y("process:O"),
            color=alt.Color("process:N", scale=PROCESS_COLORS, legend=None),
            tooltip=["process", "example", "position"],
        )
        .properties(width=min(640, 22 * examples.value), height=24 * process_count.value)
    )
    _mine = read_rows[read_rows["process"] == mine.index].copy()
    _low = int(_mine["example"].min())
    _domain = [_low, max(int(_mine["example"].max()), _low + 1)]
    _mine["ink"] = charts.inks(_mine["example"], "viridis", _domain)  # readable on its cell
    order_grid = alt.Chart(
        _mine, title=f"process {mine.index}: the order it reads, epoch by epoch"
    ).encode(x=alt.X("position:O", title="position in the epoch"), y="epoch:O")
    order_chart = (
        order_grid.mark_rect(stroke="white").encode(
            color=alt.Color(
                "example:Q", scale=alt.Scale(scheme="viridis", domain=_domain), legend=None
            )
        )
        + order_grid.mark_text().encode(text="example:O", color=charts.ink_color())
    ).properties(
        width=min(640, 28 * len(range(mine.index, examples.value, mine.count))),
        height=28 * epochs.value,
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Shards and shuffles

    ```python
    dataset = (grain.MapDataset.source(source)[{mine.index}::{mine.count}]   # this process's shard
               .map(contract.check_example)                  # the data contract
               .shuffle(seed={seed.value})                          # reseeded each epoch by repeat
               .batch({batch_size.value}, batch_fn=pad_and_mask)
               .repeat({epochs.value}))
    iterator = iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    ```

    Each process reads **{per_epoch[mine.index]} batches per epoch**; a batch never spans two
    epochs (the last one is padded and masked).
    """
            ),
            ownership,
            order_chart,
        ]
    )
    return columns, contract, mine, per_epoch, reads, source


@app.cell
def _(epochs, mine, per_epoch):
    total_batches = per_epoch[mine.index] * epochs.value
    interrupt_at = mo.ui.slider(
        0,
        total_batches,
        value=min(ARGS.interrupt_at, total_batches),
        label="save the iterator after batch",
        show_value=True,
    )
    interrupt_at
    return interrupt_at, total_batches


@app.cell
def _(
    batch_size,
    contract,
    epochs,
    interrupt_at,
    mine,
    seed,
    source,
    total_batches,
):
    # Headless only: in the UI the slider is bounded by the batches this process reads.
    _problem = None
    if not lab.interactive() and ARGS.interrupt_at > total_batches:
        _reads = (
            text.plural(total_batches, "batch", "batches")
            + " in "
            + text.plural(epochs.value, "epoch")
        )
        _problem = (
            f"--interrupt-at {ARGS.interrupt_at} is past the end: process {mine.index} reads "
            f"{_reads}."
        )
    lab.guard(_problem)

    def _dataset():
        return data.grain_dataset(
            source, contract, batch_size.value, seed.value, mine, num_epochs=epochs.value
        )

    uninterrupted = data.take_ids(data.grain_iterator(_dataset()), total_batches)
    first_iterator = data.grain_iterator(_dataset())
    before = data.take_ids(first_iterator, interrupt_at.value)
    saved_state = json.loads(json.dumps(first_iterator.get_state()))  # as stored in a checkpoint
    resumed_iterator = data.grain_iterator(_dataset())  # a new process would build it again
    resumed_iterator.set_state(saved_state)
    after = data.take_ids(resumed_iterator, total_batches - interrupt_at.value)

    loader = data.grain_loader(source, batch_size.value, seed.value, mine, num_epochs=epochs.value)
    loader_all = [[int(i) for i in b["id"]] for b in loader]
    loader_iterator = iter(loader)
    loader_before = [
        [int(i) for i in next(loader_iterator)["id"]]
        for _ in range(min(interrupt_at.value, len(loader_all)))
    ]
    loader_state = data.loader_state_to_json(loader_iterator.get_state())
    loader_resumed = iter(loader)
    loader_resumed.set_state(data.loader_state_from_json(loader_state))
    loader_after = [[int(i) for i in b["id"]] for b in loader_resumed]
    mo.vstack(
        [
            mo.md(
                f"""
    ## Save the position, restore it, continue

    After {interrupt_at.value} batches, `iterator.get_state()` is
    `{json.dumps(saved_state)}`: that is all a checkpoint needs to know about the data. A new
    iterator (in a new process, after a crash) calls `set_state` with it and reads on.

    The same job with `grain.DataLoader` (an `IndexSampler` with `ShardOptions`, a `Batch`
    operation, `worker_count=0`) keeps a longer state, JSON text in bytes, decoded here:
    """
            ),
            text.code_block(json.dumps(loader_state, indent=1), "json", "loader_state.json"),
            mo.md(
                "`DataLoader`'s sampler shards **contiguously** (process *i* gets one block of "
                "examples) where `MapDataset` slicing interleaves; its `Batch` runs over the "
                "record stream, so a batch can straddle two epochs. Both shard disjointly and "
                "cover the data."
            ),
        ]
    )
    return (
        after,
        before,
        loader_after,
        loader_all,
        loader_before,
        saved_state,
        uninterrupted,
    )


@app.cell
def _(
    after,
    before,
    columns,
    epochs,
    loader_after,
    loader_all,
    loader_before,
    mine,
    per_epoch,
    reads,
    uninterrupted,
):
    # Independent references: the uninterrupted iterator, and NumPy set arithmetic on ids.
    all_ids = np.arange(len(columns["id"]))
    shard_sets = [set(sum(batches[: per_epoch[p]], [])) for p, batches in reads.items()]
    disjoint = sum(len(s) for s in shard_sets) == len(set().union(*shard_sets))
    covering = set().union(*shard_sets) == set(all_ids.tolist())
    interleaved = all(
        sorted(s) == all_ids[p :: len(shard_sets)].tolist() for p, s in enumerate(shard_sets)
    )
    epochs_are_permutations = all(
        sorted(sum(batches[e * per_epoch[p] : (e + 1) * per_epoch[p]], [])) == sorted(shard_sets[p])
        for p, batches in reads.items()
        for e in range(epochs.value)
    )
    restored_equal = before + after == uninterrupted
    loader_equal = loader_before + loader_after == loader_all
    mismatches = sum(
        a != b for a, b in zip(sum(before + after, []), sum(uninterrupted, []), strict=False)
    ) + abs(len(sum(before + after, [])) - len(sum(uninterrupted, [])))
    check = lab.Check(
        f"process {mine.index}: order after restoring the iterator == uninterrupted order "
        f"(MapDataset and DataLoader); {len(shard_sets)} shards disjoint and covering; every "
        "epoch a permutation of its shard",
        {"ids out of place after restoring (MapDataset)": float(mismatches)},
        0.0,
        facts={
            "restored order == uninterrupted (MapDataset)": restored_equal,
            "restored order == uninterrupted (DataLoader)": loader_equal,
            "shards disjoint": disjoint,
            "shards cover every example": covering,
            "shard i holds examples i, i+n, ... (NumPy slicing)": interleaved,
            "every epoch is a permutation of the shard": epochs_are_permutations,
        },
    )
    check
    return check, covering, disjoint, restored_equal


@app.cell
def _(after, before, interrupt_at, uninterrupted):
    stream = pd.DataFrame(
        [
            {"batch": k, "slot": s, "example": ex, "run": "uninterrupted"}
            for k, b in enumerate(uninterrupted)
            for s, ex in enumerate(b)
        ]
        + [
            {"batch": k, "slot": s, "example": ex, "run": "saved, restored, continued"}
            for k, b in enumerate(before + after)
            for s, ex in enumerate(b)
        ]
    )
    lines = (
        alt.Chart(stream, title="example ids in reading order: both runs (the rule marks the save)")
        .mark_point(filled=True)
        .encode(
            x=alt.X("batch:Q"),
            y=alt.Y("example:Q"),
            color="run:N",
            shape="run:N",
            tooltip=["run", "batch", "slot", "example"],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"batch": [interrupt_at.value - 0.5]}))
        .mark_rule(strokeDash=[4, 4])
        .encode(x="batch:Q")
    )
    (lines + rule).properties(width=520, height=220)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("grain_pipeline")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_shards_disjoint_and_covering(covering, disjoint):
    assert disjoint and covering
    return


@app.cell
def test_restored_iterator_continues_the_order(restored_equal, saved_state):
    assert restored_equal and json.loads(json.dumps(saved_state)) == saved_state
    return


if __name__ == "__main__":
    app.run()
