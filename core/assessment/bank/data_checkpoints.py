"""The assessment item of the phase "Data & checkpoint recovery".

- ``data_checkpoints.resume_defect`` (diagnose): what a checkpoint must hold so that a resumed
  run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from core.assessment.items import DiagnoseItem, Evidence, Item

_RESUME_PROGRAM = """\
import jax, jax.numpy as jnp, numpy as np, optax

SEED, N, B, STOP, TOTAL = {seed}, {examples}, {batch}, {stop}, {total}  # preempted after STOP
X = np.random.default_rng(SEED).normal(size=(N, 3)).astype(np.float32)
Y = X @ np.float32({true_w})
tx = optax.adam({lr})

def fresh():
    return {{"w": jnp.zeros(3), "adam": tx.init(jnp.zeros(3)), "key": jax.random.key(SEED),
            "batches_read": 0}}

def loss_fn(w, x, y, key):  # dropout-like noise: each input kept with probability 0.8
    return jnp.mean(jnp.square((x * jax.random.bernoulli(key, 0.8, x.shape) / 0.8) @ w - y))

def train(state, steps, losses):
    for _ in range(steps):
        epoch, i = divmod(state["batches_read"], N // B)  # reshuffled every epoch, seeded
        rows = np.random.default_rng([SEED, epoch]).permutation(N)[i * B : (i + 1) * B]
        key, sub = jax.random.split(state["key"])
        loss, grad = jax.value_and_grad(loss_fn)(state["w"], X[rows], Y[rows], sub)
        updates, adam = tx.update(grad, state["adam"])
        state = {{"w": state["w"] + updates, "adam": adam, "key": key,
                 "batches_read": state["batches_read"] + 1}}
        losses.append(float(loss))
    return state

state = train(fresh(), STOP, before := [])
ckpt = {{{saved}}}
# preempted here: a new process restores the checkpoint over a fresh state and goes on
resumed = train({{**fresh(), **ckpt}}, TOTAL - STOP, after := [])
"""

_STATE_FIELDS = ("w", "adam", "key", "batches_read")
_LEFT_OUT = {"no_data_position": "batches_read", "no_optimizer_state": "adam", "no_rng_key": "key"}


def _state_leaves(value) -> list[np.ndarray]:
    """A state field as numpy arrays (a PRNG key through its key data) for exact compares."""
    import jax

    leaves = []
    for leaf in jax.tree_util.tree_leaves(value):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        leaves.append(np.asarray(leaf))
    return leaves


def _same(a, b) -> bool:
    left, right = _state_leaves(a), _state_leaves(b)
    return len(left) == len(right) and all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(left, right, strict=True)
    )


class ResumeDefect(DiagnoseItem):
    id = "data_checkpoints.resume_defect"
    phase = "Data & checkpoint recovery"
    lesson = "save_full_state"
    title = "What a resumable checkpoint must hold"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "no_data_position": (
            "The checkpoint leaves out the data position",
            "Without `batches_read` the resumed run starts the data stream again at batch 0: "
            "it re-reads the first batches of epoch 0 (and will skip others), so from the "
            "first resumed step it trains on different examples than the uninterrupted run. "
            "Save the iterator position (here the batch counter; with Grain, the iterator "
            "state) with the model.",
        ),
        "no_optimizer_state": (
            "The checkpoint leaves out the optimizer state",
            "Without `adam` the resumed run starts Adam again: both moment estimates are zero "
            "and the step count is 0, so bias correction treats the next update as the first "
            "one (a full-size step of about the learning rate per weight). The first resumed "
            "loss still matches (it is computed before the update); every later one differs. "
            "Save the optimizer state with the parameters.",
        ),
        "no_rng_key": (
            "The checkpoint leaves out the PRNG key",
            "Without `key` the resumed run re-makes the key from the seed, so its dropout "
            "noise repeats the noise of the first steps instead of continuing the stream: "
            "the loss differs from the first resumed step. Save the key (or derive each "
            "step's key from the seed and the step number, e.g. jax.random.fold_in).",
        ),
    }

    def params(self, generator: np.random.Generator) -> dict[str, Any]:
        examples = int(generator.choice([16, 24]))
        batch = 4
        per_epoch = examples // batch
        stop = int(generator.integers(3, per_epoch + 3))  # sometimes past an epoch end
        return {
            "seed": int(generator.integers(0, 1000)),
            "examples": examples,
            "batch": batch,
            "stop": stop,
            "total": stop + int(generator.integers(3, 5)),
            "lr": float(generator.choice([0.05, 0.1, 0.2])),
            "true_w": [float(x) for x in np.round(generator.uniform(-2, 2, 3), 1)],
        }

    def prompt(self, params: dict[str, Any]) -> str:
        return (
            "This program trains a linear model with Adam on shuffled batches, with "
            "dropout-like noise drawn from a JAX key. It is preempted after "
            f"STOP = {params['stop']} steps; a new process restores the checkpoint `ckpt` "
            f"and trains on to TOTAL = {params['total']} steps in all. It runs without an "
            "error and its losses look plausible, but one defect makes the resumed losses "
            "(`after`) differ from those of the uninterrupted run `train(fresh(), TOTAL, [])`. "
            "Which one?"
        )

    def program(self, defect: str, params: dict[str, Any]) -> str:
        """The program with ``defect`` planted; "fixed" saves every field of the state."""
        left_out = _LEFT_OUT.get(defect)
        saved = ", ".join(f'"{f}": state["{f}"]' for f in _STATE_FIELDS if f != left_out)
        return _RESUME_PROGRAM.format(saved=saved, **params)

    def _execute(self, source: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__name__": "resume_program"}
        exec(compile(source, "<resume program>", "exec"), namespace)  # noqa: S102 (our source)
        return namespace

    def evidence(self, defect: str, params: dict[str, Any]) -> Evidence:
        shown, fixed = (
            self._execute(self.program(defect, params)),
            self._execute(self.program("fixed", params)),
        )
        full: list[float] = []
        fixed["train"](fixed["fresh"](), params["total"], full)
        stop = params["stop"]
        fixed_losses = fixed["before"] + fixed["after"]
        shown_after = shown["after"]
        differing_steps = [
            stop + i
            for i, (a, b) in enumerate(zip(shown_after, full[stop:], strict=True))
            if a != b
        ]
        restored = {**shown["fresh"](), **shown["ckpt"]}
        differs = [f for f in _STATE_FIELDS if not _same(restored[f], shown["state"][f])]
        rows = "\n".join(
            f"| {stop + i} | {full[stop + i]:.6f} | {fixed['after'][i]:.6f} | {loss:.6f}"
            f"{' ≠' if loss != full[stop + i] else ''} |"
            for i, loss in enumerate(shown_after)
        )
        first = differing_steps[0] if differing_steps else None
        when = (
            "no resumed step"
            if first is None
            else "the first resumed step"
            if first == stop
            else f"{first - stop} step(s) after the first resumed one"
        )
        markdown = (
            "Both programs were run (the one shown and one that saves every field of the "
            "state), and the uninterrupted run `train(fresh(), TOTAL, [])` beside them. "
            f"Losses of the steps after the preemption (steps counted from 0, so step {stop} "
            "is the first resumed one):\n\n"
            "| step | uninterrupted | fixed, resumed | shown, resumed |\n|---|---|---|---|\n"
            f"{rows}\n\n"
            f"- fixed: resumed losses equal the uninterrupted ones bit for bit: "
            f"{fixed_losses == full}\n"
            f"- shown: the first loss that differs is at step {first} "
            f"({when})\n"
            f"- the restored state `{{**fresh(), **ckpt}}` differs from the state at the "
            f"preemption in: {', '.join(f'`{f}`' for f in differs) or 'nothing'}"
        )
        facts = {
            "the fixed program's losses equal the uninterrupted run's, bit for bit": (
                fixed_losses == full
            ),
            "the shown program's resumed losses differ from the uninterrupted run's": bool(
                differing_steps
            ),
            "the defect changes the final weights": not _same(
                shown["resumed"]["w"], fixed["resumed"]["w"]
            ),
            "exactly the field the defect leaves out differs after restoring": (
                differs == [_LEFT_OUT[defect]]
            ),
        }
        return Evidence(markdown, facts)


ITEMS: tuple[Item, ...] = (ResumeDefect(),)
