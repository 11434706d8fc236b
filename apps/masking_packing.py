import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Masking, tokenization, and sequence packing",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lm import tokenizer, transformer

    lab.use_cpu_devices()
    DEFAULT_DOCUMENTS = "x = 1\ndef add(a, b): return a + b\nprint('naïve ☕')\ny = x * 2\n# 日本語"
    FLAGS = lab.Flags(
        lab.Flag("text", "naïve café ☕ 日本", "text to turn into byte tokens and back"),
        lab.Flag(
            "documents", DEFAULT_DOCUMENTS, "documents to pack, one per line (use \\n between them)"
        ),
        lab.Flag("seq_len", 32, "row length T (tokens per packed row)", lo=4, hi=64),
        lab.Flag("causal", True, "combine the document mask with the causal mask"),
        lab.Flag("row", 1, "which packed row the mask and gradient pictures show", lo=0, hi=15),
        lab.Flag("seed", 0, "PRNG seed for the tiny model's weights", lo=0, hi=9999),
        description=(
            "Masking, tokenization, and sequence packing: bytes, segment ids, masks, "
            "valid-token loss."
        ),
    )
    ARGS = FLAGS.parse()
    MAX_ROWS = 16  # rows the pictures and the row picker cover


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Masking, tokenization, and sequence packing
    {lab.phase_line("masking_packing")}

    A language model reads integers, in fixed-size rows, many rows at a time. Real text comes
    as strings of every length. This lesson builds the bridge, and the masks that keep it
    honest:

    - **bytes as tokens**: UTF-8 turns any text into bytes 0..255, so a vocabulary of 256
      covers every language and every emoji, and decoding gives the text back exactly;
    - **packing**: put several short documents into one row instead of padding each one,
      recording a **segment id** (which document) and a **position** (where in it) per token;
    - **the document mask**: causal *and* same-document, so no token attends across a
      document boundary, proved by gradients through a whole (tiny) Transformer;
    - **the loss counts real targets only**: padding and the jump from one document into the
      next are excluded, checked against a NumPy reference that walks the documents.
    """)
    return


@app.cell
def _():
    text = mo.ui.text(value=ARGS.text, label="text", full_width=True)
    mo.vstack([mo.md("## 1 · Text becomes bytes\nType anything: accents, CJK, emoji."), text])
    return (text,)


@app.cell
def _(text):
    text_tokens = tokenizer.encode(text.value)
    decoded_text = tokenizer.decode(text_tokens)
    round_trip_ok = decoded_text == text.value and text_tokens.tolist() == list(
        text.value.encode("utf-8")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    **{len(text.value)} characters → {len(text_tokens)} byte tokens.** ASCII characters
    are one byte; `é` is two, most CJK characters three, an emoji four. Tokens:
    `{text_tokens.tolist()[:64]}{" …" if len(text_tokens) > 64 else ""}`

    `decode(encode(text)) == text`: **{decoded_text == text.value}**. No unknown tokens,
    nothing to train; the price is longer sequences than a learned subword vocabulary gives.
    """
            ),
            lab.table(
                tokenizer.byte_table(text.value)[:24], caption="One row per character (first 24):"
            ),
        ]
    )
    return (round_trip_ok,)


@app.cell
def _():
    documents_text = mo.ui.text_area(
        value=ARGS.documents.replace("\\n", "\n"),
        label="documents, one per line",
        rows=5,
        full_width=True,
    )
    seq_len = FLAGS.control("seq_len", ARGS, label="row length T")
    causal = FLAGS.control("causal", ARGS, label="causal")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("## 2 · Packing documents into rows"),
            documents_text,
            mo.hstack([seq_len, causal, seed], justify="start"),
        ]
    )
    return causal, documents_text, seed, seq_len


@app.cell
def _(documents_text, seq_len):
    documents = [line for line in documents_text.value.split("\n") if line]
    document_problem = None
    if not documents:
        document_problem = "Type at least one document (one per line)."
    else:
        packed = tokenizer.pack_documents([tokenizer.encode(d) for d in documents], seq_len.value)
        if packed.tokens_BT.shape[0] > MAX_ROWS:
            document_problem = (
                f"These documents need {packed.tokens_BT.shape[0]} rows of T = {seq_len.value}; "
                f"the pictures show at most {MAX_ROWS}. Use fewer or shorter documents, or "
                "longer rows."
            )
    lab.guard(document_problem, headline="Nothing to pack.")
    return documents, packed


@app.cell
def _(documents, packed):
    def packed_cells(packed):
        """One record per slot of every row: byte, document, segment id, position."""
        owner = np.full(packed.tokens_BT.shape, -1)
        for p in packed.placements:
            owner[p.row, p.start : p.start + p.length] = p.document
        cells = []
        for (r, t), token in np.ndenumerate(packed.tokens_BT):
            char = chr(token) if 32 <= token < 127 else f"{token:02x}"
            cells.append(
                {
                    "row": r,
                    "t": t,
                    "byte": int(token),
                    "char": char if owner[r, t] >= 0 else "",
                    "document": f"doc {owner[r, t]}" if owner[r, t] >= 0 else "padding",
                    "segment id": int(packed.segment_ids_BT[r, t]),
                    "position": int(packed.positions_BT[r, t]),
                }
            )
        return pd.DataFrame(cells)

    cells = packed_cells(packed)
    document_names = [f"doc {i}" for i in range(len(documents))] + ["padding"]
    document_colors = alt.Scale(
        domain=document_names, range=[*charts.distinct_colors(len(documents)), "#eeeeee"]
    )
    _rows, _t = packed.tokens_BT.shape
    _base = alt.Chart(
        cells,
        title=(
            f"{len(documents)} documents packed into {_rows} rows of T = {_t} "
            f"(fill {packed.fill:.0%})"
        ),
    ).encode(
        x=alt.X(
            "t:O",
            title="position in row",
            axis=alt.Axis(labelAngle=0, values=list(range(0, _t, 4))),
        ),
        y=alt.Y("row:O"),
    )
    _grid = _base.mark_rect(stroke="white").encode(
        color=alt.Color("document:N", scale=document_colors),
        tooltip=["row", "t", "document", "segment id", "position", "byte"],
    ) + _base.mark_text(fontSize=9).encode(text="char:N")
    mo.vstack(
        [
            mo.md(
                """
    Greedy packing, in order: a document goes into the current row if it fits, otherwise it
    opens a new row (the rest of the old row becomes padding). A document longer than a row
    is cut into row-sized pieces, each its own segment; a cut may even split a multi-byte
    character, which a byte-level model does not mind. Printable ASCII bytes are shown as
    characters, other bytes in hex (`c3 a9` is `é`).
    """
            ),
            _grid.properties(width=min(720, 20 * _t), height=22 * _rows),
            lab.table(
                [
                    {
                        "document": f"doc {p.document}"
                        + (f" (piece {p.piece})" if p.piece else ""),
                        "row": p.row,
                        "slots": f"{p.start}..{p.start + p.length - 1}",
                        "segment id": p.segment,
                        "bytes": p.length,
                    }
                    for p in packed.placements
                ],
                caption="Where each document went:",
            ),
        ]
    )
    return cells, document_colors


@app.cell
def _(packed):
    row = mo.ui.slider(
        0,
        packed.tokens_BT.shape[0] - 1,
        value=min(ARGS.row, packed.tokens_BT.shape[0] - 1),
        label="row",
        show_value=True,
    )
    row_problem = None
    if not lab.interactive() and ARGS.row >= packed.tokens_BT.shape[0]:
        row_problem = (
            f"--row {ARGS.row} does not exist: the documents fill rows "
            f"0..{packed.tokens_BT.shape[0] - 1}."
        )
    lab.guard(row_problem, headline="No such row.")
    return (row,)


@app.cell
def _(cells, document_colors, row):
    _strip = cells[cells["row"] == row.value].melt(
        id_vars=["t", "document", "char"],
        value_vars=["byte", "segment id", "position"],
        var_name="array",
        value_name="value",
    )
    _strip["label"] = _strip["value"].astype(str)
    _t = int(_strip["t"].max()) + 1
    _base = alt.Chart(
        _strip, title=f"row {row.value}: the three arrays a packed batch carries"
    ).encode(
        x=alt.X(
            "t:O",
            title="position in row",
            axis=alt.Axis(labelAngle=0, values=list(range(0, _t, 4))),
        ),
        y=alt.Y("array:N", sort=["byte", "segment id", "position"], title=None),
    )
    mo.vstack(
        [
            mo.md(
                """
    Each row carries three integer arrays of the same shape: `tokens_BT` (the bytes),
    `segment_ids_BT` (1, 2, 3 … per document in the row; **0 is padding**) and
    `positions_BT` (restarting at 0 in every document, so a document's position
    embeddings do not depend on where it landed in the row).
    """
            ),
            row,
            (
                _base.mark_rect(stroke="white").encode(
                    color=alt.Color("document:N", scale=document_colors, legend=None),
                    tooltip=["t", "document", "char", "value"],
                )
                + _base.mark_text(fontSize=9).encode(text="label:N")
            ).properties(width=min(720, 20 * _t), height=70),
        ]
    )
    return


@app.cell
def _(causal, cells, document_colors, packed, row):
    mask_TS = tokenizer.segment_mask_BTS(
        packed.segment_ids_BT[row.value : row.value + 1], causal=causal.value
    )[0]
    _owner = cells[cells["row"] == row.value]["document"].to_numpy()  # document of each slot
    _cells = pd.DataFrame(
        [
            {"query t": t, "key s": s, "cell": _owner[t] if allowed else "masked"}
            for (t, s), allowed in np.ndenumerate(mask_TS)
        ]
    )
    _n = mask_TS.shape[0]
    _size = max(8, min(18, 480 // _n))
    _colors = alt.Scale(
        domain=[*document_colors.domain, "masked"], range=[*document_colors.range, "#ffffff"]
    )
    _mask_chart = (
        alt.Chart(
            _cells,
            title=(
                f"row {row.value}: {'causal AND ' if causal.value else ''}same-segment mask "
                "(colored by the query's document)"
            ),
        )
        .mark_rect(stroke="#f4f4f4", strokeWidth=0.3)
        .encode(
            x=alt.X("key s:O", axis=alt.Axis(labelAngle=0, values=list(range(0, _n, 4)))),
            y=alt.Y("query t:O", axis=alt.Axis(values=list(range(0, _n, 4)))),
            color=alt.Color("cell:N", scale=_colors, legend=alt.Legend(title=None)),
            tooltip=["query t", "key s", "cell"],
        )
        .properties(width=_size * _n, height=_size * _n)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## 3 · One mask for causality and documents

    `mask[t, s] = (segment[t] == segment[s]) {"and (s ≤ t)" if causal.value else ""}`:
    query `t` may look at key `s` only inside its own
    document{" and only backwards" if causal.value else ""}. The picture is a staircase of
    {"triangles" if causal.value else "squares"}, one per document. Padding attends only to
    padding, so no row of the mask is empty (an empty row would be a softmax over nothing).
    Allowed pairs: **{int(mask_TS.sum())}** of {mask_TS.size}.
    """
            ),
            _mask_chart,
        ]
    )
    return


@app.cell
def _(packed, seed):
    # A tiny randomly initialised byte LM: 2 pre-LN blocks (the next lesson builds them).
    model_config = transformer.TransformerConfig(
        width=16, num_heads=2, num_layers=2, max_len=packed.tokens_BT.shape[1]
    )
    model = transformer.TinyLM(model_config, jax.random.key(seed.value))
    return (model,)


@app.cell
def _(model, packed, row):
    gradient_norms_TS = transformer.backbone_jacobian_norms_TS(
        model,
        packed.tokens_BT[row.value],
        packed.segment_ids_BT[row.value],
        packed.positions_BT[row.value],
    )
    causal_segment_TS = np.asarray(
        tokenizer.segment_mask_BTS(packed.segment_ids_BT[row.value : row.value + 1], causal=True)
    )[0]
    leak = float(gradient_norms_TS[~causal_segment_TS].max()) if (~causal_segment_TS).any() else 0.0
    # An exact claim, so the bound is 0; every token must still depend on itself (a model
    # cut off from its own input would pass the leak test trivially).
    isolation = lab.Check(
        "every gradient across documents or from later tokens is exactly 0",
        {"largest ‖d hidden[t] / d embedding[s]‖ outside the allowed pairs": leak},
        0.0,
        facts={
            "every d hidden[t] / d embedding[t] is nonzero": bool(
                np.all(np.diag(gradient_norms_TS) > 0)
            )
        },
    )
    return causal_segment_TS, gradient_norms_TS, isolation, leak


@app.cell
def _(causal_segment_TS, gradient_norms_TS, isolation, leak, row):
    _cells = pd.DataFrame(
        [
            {"output t": t, "input s": s, "norm": float(v) if v > 0 else None}
            for (t, s), v in np.ndenumerate(gradient_norms_TS)
        ]
    )
    _n = gradient_norms_TS.shape[0]
    _size = max(8, min(18, 480 // _n))
    _chart = (
        alt.Chart(
            _cells,
            title=(
                f"row {row.value}: ‖d hidden[t] / d embedding[s]‖ through 2 blocks "
                "(grey: exactly 0)"
            ),
        )
        .mark_rect(stroke="white", strokeWidth=0.3)
        .encode(
            x=alt.X("input s:O", axis=alt.Axis(labelAngle=0, values=list(range(0, _n, 4)))),
            y=alt.Y("output t:O", axis=alt.Axis(values=list(range(0, _n, 4)))),
            color=alt.condition(
                "datum.norm === null",
                alt.value("#e8e8e8"),
                alt.Color("norm:Q", scale=alt.Scale(scheme="greens", type="log")),
            ),
            tooltip=["output t", "input s", alt.Tooltip("norm:Q", format=".3g")],
        )
        .properties(width=_size * _n, height=_size * _n)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## 4 · Proof by gradient: no token attends across documents

    The model here is a tiny Transformer (2 blocks, random weights) run on the packed row
    with the causal document mask. Backward passes give `d hidden[t] / d embedding[s]` for
    every pair: if any information crossed a document boundary, or flowed backwards in time,
    through *any* of the layers, some entry outside the staircase would be non-zero.
    Largest norm outside the allowed pairs: **{leak:g}**.
    """
            ),
            isolation,
            _chart,
            mo.md(
                "The mask switch above only changes the picture in section 3; the model always "
                "uses the causal document mask "
                f"(allowed pairs: {int(causal_segment_TS.sum())})."
            ),
        ]
    )
    return


@app.cell
def _(model, packed):
    batch = transformer.batch_from_packed(packed)
    logits_BTV = transformer.forward(
        model, batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"]
    )
    loss, valid_count = (
        float(v)
        for v in transformer.token_loss(logits_BTV, batch["targets_BT"], batch["weights_BT"])
    )
    # Independent reference: NumPy float64, walking the placed documents (never the weights).
    reference_loss, reference_count = transformer.token_loss_reference(logits_BTV, packed)
    # The mistake this prevents: averaging over every slot, padding and boundaries included.
    naive_loss = float(
        transformer.token_loss(logits_BTV, batch["targets_BT"], np.ones_like(batch["weights_BT"]))[
            0
        ]
    )
    check = lab.Check(
        f"valid-token loss and count ({int(valid_count)}) vs a NumPy float64 walk over the "
        "documents",
        numerics.scaled_max_error(loss, reference_loss),
        numerics.tolerance("float32"),
        facts={"valid-token count equals the reference's": int(valid_count) == reference_count},
    )
    return (
        batch,
        check,
        loss,
        naive_loss,
        reference_count,
        reference_loss,
        valid_count,
    )


@app.cell
def _(
    batch,
    check,
    loss,
    naive_loss,
    packed,
    reference_count,
    reference_loss,
    valid_count,
):
    _kind = np.where(batch["weights_BT"] > 0, "target: next byte (counted)", "")
    _kind = np.where((_kind == "") & (packed.segment_ids_BT == 0), "padding (excluded)", _kind)
    _last = np.zeros_like(_kind, bool)
    _last[:, -1] = True
    _kind = np.where((_kind == "") & _last, "end of row: no next token", _kind)
    _kind = np.where(_kind == "", "last byte of a document (excluded)", _kind)
    _frame = pd.DataFrame(
        [{"row": r, "t": t, "target": str(k)} for (r, t), k in np.ndenumerate(_kind)]
    )
    _domain = [
        "target: next byte (counted)",
        "last byte of a document (excluded)",
        "end of row: no next token",
        "padding (excluded)",
    ]
    _rows, _t = packed.tokens_BT.shape
    _chart = (
        alt.Chart(_frame, title="what each position is asked to predict")
        .mark_rect(stroke="white")
        .encode(
            x=alt.X(
                "t:O",
                title="position in row",
                axis=alt.Axis(labelAngle=0, values=list(range(0, _t, 4))),
            ),
            y="row:O",
            color=alt.Color(
                "target:N",
                scale=alt.Scale(domain=_domain, range=["#54a24b", "#e45756", "#f58518", "#dddddd"]),
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=320),
            ),
            tooltip=["row", "t", "target"],
        )
        .properties(width=min(720, 20 * _t), height=22 * _rows)
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## 5 · The loss counts real targets only

    Position `t` is trained to predict the byte at `t + 1`, but only when both belong to the
    same document. The last byte of a document must not learn to predict the first byte of
    an unrelated one, padding predicts nothing, and the mean divides by the number of real
    targets, not by B × T.

    **{int(valid_count)} valid targets** out of {_rows * _t} positions. Mean loss over them:
    **{loss:.6f}** (NumPy float64, counting {reference_count} targets: {reference_loss:.6f}).
    Averaging over all {_rows * _t} slots instead would give {naive_loss:.4f}: a number that
    moves with the amount of padding, not with the model. (Random weights: the loss sits near
    ln 256 = {np.log(256):.3f}.)
    """
            ),
            check,
            _chart,
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## Try this

    - Type text in another script, or an emoji, in section 1 and watch the byte count grow
      faster than the character count.
    - Add a long line to the documents: it is cut into row-sized pieces, each its own segment.
    - Shorten the row length T until every document needs a row of its own: the fill drops
      and the naive loss drifts further from the real one.
    - Switch *causal* off to see the pure document mask (what an encoder such as BERT uses on
      packed rows).

    Next lesson: the Transformer block these masks feed, and what bfloat16 does to it.
    """)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("masking_packing")
    return


@app.cell
def test_round_trip(round_trip_ok):
    assert round_trip_ok
    return


@app.cell
def test_no_attention_across_documents(isolation):
    isolation.assert_passed()
    return


@app.cell
def test_valid_token_loss_matches_numpy(check, reference_count, valid_count):
    check.assert_passed()
    assert int(valid_count) == reference_count
    return


@app.cell
def test_packing_fills_rows_with_every_byte(documents, packed):
    assert int((packed.segment_ids_BT > 0).sum()) == sum(len(d.encode("utf-8")) for d in documents)
    return


if __name__ == "__main__":
    app.run()
