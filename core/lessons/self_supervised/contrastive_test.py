import inspect
import math

import jax
import numpy as np
import pytest

from core.data import digits
from core.lessons.self_supervised import contrastive

IDENTITY = contrastive.Augment(min_crop=1.0, max_shift=0.0, noise_std=0.0)


def images(count=5, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (count, 8, 8)).astype(np.float32)


@pytest.mark.parametrize(
    "crop,shift", [(1.0, (0.0, 0.0)), (0.6, (0.3, -0.7)), (0.85, (1.5, 2.0)), (0.25, (-3.0, 0.5))]
)
def test_crop_resize_matches_loops(crop, shift):
    x = images(3)
    crops = np.full(3, crop)
    shifts = np.tile(np.asarray(shift), (3, 1))
    result = np.asarray(contrastive.crop_resize(x, crops, shifts))
    np.testing.assert_allclose(
        result, contrastive.crop_resize_reference(x, crops, shifts), atol=1e-5
    )


def test_identity_crop_and_whole_pixel_shift():
    x = images(2)
    np.testing.assert_array_equal(
        np.asarray(contrastive.crop_resize(x, np.ones(2), np.zeros((2, 2)))), x
    )
    shifted = np.asarray(
        contrastive.crop_resize(x, np.ones(2), np.array([[1.0, 0.0], [0.0, -2.0]]))
    )
    np.testing.assert_allclose(shifted[0, :7], x[0, 1:], atol=1e-6)  # content moves up a row
    np.testing.assert_array_equal(shifted[0, 7], 0.0)  # zeros come in from outside
    np.testing.assert_allclose(shifted[1, :, 2:], x[1, :, :6], atol=1e-6)


def test_augment_is_deterministic_bounded_and_config_validated():
    x = images(4)
    a, src = contrastive.two_views(jax.random.key(0), x, contrastive.Augment())
    b, _ = contrastive.two_views(jax.random.key(0), x, contrastive.Augment())
    c, _ = contrastive.two_views(jax.random.key(1), x, contrastive.Augment())
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    np.testing.assert_array_equal(src, [0, 1, 2, 3, 0, 1, 2, 3])
    noisy, _ = contrastive.two_views(
        jax.random.key(2), np.zeros((64, 8, 8), np.float32), contrastive.Augment(1.0, 0.0, 0.2)
    )
    assert abs(float(np.std(np.asarray(noisy))) - 0.2) < 0.01  # noise alone, std as asked
    for bad in (dict(min_crop=0.1), dict(max_shift=-1.0), dict(noise_std=-0.1)):
        with pytest.raises(ValueError):
            contrastive.Augment(**bad)


def test_identity_views_are_the_images():
    x = images(6)
    views, source = contrastive.two_views(jax.random.key(3), x, IDENTITY)
    np.testing.assert_array_equal(np.asarray(views), x[source])


@pytest.mark.parametrize("n", [1, 3, 8])
def test_positive_index_is_the_other_view(n):
    positives = contrastive.positive_index(n)
    rows = np.arange(2 * n)
    np.testing.assert_array_equal(positives[positives], rows)
    assert np.all(positives != rows)
    np.testing.assert_array_equal(rows % n, positives % n)  # same source image


def nt_xent_closed_form_numpy(z, t):
    """A second float64 formulation: masked log-softmax matrix, vectorised."""
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    s = z @ z.T / t
    np.fill_diagonal(s, -np.inf)
    log_softmax = (
        s
        - np.log(np.exp(s - s.max(1, keepdims=True)).sum(1, keepdims=True))
        - s.max(1, keepdims=True)
    )
    n = len(z) // 2
    return -np.mean(log_softmax[np.arange(2 * n), (np.arange(2 * n) + n) % (2 * n)])


@pytest.mark.parametrize("n,width", [(1, 3), (4, 8), (32, 16)])
@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
def test_nt_xent_matches_float64_references(n, width, temperature):
    z = np.random.default_rng(n * width).normal(size=(2 * n, width)).astype(np.float32)
    loss, anchors = contrastive.nt_xent(z, temperature)
    reference, reference_anchors = contrastive.nt_xent_reference(z, temperature)
    assert int(anchors) == reference_anchors == 2 * n
    assert abs(float(loss) - reference) <= 1e-5 * max(1.0, reference)
    assert abs(reference - nt_xent_closed_form_numpy(z.astype(np.float64), temperature)) < 1e-10


def test_nt_xent_closed_forms():
    # One image: the only candidate of each anchor is its positive, so the loss is log 1 = 0.
    assert float(contrastive.nt_xent(np.array([[1.0, 0.0], [0.3, 0.9]]), 0.5)[0]) == pytest.approx(
        0.0, abs=1e-6
    )
    # All rows identical: every candidate equally similar, loss = log(2N - 1).
    n = 5
    assert float(contrastive.nt_xent(np.ones((2 * n, 4)), 0.7)[0]) == pytest.approx(
        math.log(2 * n - 1), rel=1e-6
    )


def test_wrong_pairing_costs_and_retrieval_finds_positives():
    n = 6
    base = np.eye(8)[:n]  # orthogonal images; both views of an image embed identically
    z = np.concatenate([base, base]).astype(np.float32)
    right = float(contrastive.nt_xent(z, 0.2)[0])
    wrong = float(contrastive.nt_xent(z, 0.2, np.roll(contrastive.positive_index(n), 1))[0])
    # positive similarity 1 / t = 5, the 2N - 2 = 10 negatives 0 (closed form):
    assert right == pytest.approx(math.log(1 + 10 * math.exp(-5)), rel=1e-5)
    assert wrong == pytest.approx(math.log(math.exp(5) + 10), rel=1e-5)
    assert contrastive.positive_retrieval(z) == 1.0
    assert contrastive.positive_retrieval(z, np.roll(contrastive.positive_index(n), 1)) == 0.0


def test_nt_xent_rejects_bad_inputs():
    with pytest.raises(ValueError, match="2N"):
        contrastive.nt_xent(np.ones((3, 4)), 0.5)
    with pytest.raises(ValueError, match="temperature"):
        contrastive.nt_xent(np.ones((4, 4)), 0.0)


def test_pair_identity_audit_passes_and_catches_mistakes():
    x = images(8)
    views, source = contrastive.two_views(jax.random.key(4), x, contrastive.Augment())
    assert all(row["passed"] for row in contrastive.pair_identity_audit(views, source, x))
    wrong_source = np.concatenate([np.arange(8), np.roll(np.arange(8), 1)])  # B half shuffled
    audit = contrastive.pair_identity_audit(views, wrong_source, x)
    assert not audit[1]["passed"]
    identical, source = contrastive.two_views(jax.random.key(4), x, IDENTITY)
    assert not contrastive.pair_identity_audit(identical, source, x)[4]["passed"]


def encoder_reference(params, x):
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    h = np.maximum(np.asarray(x, np.float64).reshape(len(x), -1) @ p["enc0_w"] + p["enc0_b"], 0)
    h = np.maximum(h @ p["enc1_w"] + p["enc1_b"], 0)
    z = np.maximum(h @ p["head0_w"] + p["head0_b"], 0) @ p["head1_w"] + p["head1_b"]
    return h, z


@pytest.mark.parametrize("hidden,feature,embed", [(16, 8, 4), (128, 32, 32)])
def test_encoder_matches_numpy_float64(hidden, feature, embed):
    params = contrastive.init_model(jax.random.key(hidden), hidden, feature, embed)
    x = images(7)
    h, z = encoder_reference(params, x)
    np.testing.assert_allclose(
        np.asarray(contrastive.features_jit(params, x)), h, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(contrastive.embed_jit(params, x)), z, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="feature_width"):
        contrastive.init_model(jax.random.key(0), 16, 0, 4)


def test_training_lowers_the_loss_and_takes_no_labels():
    assert "labels" not in " ".join(inspect.signature(contrastive.train).parameters)
    x = digits.load(0.2, 0).x_train[:256, ..., 0]
    params = contrastive.init_model(jax.random.key(5), 32, 16, 16)
    result = contrastive.train(
        params,
        x,
        jax.random.key(6),
        contrastive.Augment(),
        0.5,
        steps=60,
        batch_size=32,
        learning_rate=0.005,
    )
    assert result.anchors == 64 and result.loss.shape == (60,)
    assert result.loss[-10:].mean() < result.loss[:10].mean() < math.log(63) + 0.5
    with pytest.raises(ValueError, match="batch_size"):
        contrastive.train(params, x, jax.random.key(6), contrastive.Augment(), 0.5, 10, 1, 0.01)


def test_probe_on_trained_features_beats_the_random_encoder():
    split = digits.load(0.2, 0)
    train_x, test_x = split.x_train[..., 0], split.x_test[..., 0]
    params = contrastive.init_model(jax.random.key(7), 128, 16, 32)  # the lesson's F = 16
    result = contrastive.train(
        params, train_x, jax.random.key(8), contrastive.Augment(), 0.5, 200, 128, 0.003
    )

    def probe(p):
        return contrastive.linear_probe(
            contrastive.features_jit(p, train_x),
            split.y_train,
            contrastive.features_jit(p, test_x),
            split.y_test,
        )["test accuracy"]

    assert probe(result.params) > probe(params) + 0.02


def test_linear_probe_on_known_problems():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    separable = np.eye(3)[labels] * 5 + rng.normal(scale=0.1, size=(300, 3))
    scores = contrastive.linear_probe(separable[:200], labels[:200], separable[200:], labels[200:])
    assert scores == {"train accuracy": 1.0, "test accuracy": 1.0}
    noise = rng.normal(size=(300, 4))
    chance = contrastive.linear_probe(noise[:200], labels[:200], noise[200:], labels[200:])[
        "test accuracy"
    ]
    assert chance < 0.55  # 3 classes: ~1/3 expected, 0.55 is > 4 binomial sigmas above


def test_augmentation_rows():
    x = images(4)
    views, _ = contrastive.two_views(jax.random.key(9), x, contrastive.Augment())
    rows = contrastive.augmentation_rows(x, views, limit=2)
    assert len(rows) == 3 * 2 * 64
    assert {r["panel"] for r in rows} == {"image", "view A", "view B"}


def lesson_claims(seed, temperature=0.5, feature_width=16, steps=200, batch=128, probe=True):
    """What apps/contrastive.py claims after training at its defaults (same keys as the app):
    margins of the loss below chance, of the wrong-pairing cost over 0.5 / t, of positive
    retrieval over the random encoder, and of the probe's gain over 2 points."""
    split = digits.load(0.2, 0)
    train_x, test_x = split.x_train[..., 0], split.x_test[..., 0]
    root = jax.random.key(seed)
    init_key, train_key = jax.random.fold_in(root, 0), jax.random.fold_in(root, 1)
    config = contrastive.Augment()
    params = contrastive.init_model(init_key, 128, feature_width, 32)
    result = contrastive.train(params, train_x, train_key, config, temperature, steps, batch, 0.003)
    views, _ = contrastive.two_views(jax.random.fold_in(root, 3), test_x[:batch], config)
    z = np.asarray(contrastive.embed_jit(result.params, views))
    loss = float(contrastive.nt_xent(z, temperature)[0])
    shifted = np.roll(contrastive.positive_index(batch), 1)
    wrong = float(contrastive.nt_xent(z, temperature, shifted)[0])
    random_z = np.asarray(contrastive.embed_jit(params, views))
    margins = {
        "loss below chance": math.log(2 * batch - 1) - result.loss[-1],
        "loss falls": result.loss[:20].mean() - result.loss[-20:].mean(),
        "wrong pairing cost - 0.5/t": wrong - loss - 0.5 / temperature,
        "retrieval gain": contrastive.positive_retrieval(z)
        - contrastive.positive_retrieval(random_z),
    }
    if probe:

        def accuracy(p):
            return contrastive.linear_probe(
                contrastive.features_jit(p, train_x),
                split.y_train,
                contrastive.features_jit(p, test_x),
                split.y_test,
            )["test accuracy"]

        margins["probe gain - 2 points"] = accuracy(result.params) - accuracy(params) - 0.02
    return margins


@pytest.mark.slow
def test_lesson_claims_hold_with_margin_over_seeds_and_temperatures():
    """The contrastive lesson's claims on 5 seeds at its defaults, and on 2 seeds at a colder
    and a warmer temperature (the wrong-pairing cost scales as 1/t). With the old default
    feature width 32 the probe's gain over the random encoder was as low as +3.9 points
    (seed 2): a random 32-feature encoder already reaches 82-89% on digits."""
    runs = [lesson_claims(seed) for seed in range(5)]
    runs += [lesson_claims(s, temperature=t, probe=False) for t in (0.25, 1.0) for s in (0, 1)]
    worst = {name: min(run[name] for run in runs if name in run) for name in runs[0]}
    print("worst margins:", {name: f"{value:.3f}" for name, value in worst.items()})
    assert all(value > 0 for value in worst.values()), worst
