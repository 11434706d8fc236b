import json

import numpy as np
import pytest

from core import data


def _source(count=10, features=3, classes=4, seed=0):
    columns = data.make_columns(seed, count, features, classes)
    return columns, data.ColumnSource(columns), data.classification_contract(features, classes)


@pytest.mark.parametrize("count,features,classes", [(1, 1, 2), (10, 3, 4), (37, 8, 5)])
def test_make_columns_is_reproducible_and_labels_follow_the_teacher(count, features, classes):
    a = data.make_columns(7, count, features, classes)
    b = data.make_columns(7, count, features, classes)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["x"].shape == (count, features) and a["x"].dtype == np.float32
    assert a["y"].dtype == np.int32 and a["y"].min() >= 0 and a["y"].max() < classes
    # Reference: the teacher recomputed independently from the same generator stream.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((count, features)).astype(np.float32)
    teacher = rng.standard_normal((features, classes))
    np.testing.assert_array_equal(a["y"], np.argmax(x.astype(np.float64) @ teacher, axis=1))


@pytest.mark.parametrize("count,batch_size", [(10, 4), (8, 4), (3, 5), (1, 1)])
def test_batches_cover_every_example_once_with_padding_masked(count, batch_size):
    columns, source, contract = _source(count)
    batched = data.batches(source, contract, batch_size, seed=3)
    assert len(batched) == -(-count // batch_size)
    assert all(
        b["x"].shape == (batch_size, 3) and b["mask"].shape == (batch_size,) for b in batched
    )
    real_ids = np.concatenate([b["id"][b["mask"]] for b in batched])
    np.testing.assert_array_equal(np.sort(real_ids), np.arange(count))
    # Real rows carry the source's values; padded rows are zero and masked out.
    for b in batched:
        np.testing.assert_array_equal(b["x"][b["mask"]], columns["x"][b["id"][b["mask"]]])
        assert not b["x"][~b["mask"]].any()
    # The masked mean over batches equals the float64 mean over the whole data set.
    total = sum(float(b["x"][:, 0][b["mask"]].astype(np.float64).sum()) for b in batched)
    assert abs(total / count - columns["x"][:, 0].astype(np.float64).mean()) < 1e-12


def test_batches_order_is_seeded_and_changes_per_epoch():
    _, source, contract = _source(20)

    def ids(seed, epoch):
        return np.concatenate(
            [b["id"][b["mask"]] for b in data.batches(source, contract, 6, seed, epoch)]
        )

    np.testing.assert_array_equal(ids(1, 0), ids(1, 0))
    np.testing.assert_array_equal(ids(1, 0), data.epoch_order(20, 1, 0))
    assert not np.array_equal(ids(1, 0), ids(1, 1))
    assert not np.array_equal(ids(1, 0), ids(2, 0))


def test_drop_remainder_drops_the_short_batch():
    _, source, contract = _source(10)
    batched = data.batches(source, contract, 4, seed=0, drop_remainder=True)
    assert len(batched) == 2 and all(b["mask"].all() for b in batched)


@pytest.mark.parametrize(
    "fault,reason",
    [
        ("wrong shape", "example 2: field 'x' has shape (4,), expected (3,)"),
        ("wrong dtype", "example 2: field 'x' has dtype float64, expected float32"),
        ("missing field", "example 2: missing field(s) ['y']"),
        ("non-finite value", "example 2: field 'x' has non-finite values"),
        ("label out of range", "example 2: field 'y' = 4 is not below 4"),
    ],
)
def test_contract_rejects_bad_examples_at_the_boundary_naming_the_problem(fault, reason):
    _, source, contract = _source(6)
    examples = data.inject_fault([source[i] for i in range(6)], fault, 2, classes=4)
    with pytest.raises(ValueError, match="data contract violated") as error:
        data.batches(examples, contract, 4, seed=0)
    assert reason in str(error.value)
    with pytest.raises(ValueError, match="data contract violated"):
        list(data.grain_iterator(data.grain_dataset(examples, contract, 4, seed=0, num_epochs=1)))


def test_check_batch_and_masked_mean():
    contract = data.classification_contract(2, 3)
    batch = data.collate([{"id": np.int32(0), "x": np.ones(2, np.float32), "y": np.int32(1)}], 3)
    contract.check_batch(batch, 3)
    with pytest.raises(ValueError, match="field 'x'"):
        contract.check_batch({**batch, "x": batch["x"][:, :1]}, 3)
    assert data.masked_mean(np.array([2.0, 4.0, 100.0]), np.array([True, True, False])) == 3.0
    with pytest.raises(ValueError, match="no real rows"):
        data.masked_mean(np.ones(2), np.zeros(2, bool))


@pytest.mark.parametrize("count,batch_size,shards", [(10, 3, 1), (10, 3, 2), (13, 4, 3), (8, 8, 4)])
def test_grain_shards_are_disjoint_covering_and_each_epoch_is_a_permutation(
    count, batch_size, shards
):
    _, source, contract = _source(count)
    epochs = 3
    seen = []
    for index in range(shards):
        shard = data.Shard(index, shards)
        per_epoch = data.batches_per_epoch(count, batch_size, shard)
        iterator = data.grain_iterator(
            data.grain_dataset(source, contract, batch_size, seed=5, shard=shard, num_epochs=epochs)
        )
        batches = data.take_ids(iterator, per_epoch * epochs)
        with pytest.raises(StopIteration):
            next(iterator)
        mine = sorted(range(index, count, shards))  # reference: interleaved slicing
        orders = [sum(batches[e * per_epoch : (e + 1) * per_epoch], []) for e in range(epochs)]
        assert all(sorted(o) == mine for o in orders)
        if len(mine) > 2:
            assert len({tuple(o) for o in orders}) > 1, "a new order every epoch"
        seen.append(set(mine))
    assert set().union(*seen) == set(range(count))
    assert sum(len(s) for s in seen) == count


@pytest.mark.parametrize("interrupt_at", [0, 1, 4, 7])
def test_grain_order_after_restoring_the_iterator_equals_the_uninterrupted_order(interrupt_at):
    _, source, contract = _source(11)
    dataset = data.grain_dataset(source, contract, 3, seed=2)
    uninterrupted = data.take_ids(data.grain_iterator(dataset), 12)
    first = data.grain_iterator(dataset)
    head = data.take_ids(first, interrupt_at)
    state = json.loads(json.dumps(first.get_state()))  # JSON round trip, as in a checkpoint
    resumed = data.grain_iterator(data.grain_dataset(source, contract, 3, seed=2))
    resumed.set_state(state)
    assert head + data.take_ids(resumed, 12 - interrupt_at) == uninterrupted


def test_grain_same_seed_same_order_other_seed_other_order():
    _, source, contract = _source(16)
    a = data.take_ids(data.grain_iterator(data.grain_dataset(source, contract, 4, seed=1)), 8)
    b = data.take_ids(data.grain_iterator(data.grain_dataset(source, contract, 4, seed=1)), 8)
    c = data.take_ids(data.grain_iterator(data.grain_dataset(source, contract, 4, seed=9)), 8)
    assert a == b and a != c


def test_grain_loader_state_round_trips_through_json_and_shards_cover():
    _, source, _ = _source(10)
    shards = []
    for index in range(2):
        loader = data.grain_loader(source, 3, seed=4, shard=data.Shard(index, 2), num_epochs=1)
        shards.append({int(i) for b in loader for i in b["id"]})
    assert shards[0].isdisjoint(shards[1]) and shards[0] | shards[1] == set(range(10))
    loader = data.grain_loader(source, 2, seed=4, num_epochs=2)
    uninterrupted = [b["id"].tolist() for b in loader]
    iterator = iter(loader)
    head = [next(iterator)["id"].tolist() for _ in range(3)]
    state = data.loader_state_to_json(iterator.get_state())
    json.dumps(state)
    resumed = iter(loader)
    resumed.set_state(data.loader_state_from_json(state))
    assert head + [b["id"].tolist() for b in resumed] == uninterrupted


def test_shard_validation_and_jax_process_shard():
    with pytest.raises(ValueError, match="shard index"):
        data.Shard(2, 2)
    assert data.Shard.of_jax_process() == data.Shard(0, 1)  # one process in the tests
    _, source, contract = _source(2)
    with pytest.raises(ValueError, match="empty"):
        data.grain_dataset(source, contract, 2, seed=0, shard=data.Shard(2, 3))
