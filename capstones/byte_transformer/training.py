"""Train, resume and evaluate the byte Transformer (the ``train`` and ``eval`` commands).

A run directory holds everything about one run:

    DIR/config.json      the Config (identity fields may not change on resume)
    DIR/corpus.json      which files were trained on / held out, with their sha256
    DIR/metrics.jsonl    one JSON object per step: step, loss, tokens, step_time_s,
                         grad_norm, tokens_per_s, elapsed_s (+ heldout_loss, heldout_bpb
                         every eval_every steps; documents.MetricsRecord,
                         docs/schemas/metrics_record.schema.json)
    DIR/checkpoints/     core.state.checkpoint (Orbax + sha256 manifests): params, both Adam
                         moments and count, step, dropout key; the data-stream position
                         and the config beside them
    DIR/mlflow.db        MLflow store: one run per training process (segment)
    DIR/eval.json        written by ``eval``
    DIR/previous/        the history of earlier starts (rundir.py): a run that finds no
                         verified checkpoint starts from step 0 and first moves the
                         metrics and results of the earlier start here, never deletes them

``train`` validates everything before its first write (config, the saved config and
corpus of an existing run, that the data can be prepared, that run_dir is writable): a
refused start leaves nothing behind. Commands that read a run refuse one that is not
there (rundir.require_run).

The training state is a plain pytree: {"params", "opt_state", "step", "rng": {"dropout"}}
(the dropout key as raw uint32 key data, so it checkpoints like any array). One step:
split the dropout key, loss and gradients of the valid-token loss, AdamW with global-norm
clipping. Everything the next step depends on is in the checkpoint, so a run killed at any
moment and resumed in a fresh process repeats the uninterrupted run's losses bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import pathlib
import signal
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from capstones.byte_transformer import args, compressors, data, documents, rundir
from capstones.byte_transformer import config as config_lib
from core.documents import write_text_atomic
from core.kernels import flash_attention
from core.lm import causal_blocked, transformer
from core.lm import corpus as corpus_lib
from core.state import checkpoint

CONFIG_FILE = rundir.CONFIG_FILE
CORPUS_FILE = rundir.CORPUS_FILE
METRICS_FILE = rundir.METRICS_FILE
CHECKPOINTS = rundir.CHECKPOINTS
EVAL_FILE = rundir.EVAL_FILE


# --- model and state ---------------------------------------------------------------------


def build_model(config: config_lib.Config) -> transformer.TinyLM:
    """A freshly initialised TinyLM (every weight drawn from key(config.seed))."""
    return transformer.TinyLM(config.model_config(), jax.random.key(config.seed))


@functools.lru_cache(maxsize=8)
def _graphdef(config: config_lib.Config):
    """The model's structure (no weights): nnx.merge(graphdef, params) rebuilds a model.

    Built eagerly even when first asked for under a trace (jit(loss_fn) before any
    make_train_step): the initialisers draw their weights with numpy, which cannot read a
    traced array, so the build runs under ensure_compile_time_eval (real numbers)."""
    with jax.ensure_compile_time_eval():
        graphdef, _ = nnx.split(build_model(config.program_key()))
    return graphdef


def model_from_params(config: config_lib.Config, params: dict) -> transformer.TinyLM:
    """A TinyLM holding ``params`` (a pure dict, as in the training state)."""
    return nnx.merge(_graphdef(config.program_key()), params)


def learning_rate_schedule(config: config_lib.Config) -> float | optax.Schedule:
    """The learning rate by step (config_lib.LR_SCHEDULES): a plain float for a constant
    rate without warmup (the optimizer state then holds no schedule count), else an optax
    schedule: linear warmup from 0 over warmup_steps, then constant or a cosine decay to
    final_lr_fraction x learning_rate at schedule_steps (0: config.steps)."""
    peak, warmup = config.learning_rate, config.warmup_steps
    if config.lr_schedule == "constant":
        if warmup == 0:
            return peak
        return optax.join_schedules(
            [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup]
        )
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=peak,
        warmup_steps=warmup,
        decay_steps=max(config.schedule_steps or config.steps, warmup + 1),
        end_value=peak * config.final_lr_fraction,
    )


def make_optimizer(config: config_lib.Config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.clip_norm),
        optax.adamw(
            learning_rate_schedule(config), b2=config.adam_b2, weight_decay=config.weight_decay
        ),
    )


def init_state(config: config_lib.Config) -> dict:
    """Step-0 training state: params, AdamW state, step, dropout key data."""
    params = nnx.to_pure_dict(nnx.state(build_model(config), nnx.Param))
    dropout_key = jax.random.fold_in(jax.random.key(config.seed), 1_000_003)
    return {
        "params": params,
        "opt_state": make_optimizer(config).init(params),
        "step": jnp.asarray(0, jnp.int32),
        "rng": {"dropout": jax.random.key_data(dropout_key)},
    }


def abstract_state(config: config_lib.Config):
    """ShapeDtypeStructs (with the device sharding) of the state: what a restore fills in."""
    return checkpoint.abstract_like(init_state(config))


def flash_layout(config: config_lib.Config) -> str:
    """The flash kernel's layout for this model, config.flash_layout: "BHTD" (q, k, v
    transposed around the kernel) or "BTHD" (read in the projections' (B, T, H, K) layout,
    heads of 128 lanes; Config checks that). flash_attention.LAYOUTS."""
    return config.flash_layout


def flash_attention_fn(config: config_lib.Config, segment_ids_BT) -> Callable:
    """The model's attention core (transformer.AttentionFn) as the flash kernel
    (core.kernels.flash_attention) with the batch's segment ids, causal, config.flash_blocks,
    in flash_layout(config).

    The mask the model passes is tokenizer.segment_mask_BTS(segment_ids_BT, causal=True),
    built from these same ids; the kernel rebuilds it block by block in VMEM from the ids, so
    the (B, 1, T, T) mask is never read (and XLA drops it)."""
    block_q, block_k = config.flash_blocks
    layout = flash_layout(config)
    kernel = functools.partial(
        flash_attention.flash_attention,
        causal=True,
        block_q=block_q,
        block_k=block_k,
        segment_ids_BT=segment_ids_BT,
        layout=layout,
    )

    def attend(q_BTHK, k_BSHK, v_BSHK, mask):
        del mask  # the same mask, rebuilt in the kernel from segment_ids_BT (see above)
        if layout == "BTHD":
            return kernel(q_BTHK, k_BSHK, v_BSHK)
        to_bhtk = functools.partial(jnp.transpose, axes=(0, 2, 1, 3))
        return to_bhtk(kernel(to_bhtk(q_BTHK), to_bhtk(k_BSHK), to_bhtk(v_BSHK)))

    return attend


def attention_core(config: config_lib.Config, batch: dict, dense_attention: bool = False):
    """The attention_fn of the training step: config.attention ("blocked" where T allows, else
    the dense default; "dense"; "flash"), or the dense core with ``dense_attention``."""
    if dense_attention or config.attention == "dense":
        return None
    if config.attention == "flash":
        return flash_attention_fn(config, batch["segment_ids_BT"])
    return causal_blocked.training_attention_fn(batch["tokens_BT"].shape[1])


def loss_fn(
    config: config_lib.Config, params: dict, batch: dict, dropout_key, dense_attention=False
):
    """(mean valid-token loss, valid-token count) with dropout from ``dropout_key``; the
    attention core is config.attention's (attention_core: by default the causal blocked one,
    which skips the key blocks above the diagonal where T allows), or with
    ``dense_attention`` the dense core (the bench's before/after comparison)."""
    model = model_from_params(config, params)
    logits = model(
        batch["tokens_BT"],
        batch["segment_ids_BT"],
        batch["positions_BT"],
        dropout_key=dropout_key,
        attention_fn=attention_core(config, batch, dense_attention),
    )
    return transformer.token_loss(logits, batch["targets_BT"], batch["weights_BT"])


def train_step(
    config: config_lib.Config, state: dict, batch: dict, loss: Callable = loss_fn
) -> tuple[dict, dict]:
    """One AdamW step (pure: state in, state out) and its metrics. ``loss(config, params,
    batch, dropout_key) -> (mean loss, valid-token count)`` (default loss_fn; plan.py passes
    a rematerialized variant of the same loss)."""
    key = jax.random.wrap_key_data(state["rng"]["dropout"])
    key, dropout_key = jax.random.split(key)
    (loss_value, count), grads = jax.value_and_grad(
        lambda p: loss(config, p, batch, dropout_key), has_aux=True
    )(state["params"])
    updates, opt_state = make_optimizer(config).update(grads, state["opt_state"], state["params"])
    new_state = {
        "params": optax.apply_updates(state["params"], updates),
        "opt_state": opt_state,
        "step": state["step"] + 1,
        "rng": {"dropout": jax.random.key_data(key)},
    }
    return new_state, {"loss": loss_value, "tokens": count, "grad_norm": optax.tree.norm(grads)}


def make_train_step(config: config_lib.Config, dense_attention: bool = False) -> Callable:
    """jit(train_step) for this config: (state, batch) -> (state, metrics). ``dense_attention``:
    the same step with the dense attention core (loss_fn's), for before/after comparisons."""
    return _train_step_program(config.program_key(), dense_attention)


@functools.lru_cache(maxsize=8)
def _train_step_program(config: config_lib.Config, dense_attention: bool) -> Callable:
    _graphdef(config)  # build the structure eagerly, never under a trace
    if not dense_attention:
        return jax.jit(functools.partial(train_step, config))
    loss = functools.partial(loss_fn, dense_attention=True)
    return jax.jit(functools.partial(train_step, config, loss=loss))


# --- evaluation --------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _eval_program(config: config_lib.Config):
    _graphdef(config)

    def summed(params, batch):
        loss, count = loss_fn(config, params, batch, None)
        return loss * count, count

    return jax.jit(summed)


def evaluate(config: config_lib.Config, params: dict, batches: list[dict]) -> dict:
    """Held-out loss (nats per byte, valid tokens only) and bits per byte over ``batches``."""
    if not batches:
        raise ValueError("no held-out batches: raise max_files or lower heldout_fraction")
    total, count = 0.0, 0.0
    program = _eval_program(config.program_key())
    for batch in batches:
        batch_total, batch_count = program(params, batch)
        total += float(batch_total)
        count += float(batch_count)
    loss = total / max(count, 1.0)
    return {"loss": loss, "bits_per_byte": loss / math.log(2), "tokens": int(count)}


# --- run directory -----------------------------------------------------------------------


def saved_config(run_dir: pathlib.Path) -> config_lib.Config | None:
    """The config.json of ``run_dir`` (None if it has none); UsageError if unreadable."""
    path = pathlib.Path(run_dir) / CONFIG_FILE
    if not path.exists():
        return None
    try:
        return config_lib.Config.load(path)
    except (OSError, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise args.UsageError(f"{path} is not a valid config ({exc}); use a new run_dir") from None


def _check_identity(run_dir: pathlib.Path, saved: config_lib.Config, wanted: config_lib.Config):
    differences = saved.identity_differences(wanted)
    if differences:
        raise args.UsageError(
            f"{run_dir} was trained with a different config ({'; '.join(differences)}); "
            "use a new run_dir, or change only " + ", ".join(sorted(config_lib.RUNTIME_FIELDS))
        )


def run_config(run_dir: pathlib.Path, overrides: dict) -> config_lib.Config:
    """The run's config: the saved one (if any) with ``overrides`` applied. Changing an
    identity field of an existing run is refused (its checkpoints belong to the old one)."""
    saved = saved_config(run_dir)
    if saved is None:
        config = args.make_config(config_lib.Config(), overrides)
        if config.lr_schedule == "cosine" and config.schedule_steps == 0:
            # the curve is fixed at the first start: a resumption asking for more steps
            # continues it rather than stretching it (schedule_steps is an identity field)
            config = dataclasses.replace(config, schedule_steps=config.steps)
        return config
    wanted = args.make_config(saved, overrides)
    _check_identity(run_dir, saved, wanted)
    return wanted


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """metrics.jsonl as a list (a torn last line from a killed process is skipped)."""
    path = pathlib.Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except (ValueError, RecursionError):  # torn by a kill (or nothing json reads back)
            continue
    return records


def _truncate_metrics(path: pathlib.Path, last_step: int) -> None:
    """Keep the records of steps <= last_step (the steps after it will be trained again)."""
    kept = [r for r in read_metrics(path.parent) if r.get("step", 0) <= last_step]
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))


def _check_corpus(run_dir: pathlib.Path, identity: dict, record: bool = True) -> None:
    """Refuse a corpus other than the one ``run_dir`` recorded; record it if none was
    (``record`` False: only check, write nothing)."""
    path = run_dir / CORPUS_FILE
    if path.exists():
        try:
            saved = documents.load(path, documents.CorpusIdentity)
        except documents.DocumentError as exc:
            raise args.UsageError(f"{exc}; use a new run_dir") from None
        recorded = {key: saved[key] for key in ("train_sha256", "heldout_sha256")}
        for key, value in recorded.items():
            if value != identity[key]:
                raise args.UsageError(
                    f"the corpus differs from the one {run_dir} was trained on ({key} "
                    f"{str(value)[:12]} vs {identity[key][:12]}: another Python version?); "
                    "use a new run_dir"
                )
    elif record:
        documents.write(path, documents.CorpusIdentity, identity)


@dataclasses.dataclass
class _Prepared:
    corpus: corpus_lib.Corpus
    stream: data.DocumentStream
    heldout: list[dict]


def prepare(config: config_lib.Config, run_dir: str | os.PathLike) -> _Prepared:
    """Everything ``train`` checks before its first write, writing nothing: run_dir can be
    written, an existing run's saved config has the same identity and its corpus the same
    hashes, and the corpus, the training stream and the held-out batches can be built.
    UsageError (a message, exit status 2 in the CLI) naming the problem otherwise."""
    run_dir = pathlib.Path(run_dir).absolute()
    rundir.check_writable(run_dir)
    saved = saved_config(run_dir) if run_dir.is_dir() else None
    if saved is not None:
        _check_identity(run_dir, saved, config)
    try:
        corpus = data.load_corpus(config)
        stream = data.training_stream(config, corpus)
        heldout = data.heldout_batches(config, corpus)
    except (OSError, ValueError) as exc:
        raise args.UsageError(f"the training data cannot be prepared: {exc}") from None
    if not heldout:
        raise args.UsageError(
            "no held-out batches (the held-out files are empty): raise max_files or "
            "heldout_fraction"
        )
    _check_corpus(run_dir, corpus.identity(), record=False)
    return _Prepared(corpus, stream, heldout)


# --- the training loop -------------------------------------------------------------------


@dataclasses.dataclass
class TrainResult:
    start_step: int  # 0 for a fresh run, else the restored step
    last_step: int
    preempted: bool  # stopped by SIGTERM (saved, exited cleanly)
    records: list[dict]  # this process's metrics records
    state: dict
    data_state: dict


class _Preemption:
    """SIGTERM sets a flag; the loop saves at the end of the current step and returns."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame):
        self.requested = True

    @contextlib.contextmanager
    def installed(self):
        try:
            previous = signal.signal(signal.SIGTERM, self)
        except ValueError:  # not the main thread (e.g. inside a server): no handler
            yield self
            return
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)


def _format_eta(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def train(
    config: config_lib.Config,
    run_dir: str | os.PathLike,
    log_mlflow: bool = True,
    emit: Callable[[dict], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train ``run_dir`` up to config.steps (resuming from its newest verified checkpoint).

    ``emit(event)`` receives machine-readable events ("fresh" (with "history_moved_to"
    when an earlier start's history was moved aside), "resumed" with a digest per
    restored piece, "step", "committed", "preempted", "done"); ``progress(line)``
    human-readable progress lines.

    Nothing is written before ``prepare`` has validated the start (UsageError otherwise);
    a start from scratch over an earlier start's history moves it aside first (rundir.py).
    """
    emit = emit or (lambda event: None)
    progress = progress or (lambda line: None)
    run_dir = pathlib.Path(run_dir).absolute()
    prepared = prepare(config, run_dir)
    corpus, stream, heldout = prepared.corpus, prepared.stream, prepared.heldout
    # Committed to its device, as a restored state is (Orbax places each leaf): otherwise a
    # resumed run would lower and compile the same train step and eval programs again.
    state = jax.tree.map(lambda leaf: jax.device_put(leaf, leaf.sharding), init_state(config))
    step_fn = make_train_step(config)
    run_dir.mkdir(parents=True, exist_ok=True)  # the first write

    ckpt = checkpoint.Checkpointer(
        run_dir / CHECKPOINTS,
        save_every=config.ckpt_every,
        max_to_keep=config.max_to_keep,
        async_save=config.async_ckpt,
        on_commit=lambda step: emit({"event": "committed", "step": step}),
    )
    with ckpt:
        restored = ckpt.restore_latest(checkpoint.abstract_like(state))
        start, moved_to = 0, None
        if restored is not None:
            start, state = restored.step, restored.state
            stream.set_state(restored.data_state["stream"])
            emit(
                {
                    "event": "resumed",
                    "step": start,
                    "digest": checkpoint.state_digest(state, stream.get_state()),
                    "rejected": [step for step, _ in ckpt.rejected],
                }
            )
            progress(f"resumed from step {start} ({run_dir / CHECKPOINTS})")
        else:
            fresh = {"event": "fresh", "digest": checkpoint.state_digest(state, stream.get_state())}
            rotated = rundir.rotate_history(run_dir)
            if rotated is not None:
                moved_to, names = rotated
                fresh["history_moved_to"] = str(moved_to)
                progress(
                    f"starting from step 0 (no verified checkpoint): the earlier history "
                    f"({', '.join(names)}) was moved to {moved_to}"
                )
            emit(fresh)
        checkpoint.write_json_atomic(run_dir / CONFIG_FILE, config.to_dict())
        _check_corpus(run_dir, corpus.identity())  # records it (checked in prepare)
        metrics_path = run_dir / METRICS_FILE
        _truncate_metrics(metrics_path, start)

        records: list[dict] = []
        preemption = _Preemption()
        began = time.perf_counter()
        step, stop_now = start, False
        with preemption.installed(), open(metrics_path, "a") as metrics_file:
            for step in range(start + 1, config.steps + 1):
                batch = stream.next_batch()
                tick = time.perf_counter()
                state, metrics = step_fn(state, batch)
                loss = float(metrics["loss"])  # waits for the step: the time below is real
                step_time = time.perf_counter() - tick
                tokens = int(metrics["tokens"])
                record = {
                    "step": step,
                    "loss": loss,
                    "tokens": tokens,
                    "step_time_s": step_time,
                    "grad_norm": float(metrics["grad_norm"]),
                    "tokens_per_s": tokens / step_time,
                    "elapsed_s": time.perf_counter() - began,
                }
                if step % config.eval_every == 0 or step == config.steps:
                    evaluation = evaluate(config, state["params"], heldout)
                    record["heldout_loss"] = evaluation["loss"]
                    record["heldout_bpb"] = evaluation["bits_per_byte"]
                metrics_file.write(documents.json_line(documents.MetricsRecord, record))
                metrics_file.flush()
                records.append(record)
                emit({"event": "step", "step": step, "loss": loss})
                # read the flag once: a SIGTERM landing after this line is honoured after
                # the next step, never by a break past a step that was not saved
                stop_now = preemption.requested
                final = step == config.steps or stop_now
                ckpt.save(
                    step,
                    state,
                    {"stream": stream.get_state()},
                    config.to_dict(),
                    {"loss": loss},
                    force=final,
                )
                if step % config.log_every == 0 or final or step == start + 1:
                    done = step - start
                    rate = sum(r["tokens"] for r in records) / (time.perf_counter() - began)
                    eta = (config.steps - step) * (time.perf_counter() - began) / done
                    held = (
                        f" held-out {record['heldout_loss']:.3f}"
                        if "heldout_loss" in record
                        else ""
                    )
                    progress(
                        f"step {step}/{config.steps} loss {loss:.3f}{held} "
                        f"{rate:,.0f} tok/s eta {_format_eta(eta)}"
                        + (" (includes compile)" if step == start + 1 else "")
                    )
                if stop_now:
                    break
        ckpt.wait_until_finished()
    preempted = stop_now
    emit({"event": "preempted" if preempted else "done", "step": step})
    if preempted:
        progress(f"SIGTERM: saved step {step} and stopped; run the same command to resume")
    if log_mlflow and records:
        _log_mlflow(run_dir, config, corpus.identity(), start, records, preempted, moved_to)
    return TrainResult(start, step, preempted, records, state, stream.get_state())


def _log_mlflow(run_dir, config, corpus_identity, start, records, preempted, moved_to) -> None:
    from core.state import tracking

    metrics: dict[str, dict[int, float]] = {}
    for record in records:
        for key in ("loss", "step_time_s", "tokens_per_s", "grad_norm", "heldout_loss"):
            if key in record:
                metrics.setdefault(key, {})[record["step"]] = record[key]
    tracking.Tracker(run_dir).log_run(
        f"steps {start + 1}-{records[-1]['step']}",
        params=config.to_dict(),
        metrics=metrics,
        tags={
            "data.train_sha256": corpus_identity["train_sha256"],
            "data.heldout_sha256": corpus_identity["heldout_sha256"],
            "resumed_from_step": str(start),
            "earlier_history_moved_to": str(moved_to or ""),
            "preempted": str(preempted),
            "git.revision": tracking.git_revision(),
        },
    )


# --- loading a trained model ---------------------------------------------------------------


def load_state(run_dir: str | os.PathLike) -> tuple[config_lib.Config, checkpoint.Restored]:
    """The config and the newest verified checkpoint of a run.

    rundir.MissingRun (a UsageError and a FileNotFoundError) when there is no such run or
    no verified checkpoint yet, UsageError when every checkpoint fails verification;
    both say what to do, and nothing is created or moved."""
    run_dir = rundir.require_run(run_dir)
    config = saved_config(run_dir)
    try:
        with checkpoint.Checkpointer(run_dir / CHECKPOINTS, async_save=False) as ckpt:
            restored = ckpt.restore_latest(abstract_state(config), quarantine=False)
    except checkpoint.CorruptCheckpointError as exc:
        raise args.UsageError(
            f"run_dir={run_dir}: no checkpoint can be used ({exc}); nothing was loaded"
        ) from None
    if restored is None:
        raise rundir.MissingRun(
            f"run_dir={run_dir} has no verified checkpoint yet (every step lacks its manifest: "
            f"the saves never finished); resume training to save one: "
            + rundir.TRAIN_COMMAND.format(run_dir)
        )
    return config, restored


def load_model(run_dir: str | os.PathLike) -> tuple[config_lib.Config, transformer.TinyLM]:
    """(config, model with the newest verified checkpoint's parameters)."""
    config, restored = load_state(run_dir)
    return config, model_from_params(config, restored.state["params"])


# --- commands ------------------------------------------------------------------------------


def _print_event(event: dict) -> None:
    print(json.dumps(event), flush=True)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def train_command(parsed: args.Parsed) -> int:
    run_dir = pathlib.Path(parsed["run_dir"])
    if not parsed["run_dir"]:
        raise args.UsageError("run_dir is empty; give the directory to train in")
    config = run_config(run_dir, parsed.overrides)
    try:
        result = train(
            config,
            run_dir,
            log_mlflow=parsed["mlflow"],
            emit=_print_event if parsed["events"] else None,
            progress=_stderr,
        )
    except checkpoint.CorruptCheckpointError as exc:
        raise args.UsageError(
            f"refused: {exc}. The damaged steps are kept in {run_dir / CHECKPOINTS}; to "
            "start from scratch, move that directory aside (nothing was written)"
        ) from None
    if not parsed["events"] and result.records:
        last = result.records[-1]
        print(
            f"trained steps {result.start_step + 1}-{result.last_step}: loss {last['loss']:.4f}; "
            f"metrics in {run_dir / METRICS_FILE}"
        )
        if "heldout_bpb" in last:
            print(compressors.standing(config, last["heldout_bpb"]))
    return 0


def eval_command(parsed: args.Parsed) -> int:
    run_dir = rundir.require_run(parsed["run_dir"])
    config, restored = load_state(run_dir)
    corpus = data.load_corpus(config)
    _check_corpus(run_dir, corpus.identity(), record=False)
    batches = data.heldout_batches(config, corpus)
    result = evaluate(config, restored.state["params"], batches)
    result.update(
        step=restored.step,
        heldout_files=len(corpus.heldout),
        heldout_sha256=corpus.heldout_sha256,
        train_files=len(corpus.train),
        overlap_files=sorted({d.name for d in corpus.train} & {d.name for d in corpus.heldout}),
        uniform_bits_per_byte=8.0,
    )
    documents.write(run_dir / EVAL_FILE, documents.EvalResult, result)
    print(
        f"step {result['step']}: held-out loss {result['loss']:.4f} nats/byte = "
        f"{result['bits_per_byte']:.4f} bits/byte over {result['tokens']} bytes of "
        f"{result['heldout_files']} files never trained on (uniform guess: 8 bits/byte)"
    )
    return 0


RUN_DIR = args.Option(str, args.REQUIRED, "the run directory")
COMMANDS = {
    "train": args.Command(
        "Train (or resume) the byte Transformer on Python's standard library. Writes "
        "DIR/metrics.jsonl, checkpoints every ckpt_every steps, logs to MLflow (DIR/mlflow.db). "
        "Run it again on the same DIR to resume; SIGTERM saves and exits cleanly.",
        {
            "run_dir": RUN_DIR,
            "mlflow": args.Option(bool, True, "log this segment to MLflow in DIR"),
            "events": args.Option(bool, False, "print one JSON event per line on stdout"),
        },
        train_command,
    ),
    "eval": args.Command(
        "Held-out loss and bits per byte of the newest checkpoint, on files never trained on.",
        {"run_dir": RUN_DIR},
        eval_command,
        config_overrides=False,
    ),
}
