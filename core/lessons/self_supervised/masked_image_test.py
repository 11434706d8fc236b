import jax
import numpy as np
import pytest

from core.data import digits
from core.lessons.self_supervised import masked_image

PATCHES = [1, 2, 4, 8]


def images(count=6, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (count, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("patch", PATCHES)
def test_patchify_matches_loops_and_inverts(patch):
    x = images()
    patches = masked_image.patchify(x, patch)
    assert patches.shape == (6, (8 // patch) ** 2, patch * patch)
    np.testing.assert_array_equal(
        np.asarray(patches), masked_image.patchify_reference(x, patch).astype(np.float32)
    )
    np.testing.assert_array_equal(np.asarray(masked_image.unpatchify(patches, patch)), x)


@pytest.mark.parametrize("patch", [0, 3, 5, 6, 7, 9])
def test_a_patch_that_does_not_tile_is_refused(patch):
    assert "tile" in masked_image.patch_problem(patch)
    with pytest.raises(ValueError, match="tile"):
        masked_image.num_patches(patch)


@pytest.mark.parametrize(
    "patch,ratio,problem",
    [
        (2, 0.5, None),
        (2, 0.02, "nothing to predict"),
        (4, 0.95, "no visible"),
        (8, 0.5, "nothing to predict"),
        (1, 0.95, None),
    ],
)
def test_mask_ratio_problems(patch, ratio, problem):
    found = masked_image.mask_ratio_problem(patch, ratio)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize("patch,ratio", [(2, 0.5), (1, 0.75), (4, 0.25)])
def test_hidden_patches_hide_exactly_k_per_image_and_vary(patch, ratio):
    hidden = masked_image.hidden_patches(jax.random.key(0), 200, patch, ratio)
    patches = masked_image.num_patches(patch)
    k = masked_image.num_hidden(patches, ratio)
    assert hidden.shape == (200, patches)
    assert np.all(hidden.sum(axis=1) == k)
    # every patch is hidden in roughly k / P of the images (binomial, 5 sigma)
    frequency = hidden.mean(axis=0)
    sigma = np.sqrt(k / patches * (1 - k / patches) / 200)
    assert np.all(np.abs(frequency - k / patches) < 5 * sigma + 1e-9)
    np.testing.assert_array_equal(
        hidden, masked_image.hidden_patches(jax.random.key(0), 200, patch, ratio)
    )


def test_hidden_from_uniforms_picks_the_smallest():
    uniforms = np.array([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.7, 0.1]])
    np.testing.assert_array_equal(
        masked_image.hidden_from_uniforms(uniforms, 2),
        [[False, True, False, True], [True, False, False, True]],
    )


@pytest.mark.parametrize("patch", [1, 2, 4])
def test_model_inputs_zero_exactly_the_hidden_pixels(patch):
    x = images(4, seed=patch) + 0.1  # no zero pixels, so a zero means "hidden"
    hidden = masked_image.hidden_patches(jax.random.key(patch), 4, patch, 0.5)
    inputs = np.asarray(masked_image.model_inputs(x, hidden, patch))
    expected_hidden = np.zeros((4, 8, 8), bool)
    grid = 8 // patch
    for n, p in zip(*np.nonzero(hidden), strict=True):
        gy, gx = divmod(p, grid)
        expected_hidden[n, gy * patch : (gy + 1) * patch, gx * patch : (gx + 1) * patch] = True
    np.testing.assert_array_equal(inputs[:, 64:].reshape(4, 8, 8) > 0, expected_hidden)
    np.testing.assert_array_equal(inputs[:, :64].reshape(4, 8, 8) == 0, expected_hidden)
    np.testing.assert_allclose(
        inputs[:, :64].reshape(4, 8, 8)[~expected_hidden], x[~expected_hidden]
    )


@pytest.mark.parametrize("hidden_units", [16, 128])
def test_predict_matches_numpy_float64(hidden_units):
    params = masked_image.init_model(jax.random.key(hidden_units), hidden_units)
    x = np.random.default_rng(1).uniform(0, 1, (5, 128)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(masked_image.predict(params, x)),
        masked_image.predict_reference(params, x),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("patch,ratio", [(2, 0.5), (4, 0.25), (1, 0.9)])
def test_hidden_mse_matches_float64_path(patch, ratio):
    params = masked_image.init_model(jax.random.key(3), 32)
    x = images(7, seed=2)
    hidden = masked_image.hidden_patches(jax.random.key(4), 7, patch, ratio)
    loss, count, everywhere, predicted = masked_image.evaluate(params, x, hidden, patch)
    reference, reference_count = masked_image.hidden_mse_reference(params, x, hidden, patch)
    k = masked_image.num_hidden(masked_image.num_patches(patch), ratio)
    assert int(count) == reference_count == 7 * k * patch * patch
    assert abs(float(loss) - reference) <= 1e-5 * max(reference, 1e-3)
    np.testing.assert_allclose(
        float(everywhere), np.mean((np.asarray(predicted, np.float64) - x) ** 2), rtol=1e-5
    )


def test_hidden_mse_ignores_visible_pixels():
    x = images(3)
    hidden = np.zeros((3, 16), bool)
    hidden[:, 0] = True
    predicted = x.copy()
    predicted[:, 4:, 4:] = 99.0  # wrong only in visible pixels
    loss, count = masked_image.hidden_mse(predicted, x, hidden, 2)
    assert float(loss) == 0.0 and int(count) == 3 * 4


def test_leakage_audit_passes_and_catches_a_leak(monkeypatch):
    params = masked_image.init_model(jax.random.key(5), 32)
    x = images(5)
    hidden = masked_image.hidden_patches(jax.random.key(6), 5, 2, 0.5)
    assert all(row["passed"] for row in masked_image.leakage_audit(params, x, hidden, 2))

    def forgets_to_blank(images, hidden, patch):  # a broken pipeline: hidden pixels stay
        indicator = np.asarray(masked_image.pixel_mask(hidden, patch)).reshape(len(images), 64)
        return np.concatenate([np.asarray(images).reshape(len(images), 64), indicator], axis=1)

    monkeypatch.setattr(masked_image, "model_inputs", forgets_to_blank)
    audit = masked_image.leakage_audit(params, x, hidden, 2)
    assert not audit[0]["passed"] and not audit[3]["passed"] and not audit[4]["passed"]


def test_training_beats_the_baselines_on_digits():
    split = digits.load(0.2, 0)
    train, test = split.x_train[..., 0], split.x_test[..., 0]
    params = masked_image.init_model(jax.random.key(7), 64)
    result = masked_image.train(
        params, train, jax.random.key(8), 2, 0.5, steps=200, batch_size=64, learning_rate=0.003
    )
    assert result.loss.shape == (200,) and np.all(result.count == 64 * 8 * 4)
    hidden = masked_image.hidden_patches(jax.random.key(9), len(test), 2, 0.5)
    loss, *_ = masked_image.evaluate(result.params, test, hidden, 2)
    scores = masked_image.baselines(train, test, hidden, 2)
    assert float(loss) < min(scores.values())


def test_baselines_closed_form():
    x = np.full((2, 8, 8), 0.5, np.float32)
    hidden = np.zeros((2, 4), bool)
    hidden[:, 0] = True
    scores = masked_image.baselines(x, x, hidden, 4)
    assert scores["predict 0 (background)"] == pytest.approx(0.25)
    assert scores["mean training image"] == pytest.approx(0.0)
    assert scores["mean of the visible pixels"] == pytest.approx(0.0)


def test_composite_and_grid_rows():
    x = images(2)
    hidden = np.zeros((2, 4), bool)
    hidden[:, 3] = True
    predicted = np.full_like(x, 2.0)
    shown = masked_image.composite(x, predicted, hidden, 4)
    np.testing.assert_array_equal(shown[:, 4:, 4:], 1.0)  # predictions clipped to [0, 1]
    np.testing.assert_array_equal(shown[:, :4, :], x[:, :4, :])
    rows = masked_image.grid_rows(
        {"original": x, "masked input": x},
        np.asarray(masked_image.pixel_mask(hidden, 4)),
        mark_hidden_in=("masked input",),
        limit=1,
    )
    assert len(rows) == 2 * 64
    assert sum(r["hidden"] for r in rows) == 16 and all(
        not r["hidden"] for r in rows if r["panel"] == "original"
    )


def test_bad_training_settings_name_the_problem():
    params = masked_image.init_model(jax.random.key(0), 16)
    with pytest.raises(ValueError, match="tile"):
        masked_image.train(params, images(), jax.random.key(0), 3, 0.5, 10, 8, 0.01)
    with pytest.raises(ValueError, match="steps"):
        masked_image.train(params, images(), jax.random.key(0), 2, 0.5, 0, 8, 0.01)
    with pytest.raises(ValueError, match="hidden units"):
        masked_image.init_model(jax.random.key(0), 0)


def lesson_margin(seed, patch=2, mask_ratio=0.5):
    """apps/masked_image.py's claim at its training defaults (same keys as the app): the
    trained model's test hidden-pixel MSE as a fraction of the best no-learning baseline
    (the claim: < 1), and whether the training loss fell (last 20 vs first 20 steps)."""
    split = digits.load(0.2, 0)
    train, test = split.x_train[..., 0], split.x_test[..., 0]
    root = jax.random.key(seed)
    init_key, train_key, eval_key = (jax.random.fold_in(root, i) for i in range(3))
    params = masked_image.init_model(init_key, 128)
    result = masked_image.train(params, train, train_key, patch, mask_ratio, 300, 128, 0.003)
    hidden = masked_image.hidden_patches(eval_key, len(test), patch, mask_ratio)
    loss, *_ = masked_image.evaluate(result.params, test, hidden, patch)
    best_baseline = min(masked_image.baselines(train, test, hidden, patch).values())
    return float(loss) / best_baseline, result.loss[-20:].mean() < result.loss[:20].mean()


@pytest.mark.slow
def test_lesson_claim_holds_with_margin_over_seeds_patches_and_ratios():
    """The masked_image lesson's claim on 5 seeds at its defaults (patch 2, ratio 0.5) and
    on one seed at the corners patch {2, 4} x ratio {0.25, 0.75}: the model's test MSE is
    at most 0.9x the best baseline's (measured: <= 0.71 at the defaults, <= 0.86 anywhere)."""
    runs = [lesson_margin(seed) for seed in range(5)]
    runs += [lesson_margin(0, p, r) for p in (2, 4) for r in (0.25, 0.75)]
    worst = max(ratio for ratio, _ in runs)
    print(f"worst test MSE / best baseline: {worst:.3f} (claim < 1)")
    assert all(fell for _, fell in runs)
    assert worst < 0.9
