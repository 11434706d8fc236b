import hashlib

import numpy as np
import pytest

from core.lm import corpus


def make_tree(root, files):
    for name, text in files.items():
        (root / name).write_bytes(text)
    (root / "notes.txt").write_text("not python")
    (root / "pkg").mkdir()
    (root / "pkg" / "inner.py").write_text("x = 1")
    return root


FILES = {f"m{i:02d}.py": f"# module {i}\nvalue = {i * i}\n".encode() for i in range(10)}


def test_stdlib_files_are_sorted_python_files():
    files = corpus.list_source_files()
    names = [p.name for p in files]
    assert names == sorted(names) and all(n.endswith(".py") for n in names)
    assert len(files) > 20, "the standard library ships many .py files"
    assert corpus.list_source_files(max_files=5) == files[:5]
    with pytest.raises(ValueError, match="max_files"):
        corpus.list_source_files(max_files=1)


def test_listing_takes_top_level_py_only(tmp_path):
    make_tree(tmp_path, FILES)
    assert [p.name for p in corpus.list_source_files(tmp_path)] == sorted(FILES)
    with pytest.raises(ValueError, match="no .py"):
        corpus.list_source_files(tmp_path / "pkg" / "missing")


@pytest.mark.parametrize(
    "count, fraction, seed", [(2, 0.5, 0), (10, 0.25, 1), (10, 0.25, 2), (40, 0.1, 3), (5, 0.99, 0)]
)
def test_split_is_disjoint_complete_and_deterministic(count, fraction, seed):
    names = [f"f{i}.py" for i in range(count)][::-1]
    train, heldout = corpus.split_by_file(names, fraction, seed)
    assert set(train).isdisjoint(heldout)
    assert sorted(train + heldout) == sorted(names)
    assert len(heldout) == min(max(1, int(np.ceil(fraction * count))), count - 1) and train
    assert (train, heldout) == corpus.split_by_file(sorted(names), fraction, seed)


def test_split_depends_on_the_seed_and_rejects_bad_input():
    names = [f"f{i}.py" for i in range(30)]
    assert len({tuple(corpus.split_by_file(names, 0.2, s)[1]) for s in range(5)}) > 1
    with pytest.raises(ValueError, match="fraction"):
        corpus.split_by_file(names, 0.0, 0)
    with pytest.raises(ValueError, match="at least 2"):
        corpus.split_by_file(["a.py"], 0.5, 0)
    with pytest.raises(ValueError, match="unique"):
        corpus.split_by_file(["a.py", "a.py"], 0.5, 0)


def test_corpus_hashes_are_the_files_hashes(tmp_path):
    make_tree(tmp_path, FILES)
    loaded = corpus.load_corpus(
        max_files=10, max_bytes=12, heldout_fraction=0.3, seed=4, directory=tmp_path
    )
    assert {d.name for d in loaded.train}.isdisjoint(d.name for d in loaded.heldout)
    assert len(loaded.train) + len(loaded.heldout) == 10
    # independent reference: hashlib over the files read back from disk
    digest = hashlib.sha256()
    for d in loaded.heldout:
        content = (tmp_path / d.name).read_bytes()[:12]
        assert d.content == content and d.sha256 == hashlib.sha256(content).hexdigest()
        digest.update(d.name.encode() + b"\0" + str(len(content)).encode() + b"\0" + content)
    assert loaded.heldout_sha256 == digest.hexdigest()
    again = corpus.load_corpus(
        max_files=10, max_bytes=12, heldout_fraction=0.3, seed=4, directory=tmp_path
    )
    assert again.identity() == loaded.identity()
    # changing one byte of one training file changes the training hash only
    changed = loaded.train[0].name
    (tmp_path / changed).write_bytes(b"@" + FILES[changed][1:])
    edited = corpus.load_corpus(
        max_files=10, max_bytes=12, heldout_fraction=0.3, seed=4, directory=tmp_path
    )
    assert (
        edited.train_sha256 != loaded.train_sha256
        and edited.heldout_sha256 == loaded.heldout_sha256
    )
    assert len(loaded.rows()) == 10 and loaded.rows()[0]["split"] == "train"


def test_stdlib_corpus_is_deterministic_and_packs():
    first = corpus.load_corpus(max_files=8, max_bytes=256)
    second = corpus.load_corpus(max_files=8, max_bytes=256)
    assert first.identity() == second.identity()
    np.testing.assert_array_equal(
        first.train[0].tokens, np.frombuffer(first.train[0].content, np.uint8)
    )
    packed = corpus.pack(first.train, 64)
    assert packed.segment_ids_BT.max() >= 1 and packed.tokens_BT.shape[1] == 64
    assert sum(p.length for p in packed.placements) == sum(len(d.content) for d in first.train)


@pytest.mark.parametrize("rows, batch", [(10, 3), (4, 4), (2, 5)])
def test_batch_rows_cover_an_epoch_and_repeat_exactly(rows, batch):
    per_epoch = max(1, rows // batch)
    picked = [corpus.batch_rows(rows, batch, step, seed=7) for step in range(per_epoch)]
    assert all(len(p) == batch for p in picked)
    flat = np.concatenate(picked)
    if rows >= batch:
        assert len(set(flat.tolist())) == len(flat), "no row twice within an epoch"
    np.testing.assert_array_equal(
        corpus.batch_rows(rows, batch, 1, seed=7), corpus.batch_rows(rows, batch, 1, seed=7)
    )
    with pytest.raises(ValueError, match="step"):
        corpus.batch_rows(rows, batch, -1, seed=0)
