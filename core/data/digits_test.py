import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from core import runtime
from core.data import digits
from core.nn import nnx_models, training

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_load_all_equals_scikit_learn():
    from sklearn import datasets

    images, labels = digits.load_all()
    reference = datasets.load_digits()
    assert images.shape == (1797, 8, 8, 1) and images.dtype == np.float32
    np.testing.assert_array_equal(labels, reference.target)
    np.testing.assert_allclose(images[..., 0], reference.images / 16.0, rtol=1e-7)


@pytest.mark.parametrize("fraction,seed", [(0.2, 0), (0.35, 3)])
def test_split_is_stratified_disjoint_and_deterministic(fraction, seed):
    _, labels = digits.load_all()
    train, test = digits.stratified_split(labels, fraction, seed)
    assert len(np.intersect1d(train, test)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(len(labels)))
    for c in range(10):
        assert np.sum(labels[test] == c) == round(fraction * np.sum(labels == c))
    again = digits.stratified_split(labels, fraction, seed)
    np.testing.assert_array_equal(test, again[1])
    assert not np.array_equal(test, digits.stratified_split(labels, fraction, seed + 1)[1])


def test_load_returns_the_split_images():
    split = digits.load(0.2, 0)
    assert split.sizes() == (len(split.y_train), len(split.y_test)) and sum(split.sizes()) == 1797
    assert split.x_train.min() >= 0 and split.x_train.max() <= 1 and split.y_test.dtype == np.int32
    with pytest.raises(ValueError, match="test fraction"):
        digits.load(0.9)


@pytest.mark.parametrize("n,classes", [(50, 10), (300, 4)])
def test_confusion_matrix_matches_scikit_learn(n, classes):
    from sklearn import metrics

    rng = np.random.default_rng(n)
    labels = rng.integers(0, classes, n)
    predicted = np.where(rng.random(n) < 0.7, labels, rng.integers(0, classes, n))
    reference = metrics.confusion_matrix(labels, predicted, labels=range(classes))
    np.testing.assert_array_equal(digits.confusion_matrix(predicted, labels, classes), reference)
    np.testing.assert_array_equal(
        digits.confusion_matrix_reference(predicted, labels, classes), reference
    )


def test_misclassified_lists_confident_mistakes_first():
    logits = np.array([[5.0, 0.0], [0.0, 1.0], [0.2, 0.0], [0.0, 9.0], [3.0, 0.0]])
    labels = np.array([0, 0, 1, 0, 0])
    wrong = digits.misclassified(logits, labels, limit=10)
    assert list(wrong) == [3, 1, 2]
    assert list(digits.misclassified(logits, labels, limit=2)) == [3, 1]


def test_pixel_rows_cover_each_image():
    split = digits.load()
    rows = digits.pixel_rows(split.x_test, [0, 5], ["a", "b"])
    assert len(rows) == 2 * 64 and {r["caption"] for r in rows} == {"a", "b"}
    assert rows[64 + 8 * 3 + 2]["ink"] == pytest.approx(float(split.x_test[5, 3, 2, 0]))


def lesson_cnn_accuracies(seeds) -> list[float]:
    """Held-out accuracy of the lesson's CNN trained at apps/cnn_digits.py's defaults, one per
    seed (split, init and batch order). One optimizer object for all seeds: nnx.jit compiles
    once."""
    from sklearn import metrics

    lesson = digits.CNN_LESSON
    epochs, batch_size = lesson["epochs"], lesson["batch_size"]
    train_size = digits.load(lesson["test_fraction"], 0).sizes()[0]
    schedule = optax.cosine_decay_schedule(
        lesson["learning_rate"], epochs * (train_size // batch_size)
    )
    tx = training.make_optimizer("adam", schedule)
    accuracies = []
    for seed in seeds:
        split = digits.load(lesson["test_fraction"], seed)
        assert split.sizes()[0] == train_size  # stratified: the same sizes for every seed
        model = nnx_models.CNN(
            rngs=nnx.Rngs(params=jax.random.key(seed, impl="rbg")),
            channels=(lesson["channels1"], lesson["channels2"]),
        )
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        training.fit(
            model, optimizer, split.x_train, split.y_train,
            epochs=epochs, batch_size=batch_size, seed=seed,
        )
        logits = np.asarray(training.eval_step(model, split.x_test, split.y_test)["logits"])
        accuracies.append(float(metrics.accuracy_score(split.y_test, logits.argmax(axis=1))))
    return accuracies


@pytest.mark.slow
def test_the_lesson_cnn_reaches_its_target_on_every_seed():
    # apps/cnn_digits.py claims its defaults reach digits.TARGET_ACCURACY (95%). Proven here
    # over 5 seeds, each at least a point above it (measured: 97.2% worst of 8 seeds).
    # Trained in a child compiled with XLA's default optimization, as a learner's run is: the
    # suite's fast-compile flags (core.runtime) leave a CNN's large elementwise work
    # unvectorized, several times slower than the compile they save.
    code = (
        "import json; from core.data.digits_test import lesson_cnn_accuracies; "
        "print('ACCURACIES', json.dumps(lesson_cnn_accuracies(range(5))))"
    )
    env = runtime.child_env(
        XLA_FLAGS=runtime.without_fast_compile(os.environ.get("XLA_FLAGS", "")),
        PYTHONPATH=runtime.python_path(REPO_ROOT),
    )
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    line = next(line for line in child.stdout.splitlines() if line.startswith("ACCURACIES "))
    accuracies = json.loads(line.split(" ", 1)[1])
    assert len(accuracies) == 5
    print(f"cnn_digits defaults, 5 seeds: worst test accuracy {min(accuracies):.4f} "
          f"(claim >= {digits.TARGET_ACCURACY})")
    assert min(accuracies) >= digits.TARGET_ACCURACY + 0.01
