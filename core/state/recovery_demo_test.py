import shutil
import subprocess

import jax
import numpy as np
import pytest

from core import curriculum, lab, runtime
from core.state import checkpoint, recovery_demo


def _assert_trees_equal(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(
    "config,async_save,stop_at",
    [
        (recovery_demo.TrainConfig(), False, 5),
        (
            recovery_demo.TrainConfig(seed=3, dropout=0.3, hidden=8, batch_size=5, examples=23),
            True,
            6,
        ),
    ],
)
def test_resumed_run_equals_uninterrupted_bit_for_bit(tmp_path, config, async_save, stop_at):
    steps = 12
    full = recovery_demo.train(
        config, tmp_path / "full", steps, save_every=3, async_save=async_save
    )
    first = recovery_demo.train(
        config, tmp_path / "resumed", stop_at, save_every=3, async_save=async_save
    )
    assert first.start_step == 0 and sorted(first.losses) == list(range(1, stop_at + 1))
    second = recovery_demo.train(
        config, tmp_path / "resumed", steps, save_every=3, async_save=async_save
    )
    assert second.start_step == stop_at  # the final step is always saved
    assert {**first.losses, **second.losses} == full.losses  # exact float equality
    _assert_trees_equal(second.state, full.state)
    assert second.data_state == full.data_state
    assert first.example_ids + second.example_ids == full.example_ids


def test_loss_matches_numpy_float64_without_dropout():
    config = recovery_demo.TrainConfig(dropout=0.0, examples=10, batch_size=4)
    state = recovery_demo.init_state(config)
    batch = next(recovery_demo.data.grain_iterator(recovery_demo.pipeline(config)))
    batch["mask"][-1] = False  # one padded row must not count
    loss = recovery_demo.loss_fn(state["params"], batch, jax.random.key(0), 0.0)
    p = {k: np.asarray(v, np.float64) for k, v in state["params"].items()}
    h = np.maximum(batch["x"].astype(np.float64) @ p["w1_FH"] + p["b1_H"], 0.0)
    logits = h @ p["w2_HC"] + p["b2_C"]
    log_softmax = logits - logits.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    per_example = -log_softmax[np.arange(len(batch["y"])), batch["y"]]
    reference = per_example[batch["mask"]].mean()
    assert abs(float(loss) - reference) < 1e-5 * max(1.0, reference)


def test_dropout_key_changes_every_step_and_training_learns(tmp_path):
    config = recovery_demo.TrainConfig(examples=32, batch_size=8)
    keys = []
    result = recovery_demo.train(
        config,
        tmp_path,
        60,
        save_every=60,
        on_event=lambda e: (
            keys.append(e["digest"]["dropout_key"]) if e["event"] == "state" else None
        ),
        digests=True,
    )
    assert len(set(keys)) == len(keys) == 60
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    adam = checkpoint.adam_state(result.state)
    assert int(adam.count) == 60 and int(result.state["step"]) == 60


def test_resuming_under_another_config_is_refused(tmp_path):
    recovery_demo.train(recovery_demo.TrainConfig(), tmp_path, 3, save_every=3)
    with pytest.raises(ValueError, match="saved with config"):
        recovery_demo.train(recovery_demo.TrainConfig(learning_rate=0.5), tmp_path, 6, save_every=3)


def test_abstract_state_matches_the_real_state():
    config = recovery_demo.TrainConfig(hidden=5, classes=3)
    assert checkpoint.leaf_specs(recovery_demo.abstract_state(config)) == checkpoint.leaf_specs(
        recovery_demo.init_state(config)
    )


def test_state_digest_names_the_part_that_differs():
    config = recovery_demo.TrainConfig()
    state = recovery_demo.init_state(config)
    base = checkpoint.state_digest(state, {"next_index": 0})
    assert set(base) == set(checkpoint.DIGEST_GROUPS)
    changed = dict(state, params=dict(state["params"], b1_H=state["params"]["b1_H"] + 1))
    after = checkpoint.state_digest(changed, {"next_index": 1})
    assert {k for k in base if base[k] != after[k]} == {"params", "data_position"}


def test_config_overrides_and_validation():
    assert recovery_demo.TrainConfig.from_overrides(
        ["seed=3", "learning_rate=0.5"]
    ) == recovery_demo.TrainConfig(seed=3, learning_rate=0.5)
    with pytest.raises(ValueError, match="key=value"):
        recovery_demo.TrainConfig.from_overrides(["colour=3"])
    with pytest.raises(ValueError, match="dropout"):
        recovery_demo.TrainConfig(dropout=1.0)
    with pytest.raises(ValueError, match="steps"):
        recovery_demo.train(recovery_demo.TrainConfig(), "/nonexistent", 0)


def test_command_line_run_in_a_fresh_process_continues_the_in_process_run(tmp_path):
    config = recovery_demo.TrainConfig(seed=1)
    full = recovery_demo.train(config, tmp_path / "full", 8, save_every=4)
    recovery_demo.train(config, tmp_path / "run", 4, save_every=4)
    child = subprocess.run(
        recovery_demo.command(tmp_path / "run", 8, "--save-every", "4", "seed=1"),
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=lab.child_env(JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    events = recovery_demo.parse_events(child.stdout)
    resumed = next(e for e in events if e["event"] == "resumed")
    assert resumed["step"] == 4
    assert {e["step"]: e["loss"] for e in events if e["event"] == "step"} == {
        s: full.losses[s] for s in range(5, 9)
    }
    assert [e["step"] for e in events if e["event"] == "committed"] == [8]


def test_a_tpu_holders_uninterrupted_run_runs_where_its_fresh_process_does(tmp_path, monkeypatch):
    """On the chip resume_data_position's losses differed by 1e-3 from the fresh process's:
    the uninterrupted run ran on the TPU, the fresh process (child_env) on the CPU. Simulated
    here (this process "holds a TPU"; the CPU handed out is not the default device): under
    lab.on_child_backend the uninterrupted run lands on the child's CPU device, and the fresh
    process continues it bit for bit."""
    real_devices = jax.devices
    monkeypatch.setattr(jax, "devices", lambda backend=None: real_devices(backend)[1:])
    monkeypatch.setattr(runtime, "_started_platforms", lambda: {"tpu", "cpu"})
    config = recovery_demo.TrainConfig(seed=2, dropout=0.2)
    with lab.on_child_backend() as device:
        full = recovery_demo.train(config, tmp_path / "full", 8, save_every=4, max_to_keep=None)
    assert device.platform == "cpu" and device != jax.local_devices()[0]
    assert {d for leaf in jax.tree.leaves(full.state) for d in leaf.devices()} == {device}
    run = tmp_path / "run"  # only the step-4 checkpoint, as the lesson gives its child
    shutil.copytree(tmp_path / "full" / "4", run / "4")
    overrides = [f"{k}={v}" for k, v in config.to_dict().items()]
    env = lab.child_env()
    assert env["JAX_PLATFORMS"] == "cpu"  # the fresh process's backend
    child = subprocess.run(
        recovery_demo.command(run, 8, "--save-every", "4", *overrides),
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=env,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    events = recovery_demo.parse_events(child.stdout)
    assert {e["step"]: e["loss"] for e in events if e["event"] == "step"} == {
        s: full.losses[s] for s in range(5, 9)
    }
