import hashlib
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.state import checkpoint


def _state(width=4, depth=1, seed=0, step=0):
    keys = jax.random.split(jax.random.key(seed), depth + 1)
    params = {f"w{i}": jax.random.normal(keys[i], (width, width)) for i in range(depth)}
    params["b"] = jnp.arange(width, dtype=jnp.float32)
    opt_state = optax.adam(1e-2).init(params)
    # Make both Adam moments non-trivial: one real update.
    grads = jax.tree.map(lambda p: p * 0.5 + 1.0, params)
    _, opt_state = optax.adam(1e-2).update(grads, opt_state, params)
    return {
        "params": params,
        "opt_state": opt_state,
        "step": jnp.asarray(step, jnp.int32),
        "rng": {"dropout": jax.random.key_data(keys[-1])},
    }


def _assert_trees_equal(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def _save_steps(directory, steps, state_fn=_state, **options):
    with checkpoint.Checkpointer(
        directory, **{"save_every": 1, "max_to_keep": None, "async_save": False, **options}
    ) as ckpt:
        for step in steps:
            ckpt.save(
                step, state_fn(step=step), {"next_index": step}, {"lr": 0.01}, {"loss": 1.0 / step}
            )
    return pathlib.Path(directory)


@pytest.mark.parametrize("async_save", [False, True])
@pytest.mark.parametrize("width,depth", [(3, 1), (8, 2)])
def test_restore_equals_saved_leaf_by_leaf(tmp_path, async_save, width, depth):
    state = _state(width, depth, seed=width, step=7)
    with checkpoint.Checkpointer(tmp_path, save_every=1, async_save=async_save) as ckpt:
        assert ckpt.save(7, state, {"next_index": 21}, {"width": width}, {"note": "hi"})
    ckpt = checkpoint.Checkpointer(tmp_path)
    restored = ckpt.restore_latest(checkpoint.abstract_like(state))
    step, restored_state, data_state, config, metadata = restored
    assert (step, data_state, config, metadata) == (
        7,
        {"next_index": 21},
        {"width": width},
        {"note": "hi"},
    )
    _assert_trees_equal(restored_state, state)
    adam = restored_state["opt_state"][0]
    assert isinstance(adam, optax.ScaleByAdamState) and np.asarray(adam.nu["b"]).any()
    ckpt.close()


def test_manifest_matches_an_independent_hash_of_every_file(tmp_path):
    directory = _save_steps(tmp_path, [3])
    step_dir = directory / "3"
    manifest = json.loads((step_dir / checkpoint.MANIFEST).read_text())
    on_disk = {p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file()} - {
        checkpoint.MANIFEST
    }
    assert set(manifest["files"]) == on_disk
    for relative, entry in manifest["files"].items():
        content = (step_dir / relative).read_bytes()
        assert entry == {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    assert {"state", "data", "meta"} <= {name.split("/")[0] for name in on_disk}
    specs = {s["path"]: s for s in manifest["state_tree"]}
    assert specs["['params']['w0']"] == {
        "path": "['params']['w0']",
        "shape": [4, 4],
        "dtype": "float32",
    }
    assert specs["['rng']['dropout']"]["dtype"] == "uint32"
    assert manifest["step"] == 3 and manifest["items"] == list(checkpoint.ITEMS)


@pytest.mark.parametrize(
    "save_every,max_to_keep,keep_period,steps,expected",
    [
        (1, 2, None, range(1, 8), [6, 7]),
        (3, None, None, range(1, 11), [3, 6, 9]),
        (2, 2, 4, range(1, 13), [4, 8, 10, 12]),
        (1, 1, 5, range(1, 12), [5, 10, 11]),
    ],
)
def test_save_interval_and_retention(
    tmp_path, save_every, max_to_keep, keep_period, steps, expected
):
    with checkpoint.Checkpointer(
        tmp_path,
        save_every=save_every,
        max_to_keep=max_to_keep,
        keep_period=keep_period,
        async_save=True,
    ) as ckpt:
        saved = [s for s in steps if ckpt.save(s, _state(step=s), {}, {}, {})]
    # Reference: the policy in closed form.
    assert saved == [s for s in steps if s % save_every == 0]
    assert checkpoint.Checkpointer(tmp_path).committed_steps() == expected
    assert sorted(checkpoint.step_dirs(tmp_path)) == expected
    assert all((tmp_path / str(s) / checkpoint.MANIFEST).exists() for s in expected)


def test_force_saves_off_interval_and_on_commit_reports_each_step(tmp_path):
    committed = []
    with checkpoint.Checkpointer(
        tmp_path, save_every=10, async_save=True, on_commit=committed.append
    ) as ckpt:
        assert not ckpt.save(3, _state(), {}, {}, {})
        assert ckpt.save(4, _state(), {}, {}, {}, force=True)
        assert ckpt.save(10, _state(), {}, {}, {})
    assert committed == [4, 10]
    kinds = [e.event for e in ckpt.events]
    assert kinds.count("save called") == 2 and kinds.count("manifest written") == 2
    # Orbax recorded a commit time for both; their order is the on_commit order above (two
    # wall-clock readings are not compared: a clock step would make that flaky).
    assert ckpt.commit_time(4) > 0 and ckpt.commit_time(10) > 0


def _flip_byte(path: pathlib.Path):
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0x01
    path.write_bytes(bytes(content))


def _largest_array_file(step_dir: pathlib.Path) -> pathlib.Path:
    return max(
        (p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in p.as_posix()),
        key=lambda p: p.stat().st_size,
    )


CORRUPTIONS = {
    "truncated file": (
        lambda d: _largest_array_file(d).write_bytes(_largest_array_file(d).read_bytes()[:10]),
        "bytes, the manifest says",
    ),
    "flipped byte": (lambda d: _flip_byte(_largest_array_file(d)), "sha256 mismatch"),
    "missing item": (lambda d: __import__("shutil").rmtree(d / "data"), "item 'data' is missing"),
    "missing file": (lambda d: (d / "meta" / "metadata").unlink(), "file meta/metadata is missing"),
    "extra file": (
        lambda d: (d / "state" / "stray.bin").write_bytes(b"x"),
        "file state/stray.bin is not in the manifest",
    ),
    "no manifest": (lambda d: (d / checkpoint.MANIFEST).unlink(), "no manifest.json"),
    "garbled manifest": (
        lambda d: (d / checkpoint.MANIFEST).write_text("{not json"),
        "manifest.json is unreadable",
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corruption_is_detected_before_loading_and_restore_falls_back(
    tmp_path, corruption, monkeypatch
):
    damage, reason = CORRUPTIONS[corruption]
    directory = _save_steps(tmp_path, [1, 2, 3])
    damage(directory / "3")
    ckpt = checkpoint.Checkpointer(directory)
    abstract = checkpoint.abstract_like(_state())
    problems = ckpt.verify(3, abstract)
    assert any(reason in p for p in problems), problems
    assert ckpt.verify(2, abstract) == []
    loaded = []
    original = ckpt._manager.restore
    monkeypatch.setattr(
        ckpt._manager, "restore", lambda step, **kw: loaded.append(step) or original(step, **kw)
    )
    with pytest.raises(
        checkpoint.CorruptCheckpointError,
        match=r"checkpoint step 3 rejected: .*" + reason.split("(")[0][:20],
    ):
        ckpt.restore(3, abstract)
    assert loaded == [], "nothing is read from a step that failed verification"
    restored = ckpt.restore_latest(abstract)
    assert restored.step == 2 and loaded == [2]
    _assert_trees_equal(restored.state, _state(step=2))
    assert [step for step, _ in ckpt.rejected] == [3]
    # The bad step is moved aside (with its reasons) so training can save step 3 again.
    assert ckpt.committed_steps() == [1, 2]
    rejected_dir = directory / checkpoint.REJECTED / "step_3_0"
    assert any(
        reason in p for p in json.loads((rejected_dir / "REJECTED.json").read_text())["problems"]
    )
    assert ckpt.save(3, _state(step=3), {}, {"lr": 0.01}, {}, force=True)
    ckpt.close()
    assert checkpoint.Checkpointer(directory).verify(3, abstract) == []


def test_wrong_tree_structure_is_rejected_naming_the_leaves(tmp_path):
    directory = _save_steps(tmp_path, [1])
    # Step 2 was written by a different model (two weight matrices, wider).
    _save_steps(directory, [2], state_fn=lambda step: _state(width=5, depth=2, step=step))
    ckpt = checkpoint.Checkpointer(directory)
    abstract = checkpoint.abstract_like(_state())
    problems = ckpt.verify(2, abstract)
    extra = next(
        p for p in problems if "leaves in the checkpoint that the model does not have" in p
    )
    assert "['params']['w1']" in extra and "['opt_state'][0].mu['w1']" in extra
    assert any(
        "['params']['w0'] is (5, 5) float32 in the checkpoint, expected (4, 4) float32" in p
        for p in problems
    )
    assert ckpt.restore_latest(abstract).step == 1


def test_every_step_bad_raises_and_moves_nothing(tmp_path):
    directory = _save_steps(tmp_path, [1, 2])
    ckpt = checkpoint.Checkpointer(directory)
    wrong = checkpoint.abstract_like(_state(width=6))
    with pytest.raises(
        checkpoint.CorruptCheckpointError, match="no committed step passed verification"
    ) as error:
        ckpt.restore_latest(wrong)
    assert "step 2:" in str(error.value) and "step 1:" in str(error.value)
    assert ckpt.committed_steps() == [1, 2] and not (directory / checkpoint.REJECTED).exists()


def test_only_unfinished_steps_start_from_scratch_but_damage_still_raises(tmp_path):
    # Killed between Orbax's rename and the manifest write of the first save: a crash, not
    # damage, so the run starts again from step 0 (as after a kill mid-save).
    directory = _save_steps(tmp_path, [1])
    (directory / "1" / checkpoint.MANIFEST).unlink()
    ckpt = checkpoint.Checkpointer(directory)
    abstract = checkpoint.abstract_like(_state())
    assert ckpt.verify(1, abstract) == [checkpoint.UNFINISHED_STEP]
    assert ckpt.restore_latest(abstract) is None
    assert [step for step, _ in ckpt.rejected] == [1]
    assert ckpt.committed_steps() == [] and (directory / checkpoint.REJECTED / "step_1_0").is_dir()
    assert ckpt.save(1, _state(step=1), {}, {"lr": 0.01}, {}, force=True)
    ckpt.close()
    assert checkpoint.Checkpointer(directory).verify(1, abstract) == []

    # An unfinished step beside a damaged one is still damage: raise and move nothing.
    directory = _save_steps(tmp_path / "mixed", [1, 2])
    (directory / "2" / checkpoint.MANIFEST).unlink()
    _flip_byte(_largest_array_file(directory / "1"))
    ckpt = checkpoint.Checkpointer(directory)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="sha256 mismatch"):
        ckpt.restore_latest(abstract)
    assert ckpt.committed_steps() == [1, 2] and not (directory / checkpoint.REJECTED).exists()


def test_partial_save_is_never_a_step_and_is_cleaned_up(tmp_path):
    directory = _save_steps(tmp_path, [1])
    partial = directory / f"2{checkpoint.TMP_SUFFIX}"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "half_written").write_bytes(b"\0" * 10)
    assert checkpoint.partial_saves(directory) == [partial.name]
    assert sorted(checkpoint.step_dirs(directory)) == [1]
    ckpt = checkpoint.Checkpointer(directory)
    assert ckpt.committed_steps() == [1]
    assert ckpt.removed_partial_saves == [partial.name]
    assert checkpoint.partial_saves(directory) == []  # removed when the Checkpointer opened
    assert ckpt.verify(2) == ["step 2 was not committed"]
    assert ckpt.restore_latest(checkpoint.abstract_like(_state())).step == 1


def test_empty_directory_restores_nothing_and_bad_arguments_are_refused(tmp_path):
    ckpt = checkpoint.Checkpointer(tmp_path / "new")
    assert ckpt.restore_latest(checkpoint.abstract_like(_state())) is None
    with pytest.raises(ValueError, match="JSON"):
        ckpt.save(1, _state(), {"position": object()}, {}, {})
    with pytest.raises(ValueError, match="save_every"):
        checkpoint.Checkpointer(tmp_path, save_every=0)
    with pytest.raises(ValueError, match="max_to_keep"):
        checkpoint.Checkpointer(tmp_path, max_to_keep=0)


def test_tree_problems_and_leaf_specs_against_hand_written_specs():
    tree = {"a": np.zeros((2, 3), np.float32), "b": [np.zeros(4, np.int32)]}
    specs = checkpoint.leaf_specs(tree)
    assert specs == [
        {"path": "['a']", "shape": [2, 3], "dtype": "float32"},
        {"path": "['b'][0]", "shape": [4], "dtype": "int32"},
    ]
    assert checkpoint.tree_problems(specs, specs) == []
    other = [dict(specs[0], dtype="bfloat16"), {"path": "['c']", "shape": [], "dtype": "int32"}]
    problems = checkpoint.tree_problems(specs, other)
    assert any("missing from the checkpoint: ['c']" in p for p in problems)
    assert any("model does not have: ['b'][0]" in p for p in problems)
    assert any(
        "['a'] is (2, 3) float32 in the checkpoint, expected (2, 3) bfloat16" in p for p in problems
    )


def test_write_json_atomic_and_directory_tree(tmp_path):
    target = tmp_path / "x.json"
    checkpoint.write_json_atomic(target, {"b": 1, "a": [1, 2]})
    checkpoint.write_json_atomic(target, {"c": 3})
    assert json.loads(target.read_text()) == {"c": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    rows = checkpoint.directory_tree(tmp_path)
    assert rows == [{"path": "x.json", "kind": "file", "bytes": target.stat().st_size}]
