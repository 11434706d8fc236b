import json
import threading

import jax
import numpy as np
import pytest

from core.post_training import cache, losses, model, task

STEPS = 6  # a few base-model steps: enough to move every weight, cheap to train


def _inputs(seed=0, steps=STEPS, config=task.MODEL):
    params = model.init_params(config, jax.random.key(seed))
    return params, task.pretraining_data(seed, steps, 8)


def _train(params, data, lr=task.BASE_LEARNING_RATE):
    return cache.train(losses.masked_token_loss, params, None, data, lr)


def _entries(folder):
    return sorted(p.name for p in (folder / cache.SUBFOLDER).glob("*.json"))


def _leaves_equal_bitwise(a, b) -> bool:
    la, lb = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_flatten_with_path(b)[0]
    if [p for p, _ in la] != [p for p, _ in lb]:
        return False
    return all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for (_, x), (_, y) in zip(la, lb, strict=True)
    )


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    return tmp_path


def test_a_hit_returns_the_arrays_of_a_fresh_training_bit_for_bit(folder, monkeypatch):
    params, data = _inputs()
    monkeypatch.setenv(cache.ENV_VAR, "off")
    fresh, fresh_losses = model.train(
        losses.masked_token_loss, params, None, data, task.BASE_LEARNING_RATE
    )
    fresh = jax.tree.map(np.asarray, fresh)
    monkeypatch.setenv(cache.ENV_VAR, str(folder))
    first, first_losses, origin = _train(params, data)
    assert origin == cache.ORIGIN_TRAINED and len(_entries(folder)) == 1
    second, second_losses, origin = _train(params, data)
    assert origin == cache.ORIGIN_CACHE
    assert _leaves_equal_bitwise(fresh, first) and _leaves_equal_bitwise(fresh, second)
    assert np.array_equal(second_losses, fresh_losses)
    assert model.content_hash(second) == model.content_hash(fresh)
    # the int layer keys of params["blocks"] survive the round trip (logits_BTV indexes them)
    assert sorted(second["blocks"]) == sorted(fresh["blocks"])


def test_has_aux_values_come_back_as_model_train_returns_them(folder):
    params, data = _inputs()

    def run():
        from core.post_training import dpo, preferences

        pairs = preferences.make_pairs(params, task.all_prompts()[:8], jax.random.key(3), 2)
        ref = dpo.reference_logprobs(params, pairs)
        batches = dpo.batches(pairs, ref, 0, 3)
        return cache.train(dpo.loss_fn, params, np.float32(0.1), batches, 1e-3, has_aux=True)

    _, (losses_a, aux_a), origin_a = run()
    _, (losses_b, aux_b), origin_b = run()
    assert (origin_a, origin_b) == (cache.ORIGIN_TRAINED, cache.ORIGIN_CACHE)
    assert np.array_equal(losses_a, losses_b) and sorted(aux_a) == ["accuracy", "margin"]
    assert all(np.array_equal(aux_a[k], aux_b[k]) for k in aux_a)


@pytest.mark.parametrize(
    "damage",
    [
        "flip a byte of the arrays",
        "truncate the arrays",
        "wrong content hash",
        "bad manifest",
        "no manifest",
        "no arrays",
        "another key's manifest",
    ],
)
def test_a_damaged_or_mismatched_entry_is_ignored_and_retrained(folder, damage):
    params, data = _inputs()
    good, _, _ = _train(params, data)
    (name,) = _entries(folder)
    manifest = folder / cache.SUBFOLDER / name
    arrays = manifest.with_suffix(".npz")
    if damage == "flip a byte of the arrays":
        raw = bytearray(arrays.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        arrays.write_bytes(bytes(raw))
    elif damage == "truncate the arrays":
        arrays.write_bytes(arrays.read_bytes()[:100])
    elif damage == "wrong content hash":
        doc = json.loads(manifest.read_text())
        doc["content_hash"] = "0" * 64
        manifest.write_text(json.dumps(doc))
    elif damage == "bad manifest":
        manifest.write_text("{not json")
    elif damage == "no manifest":
        manifest.unlink()
    elif damage == "no arrays":
        arrays.unlink()
    else:
        doc = json.loads(manifest.read_text())
        doc["key"] = "f" * 64
        manifest.write_text(json.dumps(doc))
    key = name.removesuffix(".json")
    assert cache.load("model.train", key) is None
    again, _, origin = _train(params, data)
    assert origin == cache.ORIGIN_TRAINED
    assert _leaves_equal_bitwise(good, again)
    assert cache.load("model.train", key) is not None  # the retrained entry replaced it


def test_the_arrays_are_checked_against_the_manifest_leaves(folder):
    tree = {"a": np.arange(4, dtype=np.float32), "b": {0: np.ones((2, 2), np.int32)}}
    out, _ = cache.cached("test", {"x": 1}, lambda: tree)
    key, _ = cache.key_of("test", {"x": 1})
    manifest = folder / cache.SUBFOLDER / f"{key}.json"
    doc = json.loads(manifest.read_text())
    doc["leaves"][0]["shape"] = [2, 2]
    manifest.write_text(json.dumps(doc))
    assert cache.load("test", key) is None
    assert cache.load("other kind", key) is None


def test_the_key_changes_with_the_seed_the_config_the_data_and_the_learning_rate(folder):
    params, data = _inputs()
    _train(params, data)
    _train(*_inputs(seed=1))
    _train(params, task.pretraining_data(5, STEPS, 8))
    _train(params, data, lr=1e-3)
    _train(*_inputs(config=model.ModelConfig(width=16, num_heads=2, max_len=task.SEQ_LEN)))
    assert len(_entries(folder)) == 5
    _train(params, data)
    assert len(_entries(folder)) == 5  # and the same inputs find the same entry


def test_the_key_covers_the_environment_and_the_code(monkeypatch):
    key, env = cache.key_of("k", {"seed": 0})
    assert env["device_count"] == len(jax.devices())
    assert env["jax"] == jax.__version__
    assert cache.key_of("k", {"seed": 1})[0] != key
    assert cache.key_of("other", {"seed": 0})[0] != key
    monkeypatch.setattr(cache, "environment", lambda sources=None: {**env, "device_count": 1})
    assert cache.key_of("k", {"seed": 0})[0] != key
    monkeypatch.setattr(cache, "environment", lambda sources=None: {**env, "sources_sha256": "x"})
    assert cache.key_of("k", {"seed": 0})[0] != key


def test_off_writes_nothing_and_always_trains(tmp_path, monkeypatch):
    for value in ("off", "0", ""):
        monkeypatch.setenv(cache.ENV_VAR, value)
        assert cache.directory() is None
    tree, origin = cache.cached("test", {}, lambda: {"a": np.zeros(2)})
    assert origin == cache.ORIGIN_TRAINED and list(tmp_path.iterdir()) == []


def test_the_default_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == tmp_path / "jax-tpu-lab" / cache.SUBFOLDER


def test_concurrent_writers_and_a_crashed_one_leave_no_half_entry(folder):
    tree = {"w": np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)}
    key, env = cache.key_of("test", {"n": 1})
    # a crashed writer: its temporary file, and arrays without a manifest, are a miss
    sub = folder / cache.SUBFOLDER
    sub.mkdir(parents=True)
    (sub / f".{key}.npz.abc.tmp").write_bytes(b"half")
    assert cache.load("test", key) is None
    errors = []

    def write():
        try:
            for _ in range(5):
                cache.store("test", key, tree, {"n": 1}, env)
                got = cache.load("test", key)
                assert got is None or np.array_equal(got["w"], tree["w"])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert np.array_equal(cache.load("test", key)["w"], tree["w"])
    assert not [p for p in sub.iterdir() if p.name.endswith(".tmp") and "abc" not in p.name]


def test_only_dicts_of_numeric_arrays_are_stored(folder):
    with pytest.raises(ValueError, match="numeric"):
        cache.cached("test", {}, lambda: {"a": np.array([object()])})
    with pytest.raises(ValueError, match="str or int"):
        cache.cached("test", {}, lambda: {(1, 2): np.zeros(1)})


def test_the_base_model_says_where_it_came_from(folder):
    task._base.cache_clear()
    try:
        first = task.base_params(0, STEPS)
        assert task.base_origin(0, STEPS) == cache.ORIGIN_TRAINED
        task._base.cache_clear()
        second = task.base_params(0, STEPS)
        assert task.base_origin(0, STEPS) == cache.ORIGIN_CACHE
        assert _leaves_equal_bitwise(first, second)
    finally:
        task._base.cache_clear()
