"""A tiny resumable trainer: the subject of the checkpoint-recovery lessons and tests.

A two-layer MLP with dropout learns generated labels (core.data.make_columns) with
optax Adam; batches come from a Grain pipeline (core.data.grain_dataset) and the run is
saved with core.state.checkpoint.Checkpointer. Everything the next update depends on is in the
checkpoint (parameters, both Adam moments and the count, the step, the dropout key, the
Grain iterator position, the config), so a run killed at any moment and resumed in a fresh
process continues with exactly the losses of the uninterrupted run (bit for bit on CPU).

Command line (one JSON event per line on stdout, flushed, so a parent can watch and kill):

    python -m core.state.recovery_demo --checkpoint-dir DIR --steps 40 --save-every 5 \
        [--async-save] [--no-resume] [--kill-after-save-call STEP] [--digests] [seed=3 hidden=16]

Events: {"event": "fresh"} or {"event": "resumed", "step", "digest"}; {"event": "step",
"step", "loss"}; {"event": "save", "step"} (save call returned); {"event": "committed",
"step"} (Orbax committed it and its manifest is written); {"event": "state", "step",
"digest"} (with --digests); {"event": "done", "step"}.

Dimension glossary: B batch, F features, H hidden, C classes.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core import data
from core.state import checkpoint


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What defines the run: restoring under a different config is refused."""

    seed: int = 0
    examples: int = 48
    features: int = 8
    hidden: int = 16
    classes: int = 4
    batch_size: int = 8
    learning_rate: float = 0.01
    dropout: float = 0.1

    def __post_init__(self):
        for name in ("examples", "features", "hidden", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.classes < 2:
            raise ValueError(f"classes must be >= 2, got {self.classes}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_overrides(cls, overrides: Sequence[str]) -> TrainConfig:
        """``["seed=3", "hidden=32"]`` on top of the defaults."""
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        values = {}
        for item in overrides:
            name, sep, text = item.partition("=")
            if not sep or name not in fields:
                raise ValueError(
                    f"config override {item!r}: expected key=value with key in {sorted(fields)}"
                )
            values[name] = float(text) if fields[name] == "float" else int(text)
        return cls(**values)


def columns(config: TrainConfig) -> dict[str, np.ndarray]:
    """The run's data set (generated from config.seed)."""
    return data.make_columns(config.seed, config.examples, config.features, config.classes)


def pipeline(config: TrainConfig):
    """The Grain MapDataset of padded batches, repeating forever."""
    contract = data.classification_contract(config.features, config.classes)
    return data.grain_dataset(
        data.ColumnSource(columns(config)), contract, config.batch_size, seed=config.seed
    )


def _program_key(config: TrainConfig) -> TrainConfig:
    # The learning rate is a run-time argument, not part of the compiled program: a
    # learning-rate sweep compiles init and train_step once.
    return dataclasses.replace(config, learning_rate=1.0)


def init_state(config: TrainConfig) -> dict:
    """Step-0 state: params, Adam state, step, dropout key (raw uint32 key data)."""
    return _init_state_fn(_program_key(config))()


@functools.lru_cache(maxsize=16)
def _init_state_fn(config: TrainConfig) -> Callable:
    # One compiled program instead of a dozen small eager ones (each compiles on first use).
    return jax.jit(functools.partial(_init_state, config))


def _init_state(config: TrainConfig) -> dict:
    init_key, dropout_key = jax.random.split(jax.random.key(config.seed + 1))
    k1, k2 = jax.random.split(init_key)
    params = {
        "w1_FH": jax.random.normal(k1, (config.features, config.hidden)) / np.sqrt(config.features),
        "b1_H": jnp.zeros((config.hidden,)),
        "w2_HC": jax.random.normal(k2, (config.hidden, config.classes)) / np.sqrt(config.hidden),
        "b2_C": jnp.zeros((config.classes,)),
    }
    return {
        "params": params,
        "opt_state": _adam().init(params),
        "step": jnp.asarray(0, jnp.int32),
        "rng": {"dropout": jax.random.key_data(dropout_key)},
    }


def abstract_state(config: TrainConfig):
    """ShapeDtypeStructs (with shardings) of the state: what a restore fills in."""
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shapes = jax.eval_shape(functools.partial(_init_state, _program_key(config)))
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device), shapes)


def _adam():
    """Adam's moment estimates; ``optax.adam(lr)`` is this followed by scaling by ``-lr``."""
    import optax

    return optax.scale_by_adam()


def loss_fn(params, batch, dropout_key, dropout_rate: float):
    """Masked mean cross-entropy of the MLP with (inverted) dropout on the hidden layer."""
    import optax

    h_BH = jax.nn.relu(batch["x"] @ params["w1_FH"] + params["b1_H"])
    if dropout_rate > 0:
        keep_BH = jax.random.bernoulli(dropout_key, 1.0 - dropout_rate, h_BH.shape)
        h_BH = jnp.where(keep_BH, h_BH / (1.0 - dropout_rate), 0.0)
    logits_BC = h_BH @ params["w2_HC"] + params["b2_C"]
    per_example_B = optax.softmax_cross_entropy_with_integer_labels(logits_BC, batch["y"])
    mask_B = batch["mask"].astype(per_example_B.dtype)
    return jnp.sum(per_example_B * mask_B) / jnp.maximum(jnp.sum(mask_B), 1.0)


def train_step_fn(config: TrainConfig) -> Callable:
    """jit(train_step) for this config: (state, batch) -> (state, loss).

    One Adam step (optax ``scale_by_adam``, then ``-learning_rate`` times the update, which
    is what ``optax.adam`` does) with a fresh dropout key split off the state's key.
    """
    compiled = _train_step_program(_program_key(config))
    learning_rate = jnp.asarray(config.learning_rate, jnp.float32)
    return lambda state, batch: compiled(state, batch, learning_rate)


@functools.lru_cache(maxsize=16)
def _train_step_program(config: TrainConfig) -> Callable:
    tx = _adam()

    def train_step(state, batch, learning_rate):
        import optax

        key = jax.random.wrap_key_data(state["rng"]["dropout"])
        key, dropout_key = jax.random.split(key)
        batch = {k: batch[k] for k in ("x", "y", "mask")}
        loss, grads = jax.value_and_grad(loss_fn)(
            state["params"], batch, dropout_key, config.dropout
        )
        directions, opt_state = tx.update(grads, state["opt_state"], state["params"])
        updates = jax.tree.map(lambda d: -learning_rate * d, directions)
        new_state = {
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
            "step": state["step"] + 1,
            "rng": {"dropout": jax.random.key_data(key)},
        }
        return new_state, loss

    return jax.jit(train_step)


@dataclasses.dataclass
class RunResult:
    start_step: int  # 0 for a fresh run, else the step restored from
    losses: dict[int, float]  # step -> loss of the update that made that step
    state: dict
    data_state: dict
    example_ids: list[int]  # the real examples consumed, in order (the data order)
    checkpointer: checkpoint.Checkpointer
    rejected: list[tuple[int, list[str]]]
    step_times: dict[int, float]  # step -> wall clock (time.time()) when its update finished
    started: float  # wall clock at the start of train()


def train(
    config: TrainConfig,
    checkpoint_dir: str | os.PathLike,
    steps: int,
    save_every: int = 5,
    max_to_keep: int | None = 3,
    async_save: bool = False,
    keep_period: int | None = None,
    resume: bool = True,
    on_event: Callable[[dict], None] | None = None,
    kill_after_save_call: int | None = None,
    digests: bool = False,
    step_seconds: float = 0.0,
) -> RunResult:
    """Train to ``steps``, resuming from the newest good checkpoint in ``checkpoint_dir``.

    Saves every ``save_every`` steps and always at ``steps``. ``kill_after_save_call``
    sends this process SIGKILL right after that step's save call returns (with
    ``async_save`` the files are still being written: a real mid-save failure).
    ``step_seconds`` adds a sleep per step that stands in for a bigger model's device
    time (on an accelerator the host thread idles while the chip computes: that idle time
    is what an asynchronous save uses).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    started = time.time()

    def emit(event: dict) -> None:
        if on_event is not None:
            on_event(event)

    train_step = train_step_fn(config)
    iterator = data.grain_iterator(pipeline(config))
    ckpt = checkpoint.Checkpointer(
        checkpoint_dir,
        save_every=save_every,
        max_to_keep=max_to_keep,
        async_save=async_save,
        keep_period=keep_period,
        on_commit=lambda step: emit({"event": "committed", "step": step}),
    )
    state, start = init_state(config), 0
    restored = ckpt.restore_latest(abstract_state(config)) if resume else None
    rejected = list(ckpt.rejected)
    if restored is not None:
        if restored.config != config.to_dict():
            ckpt.close()
            raise ValueError(
                f"checkpoint step {restored.step} in {checkpoint_dir} was saved with config "
                f"{restored.config}, not {config.to_dict()}: "
                "use another directory or the same config"
            )
        state, start = restored.state, restored.step
        iterator.set_state(restored.data_state)
        emit(
            {
                "event": "resumed",
                "step": start,
                "digest": checkpoint.state_digest(state, restored.data_state),
            }
        )
    else:
        emit({"event": "fresh"})
    losses, example_ids, step_times = {}, [], {}
    saved_last = False
    for step in range(start + 1, steps + 1):
        batch = next(iterator)
        example_ids.extend(int(i) for i in batch["id"][batch["mask"]])
        state, loss = train_step(state, batch)
        losses[step] = float(loss)
        if step_seconds > 0:
            time.sleep(step_seconds)
        step_times[step] = time.time()
        emit({"event": "step", "step": step, "loss": losses[step]})
        data_state = iterator.get_state()
        if digests:
            emit(
                {
                    "event": "state",
                    "step": step,
                    "digest": checkpoint.state_digest(state, data_state),
                }
            )
        saved_last = ckpt.save(
            step, state, data_state, config.to_dict(), {"loss": losses[step]}, force=step == steps
        )
        if saved_last:
            emit({"event": "save", "step": step})
            if kill_after_save_call == step:
                os.kill(os.getpid(), signal.SIGKILL)
    ckpt.close()
    emit({"event": "done", "step": steps})
    return RunResult(
        start, losses, state, iterator.get_state(), example_ids, ckpt, rejected, step_times, started
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--max-to-keep", type=int, default=3)
    parser.add_argument("--keep-period", type=int, default=None)
    parser.add_argument("--async-save", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--kill-after-save-call", type=int, default=None)
    parser.add_argument(
        "--digests", action="store_true", help="emit a state digest after every step"
    )
    parser.add_argument("overrides", nargs="*", help="config key=value")
    args = parser.parse_args(argv)

    def print_event(event: dict) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    train(
        TrainConfig.from_overrides(args.overrides),
        args.checkpoint_dir,
        args.steps,
        save_every=args.save_every,
        max_to_keep=args.max_to_keep,
        async_save=args.async_save,
        keep_period=args.keep_period,
        resume=args.resume,
        on_event=print_event,
        kill_after_save_call=args.kill_after_save_call,
        digests=args.digests,
    )
    return 0


def command(checkpoint_dir, steps: int, *options: str) -> list[str]:
    """The argv that runs this trainer in a fresh Python process."""
    return [
        sys.executable,
        "-m",
        "core.state.recovery_demo",
        "--checkpoint-dir",
        str(checkpoint_dir),
        "--steps",
        str(steps),
        *options,
    ]


def parse_events(stdout: str) -> list[dict]:
    """The JSON events a child printed (other lines ignored)."""
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a kill
    return events


if __name__ == "__main__":
    sys.exit(main())
