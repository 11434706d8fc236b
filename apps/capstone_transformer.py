import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Capstone: a causal Transformer training system",
)

with app.setup:
    import dataclasses
    import json
    import pathlib
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import (
        cache_report,
        compressors,
        data,
        kv_cache,
        report,
        training,
    )
    from core import curriculum, lab, numerics
    from core.lm import transformer
    from core.perf import records
    from core.state import checkpoint

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("d_model", 32, "model width D", lo=16, hi=128, step=16),
        lab.Flag("layers", 2, "Transformer blocks L", lo=1, hi=4),
        lab.Flag("heads", 4, "attention heads H (must divide D)", lo=1, hi=8),
        lab.Flag("seq_len", 32, "training row length T (bytes)", lo=16, hi=128, step=16),
        lab.Flag("batch", 2, "rows per step B", lo=1, hi=16),
        lab.Flag("files", 6, "standard-library files to read (sorted by name)", lo=4, hi=64),
        lab.Flag("steps", 12, "training steps", lo=4, hi=400),
        lab.Flag(
            "crash_at", 5, "the simulated crash: the first run stops after this step", lo=1, hi=399
        ),
        lab.Flag("ckpt_every", 3, "steps between checkpoints", lo=1, hi=100),
        lab.Flag(
            "compute",
            "float32",
            "activation / matmul-input dtype",
            choices=config_lib.COMPUTE_DTYPES,
        ),
        lab.Flag("new_tokens", 12, "bytes to generate for the KV-cache comparison", lo=1, hi=64),
        lab.Flag("seed", 0, "PRNG seed: weights, dropout, data order", lo=0, hi=9999),
        description=(
            "Capstone: train, recover, cache, export, serve and benchmark a byte-level causal "
            "Transformer."
        ),
    )
    ARGS = FLAGS.parse()
    REPO_RUN = curriculum.REPO_ROOT / "runs" / "capstone"
    # The fp32 cache's teacher-forced logits vs a full forward pass, both at HIGHEST matmul
    # precision, scaled as core.numerics does (max |difference| / max(max |logit|, 1)): the
    # same model summed in another order over a whole forward pass, so ten times the table's
    # float32 1e-5 on a CPU and the float32 HIGHEST bound on a TPU
    # (cache_report.fp32_cache_tolerance, asked when the check runs: the backend is known
    # then), and the table's bfloat16 tolerance for bfloat16 activations (an absolute 1e-2
    # failed at the controls' upper ends, a wide, deep model trained long).
    CACHE_LOGIT_TOLERANCE = {
        "float32": cache_report.fp32_cache_tolerance,
        "bfloat16": lambda: numerics.tolerance("bfloat16"),
    }


@app.cell(hide_code=True)
def _():
    mo.md("""
    # Capstone: a causal Transformer training system
    *Capstones · Causal Transformer training-system capstone*

    Everything in the course, in one system you can run end to end and whose every number you
    can trust: a byte-level causal Transformer trained on Python's own standard library
    (`capstones/byte_transformer/`). This page runs a **small** version of it live; the full
    system is a command line (`python -m capstones.byte_transformer COMMAND`, or `make capstone`
    for all of it) that writes a report. Here you will

    1. train with checkpoints, **crash** the run and resume it, and compare every restored piece
       (parameters, both Adam moments, step, dropout key, data position) with an uninterrupted run;
       then check **causality by gradients** and the **valid-token loss against numpy float64**
       on held-out files the model never saw;
    2. compare the **fp32, bf16 and int8 KV caches**: stored bytes, logit error, greedy agreement;
    3. see where the export/serve, profile/bench, TPU plan and run-manifest results of a full
       run live, and read them when `runs/capstone/` holds one.
    """)
    return


@app.cell(hide_code=True)
def _():
    mo.accordion(
        {
            "Portfolio guide: what to build, the evidence, how it is judged": mo.md(
                curriculum.portfolio_guide("capstone_transformer")
            )
        }
    )
    return


@app.cell
def _():
    d_model = FLAGS.control("d_model", ARGS, label="width D")
    layers = FLAGS.control("layers", ARGS)
    heads = FLAGS.control("heads", ARGS, label="heads H")
    seq_len = FLAGS.control("seq_len", ARGS, label="row length T")
    batch = FLAGS.control("batch", ARGS, label="batch B")
    files = FLAGS.control("files", ARGS)
    compute = FLAGS.control("compute", ARGS, label="compute dtype")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("## The model and the data"),
            mo.hstack([d_model, layers, heads], justify="start"),
            mo.hstack([seq_len, batch, files], justify="start"),
            mo.hstack([compute, seed], justify="start"),
        ]
    )
    return batch, compute, d_model, files, heads, layers, seed, seq_len


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    crash_at = FLAGS.control("crash_at", ARGS, label="crash after step")
    ckpt_every = FLAGS.control("ckpt_every", ARGS, label="checkpoint every")
    train_button = mo.ui.run_button(label="Train, crash, resume")
    mo.vstack(
        [
            mo.md("## 1 · Train, crash, resume"),
            mo.hstack([steps, crash_at, ckpt_every], justify="start"),
            train_button,
        ]
    )
    return ckpt_every, crash_at, steps, train_button


@app.cell
def _(
    batch,
    ckpt_every,
    compute,
    crash_at,
    d_model,
    files,
    heads,
    layers,
    seed,
    seq_len,
    steps,
):
    config_problem = None
    try:
        config = config_lib.Config(
            d_model=d_model.value,
            num_layers=layers.value,
            num_heads=heads.value,
            max_len=max(seq_len.value, 64),
            seq_len=seq_len.value,
            batch_size=batch.value,
            max_files=files.value,
            max_bytes=2048,
            heldout_fraction=0.34,
            compute_dtype=compute.value,
            seed=seed.value,
            steps=steps.value,
            ckpt_every=ckpt_every.value,
            eval_every=max(1, steps.value // 4),
            log_every=steps.value,
            async_ckpt=False,
            min_piece=min(16, seq_len.value - 1),
        )
        if crash_at.value >= steps.value:
            config_problem = (
                f"crash after step {crash_at.value} must come before the last step ({steps.value})"
            )
        elif crash_at.value < ckpt_every.value:
            config_problem = (
                f"no checkpoint exists before the crash: crash after step {crash_at.value} but "
                f"the first checkpoint is at step {ckpt_every.value}"
            )
    except ValueError as error:
        config = None
        config_problem = str(error)
    lab.guard(config_problem, headline="These settings cannot run.")
    return (config,)


@app.cell
def _(config, crash_at, train_button):
    _press = (
        "Press **Train, crash, resume**: three training runs (uninterrupted, crashed, resumed) "
        "take a while at the defaults on a small CPU, most of it compiling, and longer when "
        "other work shares the CPU."
    )
    mo.stop(lab.interactive() and not train_button.value, mo.callout(mo.md(_press), kind="info"))
    # Two run directories in a temporary folder that disappears with this session.
    workdir = tempfile.TemporaryDirectory(prefix="jax_tpu_lab_capstone_")
    with mo.status.progress_bar(total=3, title="training", remove_on_exit=True) as _bar:
        uninterrupted = training.train(
            config, pathlib.Path(workdir.name) / "uninterrupted", log_mlflow=False
        )
        _bar.update(subtitle="run that crashes")
        crashed_dir = pathlib.Path(workdir.name) / "crashed"
        crashed = training.train(
            dataclasses.replace(config, steps=crash_at.value), crashed_dir, log_mlflow=False
        )
        # "Crash": the process state is gone; only the checkpoints on disk remain. Delete the
        # checkpoints written after the last interval save, as a kill before it would have.
        _last_interval = crash_at.value // config.ckpt_every * config.ckpt_every
        for _step_dir in (crashed_dir / training.CHECKPOINTS).iterdir():
            if _step_dir.name.isdigit() and int(_step_dir.name) > _last_interval:
                import shutil

                shutil.rmtree(_step_dir)
        _bar.update(subtitle="resumed run")
        resumed = training.train(config, crashed_dir, log_mlflow=False)
        _bar.update()
    return crashed, crashed_dir, resumed, uninterrupted


@app.cell
def _(config, crashed, resumed, uninterrupted):
    _reference = checkpoint.state_digest(uninterrupted.state, uninterrupted.data_state)
    _restored = checkpoint.state_digest(resumed.state, resumed.data_state)
    digest_rows = [
        {
            "piece": k,
            "uninterrupted": f"`{_reference[k]}`",
            "crashed + resumed": f"`{_restored[k]}`",
            "equal": _reference[k] == _restored[k],
        }
        for k in checkpoint.DIGEST_GROUPS
    ]
    mo.vstack(
        [
            mo.md(
                f"""
    The first run trained steps 1-{crashed.last_step} and "crashed"; the newest checkpoint on
    disk was step **{resumed.start_step}**, so the resumed run restored it (parameters, AdamW
    state, step, dropout key, and the data stream's position: epoch, file, byte offset) and
    trained steps {resumed.start_step + 1}-{config.steps} again. At the end, a sha256 of each
    piece of the final state:
    """
            ),
            lab.table(digest_rows),
        ]
    )
    return (digest_rows,)


@app.cell
def _(crashed_dir, uninterrupted):
    _rows = []
    for _record in uninterrupted.records:
        _rows.append({"step": _record["step"], "run": "uninterrupted", "loss": _record["loss"]})
    for _record in training.read_metrics(crashed_dir):
        _rows.append({"step": _record["step"], "run": "crashed + resumed", "loss": _record["loss"]})
    loss_frame = pd.DataFrame(_rows)
    _chart = (
        alt.Chart(loss_frame, title="loss per valid byte: the two runs lie on top of each other")
        .mark_line(point=True)
        .encode(
            x="step:Q",
            y=alt.Y("loss:Q", title="loss (nats per byte)"),
            color="run:N",
            strokeDash="run:N",
            tooltip=["run", "step", alt.Tooltip("loss:Q", format=".6f")],
        )
        .properties(width=560, height=240)
    )
    _chart
    return (loss_frame,)


@app.cell
def _(config, resumed):
    heldout_packed = data.heldout_packed(config, data.load_corpus(config))
    causality = report.causality_check(
        config,
        resumed.state["params"],
        transformer.batch_from_packed(heldout_packed[0]),
        window=min(32, config.seq_len),
    )
    loss_vs_numpy = report.loss_check(config, resumed.state["params"], heldout_packed[0])
    return causality, loss_vs_numpy


@app.cell
def _(causality, digest_rows, loss_frame, loss_vs_numpy):
    _pivot = loss_frame.pivot(index="step", columns="run", values="loss").dropna()
    losses_equal = bool((_pivot["uninterrupted"] == _pivot["crashed + resumed"]).all())
    digests_equal = all(row["equal"] for row in digest_rows)
    _loss = "valid-token loss vs numpy float64 (relative)"
    _recovery = "losses: crashed + resumed vs uninterrupted (max |difference|)"
    check = lab.Check(
        "causality, loss vs numpy float64, bit-for-bit recovery",
        {
            _loss: loss_vs_numpy["relative_error"],
            _recovery: numerics.max_abs_error(_pivot["crashed + resumed"], _pivot["uninterrupted"]),
        },
        {_loss: loss_vs_numpy["tolerance"], _recovery: 0.0},
        facts={
            "causality by gradients (later bytes exactly 0, earlier > 0)": causality["passed"],
            "valid-token counts equal": (
                loss_vs_numpy["valid_tokens"] == loss_vs_numpy["numpy_valid_tokens"]
            ),
            "every restored piece equal (sha256)": digests_equal,
        },
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ### Checks against independent references

    - **Causality by gradients** (held-out window of {causality["window"]} bytes): largest
      |∂ logits[t] / ∂ embedding[s]| over later bytes s > t =
      **{causality["max_norm_later"]:.1e}** (must be exactly 0); smallest over earlier bytes of
      the same file = {causality["min_norm_allowed"]:.2e} (> 0).
    - **Valid-token loss vs numpy float64** on {loss_vs_numpy["rows"]} held-out rows: JAX
      {loss_vs_numpy["jax_loss"]:.6f}, numpy {loss_vs_numpy["numpy_float64_loss"]:.6f}
      (a forward pass and loss written out separately, counting only placed file bytes:
      {loss_vs_numpy["numpy_valid_tokens"]} targets, JAX counted {loss_vs_numpy["valid_tokens"]}).
      The JAX side runs its matmuls at HIGHEST precision: at a TPU's DEFAULT, one bfloat16
      pass per float32 matmul, this loss differs from numpy's in its fourth digit.
    - **Recovery**: every step's loss equal bit for bit: {losses_equal}; every restored piece
      equal: {digests_equal}.
    """
            ),
            check,
        ]
    )
    return (check,)


@app.cell
def _():
    new_tokens = FLAGS.control("new_tokens", ARGS, label="bytes to generate")
    return (new_tokens,)


@app.cell
def _(config, train_button):
    # In the UI: True until "Train, crash, resume" has run on the current settings. `config`
    # is built from every training control, so changing any of them re-runs this cell (as it
    # re-runs training) with the button unpressed; marimo links cells by the names a body reads.
    assert config is not None
    untrained = lab.interactive() and not train_button.value
    return (untrained,)


@app.cell
def _(new_tokens, untrained):
    _below = (
        mo.callout(
            mo.md(
                "Press **Train, crash, resume** above to train; the cache comparison and "
                "greedy generation appear here."
            ),
            kind="info",
        )
        if untrained
        else new_tokens
    )
    mo.vstack(
        [
            mo.md(
                """
    ## 2 · The KV cache in fp32, bf16 and int8

    Decoding one byte at a time re-reads every earlier key and value, so the cache's bytes are
    what decode moves. bf16 halves them; int8 stores one byte per number plus one float32
    scale per (token, head) for k and for v (scale = max|x| / 127 over the head's K numbers),
    so int8 / fp32 = 1/4 + 1/K. Below, held-out text is fed through each cache
    (teacher-forced) and compared with the fp32 cache, and greedy generation from a few
    prompts is compared token by token.
    """
            ),
            _below,
        ]
    )
    return


@app.cell
def _(config, new_tokens, resumed):
    _model = training.model_from_params(config, resumed.state["params"])
    _documents = data.load_corpus(config).heldout
    _window = min(48, config.max_len - 1 - new_tokens.value)
    cache_comparison = cache_report.cache_report(
        _model,
        _documents,
        prompts=("def ", "import "),
        n_tokens=_window,
        gen_tokens=new_tokens.value,
        prefill_len=8,
        max_windows=2,
    )
    cache_rows = [
        {
            "cache": r["cache"],
            "bytes / token / layer": r["bytes_per_token_per_layer"],
            "vs fp32": f"{r['ratio_vs_fp32']:.3f}",
            "max |Δ logit|": f"{r['max_abs_logit_error']:.2e}",
            "mean |Δ logit|": f"{r['mean_abs_logit_error']:.2e}",
            "top-1 agreement": f"{r['teacher_forced_top1_agreement']:.1%}",
            "greedy agreement": f"{r['greedy_agreement']:.1%}",
            "held-out loss Δ (nats/byte)": f"{r['heldout_loss_delta']:+.2e}",
        }
        for r in cache_comparison["rows"]
    ]
    _bytes = (
        alt.Chart(pd.DataFrame(cache_comparison["rows"]), title="stored bytes per token per layer")
        .mark_bar()
        .encode(
            x=alt.X("cache:N", sort=list(kv_cache.PRECISIONS)),
            y=alt.Y("bytes_per_token_per_layer:Q", title="bytes"),
            tooltip=["cache", "bytes_per_token_per_layer", "ratio_vs_fp32"],
        )
        .properties(width=240, height=200)
    )
    _error = (
        alt.Chart(pd.DataFrame(cache_comparison["rows"]), title="mean |Δ logit| vs the fp32 cache")
        .mark_bar(color="#e45756")
        .encode(
            x=alt.X("cache:N", sort=list(kv_cache.PRECISIONS)),
            y=alt.Y("mean_abs_logit_error:Q", title="mean |Δ logit|"),
            tooltip=["cache", "mean_abs_logit_error", "max_abs_logit_error"],
        )
        .properties(width=240, height=200)
    )
    mo.vstack(
        [
            lab.table(cache_rows),
            mo.md(
                "The fp32 cache itself against a full forward pass without a cache, both with "
                "their matmuls at HIGHEST precision: max |Δ logit| "
                f"= {cache_comparison['fp32_cache_vs_full_forward_max_abs']:.1e}. (At a TPU's "
                "DEFAULT each float32 matmul is one bfloat16 pass and the two paths round "
                "differently, by about 3e-3 of the logits' scale on a v5e: a difference of "
                "precision, not of the cache.)"
            ),
            mo.hstack([_bytes, _error], justify="start"),
        ]
    )
    return (cache_comparison,)


@app.cell
def _(cache_comparison, config):
    # Independent: the closed-form byte counts from the shapes alone.
    _k = config.d_model // config.num_heads
    _expected = {
        "fp32": 8 * config.d_model,
        "bf16": 4 * config.d_model,
        "int8": 2 * config.d_model + 8 * config.num_heads,
    }
    _rows = cache_comparison["rows"]
    _bytes = "bytes per token per layer vs the closed form (max |difference|)"
    _logits = "fp32 cache vs full forward pass (max |Δ logit| / max(max |logit|, 1))"
    cache_check = lab.Check(
        f"cache bytes = closed form (int8/fp32 = 1/4 + 1/K = {0.25 + 1 / _k:.3f}); "
        "fp32 cache = full forward pass",
        {
            _bytes: numerics.max_abs_error(
                [r["bytes_per_token_per_layer"] for r in _rows],
                [_expected[r["cache"]] for r in _rows],
            ),
            _logits: cache_comparison["fp32_cache_vs_full_forward_max_abs"]
            / max(1.0, cache_comparison["full_forward_max_abs_logit"]),
        },
        {_bytes: 0.0, _logits: CACHE_LOGIT_TOLERANCE[config.compute_dtype]()},
    )
    cache_check
    return (cache_check,)


@app.cell(hide_code=True)
def _():
    _report_path = REPO_RUN / "report" / "report.json"
    _saved = json.loads(_report_path.read_text()) if _report_path.exists() else None
    _intro = mo.md(
        """
    ## 3 · The full system: export, serve, profile, bench, plan, run manifest

    The rest of the capstone runs from the command line at the default size (d_model 256,
    4 layers, 4 heads, rows of 256 bytes, batch 16), each command writing JSON into the run
    directory that `report` gathers:

    ```bash
    make capstone                      # all of the below into runs/capstone/, then the report
    python -m capstones.byte_transformer train run_dir=runs/capstone steps=200
    python -m capstones.byte_transformer eval run_dir=runs/capstone
    python -m capstones.byte_transformer cache-report run_dir=runs/capstone
    python -m capstones.byte_transformer export run_dir=runs/capstone out=runs/capstone/artifacts
    python -m capstones.byte_transformer serve artifacts=runs/capstone/artifacts port=8000
    python -m capstones.byte_transformer profile run_dir=runs/capstone out=runs/capstone/profile
    python -m capstones.byte_transformer bench out=runs/capstone/bench.json
    python -m capstones.byte_transformer plan out=runs/capstone/plan.json
    python -m capstones.byte_transformer run-manifest run_dir=runs/capstone
    python -m capstones.byte_transformer report run_dir=runs/capstone
    ```

    Every command takes `--help`. A TPU claim needs a TPU run: `tpu_scripts/byte_transformer_tpu.py`
    refuses to write a TPU result unless `jax.default_backend() == "tpu"`.
    """
    )
    if _saved is None:
        _found = mo.callout(
            mo.md(
                "No full run in `runs/capstone/` yet: `make capstone` writes one (about 20 "
                "minutes on 2 CPU cores)."
            ),
            kind="info",
        )
    else:
        _training = _saved["training"]
        _found = mo.vstack(
            [
                mo.md(
                    f"**The full run in `runs/capstone/`** ({_saved['parameters']:,} "
                    f"parameters): steps {_training['steps']}, last loss "
                    f"{_training['last_loss']:.3f}, held-out "
                    f"{_training.get('last_heldout_bpb') or float('nan'):.3f} bits/byte. "
                    f"Missing pieces: {', '.join(_saved['missing']) or 'none'}. Full report: "
                    "`runs/capstone/report/report.md`."
                ),
            ]
        )
    mo.vstack([_intro, _found])
    return


@app.cell(hide_code=True)
def _():
    # The chip's figures come from the kept record, never from this machine (a CPU's step
    # time says nothing about a TPU's).
    _f = records.latest("byte_transformer_mfu").figures
    _rows = [
        {
            "config": "the defaults above (float32, d_model 256)",
            "step (ms)": _f["default_step_ms"],
            "MFU, causal halved": f"{_f['default_mfu']:.1%}",
            "MFU, full T x T (as MaxText counts)": "",
        },
        {
            "config": "preset=tpu-v5e (bf16, d_model 2048, T 2048)",
            "step (ms)": _f["tpu_v5e_step_ms"],
            "MFU, causal halved": f"{_f['tpu_v5e_mfu']:.1%}",
            "MFU, full T x T (as MaxText counts)": f"{_f['tpu_v5e_mfu_attention_not_halved']:.1%}",
        },
    ]
    mo.vstack(
        [
            mo.md(
                "### Measured on TPU v5e: the step's MFU and what bounds it\n\n"
                "`tpu_scripts/byte_transformer_tpu.py --preset tpu-v5e --compare-default "
                "--profile` on one v5e chip: median of 20 steps; MFU = model FLOPs (causal "
                "attention halved) over the median step and the chip's bf16 peak."
            ),
            lab.table(_rows, caption="TPU v5e, one chip (from the record)"),
            mo.md(
                f"Its profile by HLO category: the weights' matmuls take "
                f"{_f['profile_matmul_share']:.1%} of the step at "
                f"{_f['profile_matmul_fraction_of_peak']:.1%} of the peak; the Pallas flash "
                f"kernel takes {_f['profile_attention_share']:.1%} at only "
                f"{_f['profile_attention_fraction_of_peak']:.1%}; elementwise work "
                f"{_f['profile_elementwise_share']:.1%}. At T = 2048 attention, not the "
                f"matmuls, bounds the MFU. Record: {records.cite('byte_transformer_mfu')}."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    from capstones.byte_transformer import chip_run_record as _chip
    from core.perf.records import cite as _cite

    # A training run on the chip, read from its kept record (never from this machine).
    _record = _chip.latest()
    _f = _record.figures
    _curve = pd.DataFrame(_chip.loss_curve_rows(_record))
    _first = pd.DataFrame(_chip.first_losses_rows(_record))
    _curve_chart = (
        alt.Chart(_curve, title=f"training loss on one TPU v5e chip, {_f['steps']} steps")
        .mark_line()
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("loss:Q", title="loss (nats per byte)"),
            tooltip=["step", alt.Tooltip("loss:Q", format=".4f")],
        )
        .properties(width=420, height=220)
    )
    _first_chart = (
        alt.Chart(_first, title="the first losses: CPU float32 vs the chip at DEFAULT")
        .mark_line()
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("loss:Q", title="loss (nats per byte)"),
            color=alt.Color("machine:N", title="machine"),
            strokeDash=alt.StrokeDash("machine:N", title="machine"),
            tooltip=["machine", "step", alt.Tooltip("loss:Q", format=".6f")],
        )
        .properties(width=420, height=220)
    )
    _agreement = (
        f"max relative difference {_f['cpu_vs_tpu_default_max_rel_diff']:.2g} (step "
        f"{_f['cpu_vs_tpu_default_at_step']}) against the tolerance "
        f"{_f['cpu_vs_tpu_default_tolerance']:.2g}: "
        f"{_f['cpu_vs_tpu_default_tolerance_reason']}"
    )
    _missing = [
        what
        for key, what in (
            ("resume_error", "the fresh-process resume"),
            ("cpu_vs_tpu_highest_error", "the HIGHEST comparison"),
            ("decode_error", "KV-cache decode"),
        )
        if key in _f
    ]
    _resume = (
        f" Resumed in a fresh process from the checkpoint of step {_f['resume_step']}, the "
        f"next step's loss was {_f['resume_next_loss']} against "
        f"{_f['uninterrupted_next_loss']} uninterrupted (identical: {_f['resume_identical']})."
        if "resume_step" in _f
        else ""
    )
    _decode = pd.DataFrame(_chip.decode_rows(_record))
    _contexts = sorted(set(_decode["context"])) if len(_decode) else []
    _decode_text = "; ".join(
        f"at {_ctx} bytes of context the cache is "
        f"{_f[f'decode_ctx{_ctx}_speedup']:.2f}x as fast, greedy output identical: "
        f"{_f[f'decode_ctx{_ctx}_greedy_identical']}"
        for _ctx in _contexts
    )
    _decode_chart = (
        alt.Chart(_decode, title="greedy decode on the chip: KV cache vs recompute")
        .mark_bar()
        .encode(
            x=alt.X("path:N", title=None),
            y=alt.Y("tokens_per_s:Q", title="tokens per second"),
            color=alt.Color("path:N", title="path"),
            column=alt.Column("context:O", title="context (bytes)"),
            tooltip=["context", "path", alt.Tooltip("tokens_per_s:Q", format=",.0f")],
        )
        .properties(width=140, height=200)
    )
    mo.vstack(
        [
            mo.md(
                "### Measured on TPU v5e: this model trained on the chip\n\n"
                "`tpu_scripts/byte_transformer_run_tpu.py` trains these defaults (float32) on "
                f"one chip: final loss {_f['final_train_loss']:.3f}, held-out "
                f"{_f['final_heldout_bpb']:.2f} bits per byte. On a TPU a float32 matmul at "
                "DEFAULT precision is one bfloat16 pass, so the chip's losses leave the CPU's "
                f"by rounding, not by a bug: {_agreement}.{_resume}"
                + (
                    f" Not in this record (their parts ran out of time): {', '.join(_missing)}."
                    if _missing
                    else ""
                )
            ),
            mo.hstack([_curve_chart, _first_chart]),
            mo.md(
                "KV-cache decode on the chip: greedy bytes from the trained model, each new "
                "byte with the cache against recomputing the whole prefix (the cache's gain "
                f"grows with the context): {_decode_text}."
            )
            if _contexts
            else mo.md(""),
            _decode_chart if _contexts else mo.md(""),
            mo.md(f"Record: {_cite('byte_transformer_chip_run')}."),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    # The chip run from its kept record; the compressors recomputed here, on this machine's
    # copy of the very files the run held out (the record's corpus hashes say whether they are).
    _q = records.latest("byte_transformer_quality").figures
    _corpus = data.load_corpus(config_lib.Config())
    _live = compressors.compressor_rates(_corpus.heldout)
    _kept = dict(zip(_q["compressors"], _q["compressor_bpb"], strict=True))
    _lines = {**_live, "xz -9e after training files": _kept["xz -9e after training files"]}
    _curve = pd.DataFrame(
        {"step": _q["heldout_bpb_steps"], "held-out bits per byte": _q["heldout_bpb"]}
    )
    _rules = pd.DataFrame(
        [{"compressor": name, "bits per byte": rate} for name, rate in _lines.items()]
    )
    _chart = (
        alt.Chart(_curve)
        .mark_line(point=True, color="#222222", strokeWidth=3)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y(
                "held-out bits per byte:Q",
                title="held-out bits per byte (lower is better)",
                scale=alt.Scale(domain=[1.2, 3.6]),
            ),
            tooltip=["step", alt.Tooltip("held-out bits per byte:Q", format=".3f")],
        )
        + alt.Chart(_curve.tail(1))
        .mark_text(text="this model", align="left", dx=6, dy=-10, color="#222222")
        .encode(x="step:Q", y="held-out bits per byte:Q")
        + alt.Chart(_rules)
        .mark_rule(strokeDash=[4, 3])
        .encode(
            y="bits per byte:Q",
            color=alt.Color("compressor:N", title="compressor, same files"),
            tooltip=["compressor", alt.Tooltip("bits per byte:Q", format=".3f")],
        )
    ).properties(
        title="preset=quality-v5e on one v5e chip, against compressors", width=520, height=260
    )
    _best_compressor = min(_lines, key=_lines.get)
    mo.vstack(
        [
            mo.md(
                "### A model worth keeping: `preset=quality-v5e`\n\n"
                "A language model's held-out loss in bits per byte is a compression rate: "
                "an arithmetic coder driven by it would store the held-out files in that many "
                f"bits. After {_q['steps']:,} steps ({_q['tokens_seen'] / 1e6:.0f} M bytes "
                f"read, {_q['tokens_seen'] / _q['train_bytes']:.0f} passes over the "
                f"{_q['train_bytes'] / 1e6:.2f} MB of training files), the chip's model "
                f"stores the {_q['heldout_files']} held-out files in "
                f"**{_q['final_heldout_bpb']:.2f} bits per byte**; the best compressor here, "
                f"{_best_compressor}, needs {_lines[_best_compressor]:.2f}. The dashed lines "
                "are computed now, on this machine's copy of the same files (xz given every "
                "training file first is the record's: it compresses 4 MB twice)."
            ),
            _chart,
            mo.md(
                f"The run's command took {_q['command_wall_s']:.0f} s on the chip, its first "
                f"step (the compile) {_q['first_step_s']:.0f} s, a step "
                f"{_q['median_step_ms']:.1f} ms ({_q['mfu_percent']:.1f}% MFU). Record: "
                f"{records.cite('byte_transformer_quality')}; how the preset was chosen: "
                f"{records.cite('byte_transformer_sweep')}."
            ),
        ]
    )
    return


@app.cell
def test_capstone_checks(check):
    check.assert_passed()
    return


@app.cell
def test_cache_checks(cache_check):
    cache_check.assert_passed()
    return


if __name__ == "__main__":
    app.run()
