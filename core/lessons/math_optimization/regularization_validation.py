"""Lesson code of "Regularization and honest validation".

Part 1, ridge by gradient descent: minimize L(w) = ||X w - y||^2 / (2 n) + lam ||w||^2 / 2 on
the training split from w = 0 with a fixed step eta. L is quadratic, A = X^T X / n + lam I,
b = X^T y / n, so every step has a closed form (float64, by the eigendecomposition A = V S V^T):

    w_t = V diag((1 - (1 - eta s)^t) / s) V^T b          (eta t where s = 0)

Early stopping keeps the w_t with the lowest validation loss; a held-out test split reports it.

Part 2, leakage: pure-noise features, random labels. Choosing the k features most correlated
with the label on the *whole* data set lets the validation rows vote in the choice, and a
classifier that cannot beat a coin flip on new data scores well on them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from core.nn import chunked

INFORMATIVE = 5  # nonzero weights of the true model
# The early-stopping claim: at the defaults (n_train = features = 40, noise 1, lam 0), the
# early-stopped test loss is at least 1.5x lower than the final one over every seed of
# CLAIM_SEEDS (measured: >= 3x). Leakage: the mean inflation over LEAK_CLAIM_SEEDS is at least
# 0.15 accuracy, and leaky beats honest on at least 90% of the seeds.
CLAIM_SEEDS = tuple(range(8))
DEFAULT_LR_FRACTION = 0.9  # the claim's step: 0.9 x the stability limit of each seed's data
EARLY_STOP_MARGIN = 1.5
LEAK_CLAIM_SEEDS = tuple(range(30))
LEAK_MIN_INFLATION = 0.15


def problem(lr_fraction: float, l2: float, k: int, noise_features: int) -> str | None:
    """Why these settings cannot run, or None (``lr_fraction``: the step as a fraction of the
    stability limit 2 / lambda_max(A))."""
    if l2 < 0:
        return (
            f"an L2 strength of {l2:g} is negative: it rewards large weights, and the loss has "
            "no minimum once lam < -(smallest eigenvalue of X^T X / n)"
        )
    if lr_fraction >= 1:
        return (
            f"a step of {lr_fraction:g} x the stability limit 2 / lambda_max(A) is not below "
            f"it: along the steepest direction of the training loss the error is multiplied by "
            f"|1 - {2 * lr_fraction:g}| >= 1 every step, so gradient descent never settles "
            "(past the limit it diverges)"
        )
    if k > noise_features:
        return f"cannot select {k} features out of {noise_features}"
    return None


def make_splits(key, n_train: int, n_val: int, n_test: int, features: int, noise: float):
    """{"train"|"val"|"test": (x_ND, y_N)} float32 from y = x w* + noise (w* has INFORMATIVE
    nonzero entries of size ~1)."""
    kx, kw, kn = jax.random.split(key, 3)
    n = n_train + n_val + n_test
    x = jax.random.normal(kx, (n, features))
    w_true = jnp.where(jnp.arange(features) < INFORMATIVE, jax.random.normal(kw, (features,)), 0)
    y = x @ w_true + noise * jax.random.normal(kn, (n,))
    cuts = np.cumsum([n_train, n_val])
    parts = zip(np.split(np.asarray(x), cuts), np.split(np.asarray(y), cuts), strict=True)
    return dict(zip(("train", "val", "test"), parts, strict=True))


def quadratic(x_ND, y_N, l2: float):
    """(A_DD, b_D) of the training loss, float64."""
    x, y = np.asarray(x_ND, np.float64), np.asarray(y_N, np.float64)
    return x.T @ x / len(y) + l2 * np.eye(x.shape[1]), x.T @ y / len(y)


def stability_limit(x_ND, y_N, l2: float) -> float:
    a, _ = quadratic(x_ND, y_N, l2)
    return 2.0 / float(np.linalg.eigvalsh(a).max())


def _gd_step(w_D, _index, x_ND, y_N, l2, learning_rate):
    """One gradient step on the ridge loss: (w_next, w_next)."""

    def loss(w):
        return jnp.mean((x_ND @ w - y_N) ** 2) / 2 + l2 * jnp.sum(w**2) / 2

    w_D = w_D - learning_rate * jax.grad(loss)(w_D)
    return w_D, w_D


# Steps per compiled chunk (core.nn.chunked): the steps control moves by 50, so every count it
# offers reuses one program (one scan of the run compiled again for every count).
STEPS_CHUNK = 50
_gd_chunks = chunked.ChunkedScan(_gd_step, chunk=STEPS_CHUNK)


def gd_path(x_ND, y_N, l2, learning_rate, steps: int) -> np.ndarray:
    """w after every step (steps + 1, D) of gradient descent from 0, float32."""
    w0 = np.zeros(np.shape(x_ND)[1], np.float32)
    _, ws = _gd_chunks(w0, x_ND, y_N, l2, learning_rate, steps=steps)
    return np.concatenate([w0[None], ws])


def closed_form_path(x_ND, y_N, l2: float, learning_rate: float, steps: int) -> np.ndarray:
    """w_t for t = 0..steps (steps + 1, D) from the eigendecomposition, float64."""
    a, b = quadratic(x_ND, y_N, l2)
    s, v = np.linalg.eigh(a)
    c = v.T @ b
    t = np.arange(steps + 1)[:, None]
    safe = np.where(np.abs(s) > 1e-12, s, 1.0)
    factor = np.where(
        np.abs(s) > 1e-12, (1 - (1 - learning_rate * s) ** t) / safe, learning_rate * t
    )
    return (factor * c) @ v.T


def mse(path_SD, x_ND, y_N) -> np.ndarray:
    """Mean squared error of every w in path_SD on (x, y), float64: (S,)."""
    x, y = np.asarray(x_ND, np.float64), np.asarray(y_N, np.float64)
    return np.mean((np.asarray(path_SD, np.float64) @ x.T - y) ** 2, axis=1)


def early_stopping(curves: dict) -> dict:
    """The step with the lowest validation loss and the test loss there vs at the end."""
    best = int(np.argmin(curves["val"]))
    return {
        "best step": best,
        "val at best": float(curves["val"][best]),
        "test at best": float(curves["test"][best]),
        "test at end": float(curves["test"][-1]),
        "val at end": float(curves["val"][-1]),
    }


def run_split(key, n_train, n_val, n_test, features, noise, l2, lr_fraction, steps):
    """One seed of part 1 at lr = lr_fraction x the stability limit: (splits, path, curves)."""
    splits = make_splits(key, n_train, n_val, n_test, features, noise)
    lr = lr_fraction * stability_limit(*splits["train"], l2)
    path = np.asarray(gd_path(*splits["train"], l2, lr, steps))
    curves = {name: mse(path, *xy) for name, xy in splits.items()}
    return splits, path, curves


def leak_trial(seed: int, examples: int, noise_features: int, k: int, val_fraction=0.5):
    """Part 2 for one seed: {"honest": acc, "leaky": acc} on the validation split (NumPy).

    Random labels +-1 and pure-noise features: any classifier's true accuracy is 0.5. Both
    pipelines pick the k features with the largest |correlation| with the label, fit least
    squares on the training split and score sign(x w) on the validation split; the leaky one
    picks them using every row, validation included.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, noise_features))
    y = rng.choice([-1.0, 1.0], examples)
    n_val = int(round(val_fraction * examples))
    train, val = slice(n_val, None), slice(0, n_val)

    def select(rows):
        xc = x[rows] - x[rows].mean(0)
        yc = y[rows] - y[rows].mean()
        corr = np.abs(xc.T @ yc) / (np.linalg.norm(xc, axis=0) * np.linalg.norm(yc) + 1e-12)
        return np.argsort(-corr)[:k]

    scores = {}
    for name, rows in (("honest", train), ("leaky", slice(None))):
        cols = select(rows)
        w, *_ = np.linalg.lstsq(x[train][:, cols], y[train], rcond=None)
        scores[name] = float(np.mean(np.sign(x[val][:, cols] @ w) == y[val]))
    return scores


def leak_summary(seeds, examples, noise_features, k) -> dict:
    trials = [leak_trial(s, examples, noise_features, k) for s in seeds]
    honest = np.array([t["honest"] for t in trials])
    leaky = np.array([t["leaky"] for t in trials])
    return {
        "honest": honest,
        "leaky": leaky,
        "inflation": float(np.mean(leaky - honest)),
        "leaky wins": float(np.mean(leaky > honest)),
    }


def leak_trial_sklearn(seed: int, examples: int, noise_features: int, k: int, val_fraction=0.5):
    """The same two pipelines in scikit-learn (SelectKBest(f_regression) + LinearRegression
    without intercept), on the same data: the reference for ``leak_trial``."""
    from sklearn.feature_selection import SelectKBest, f_regression
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, noise_features))
    y = rng.choice([-1.0, 1.0], examples)
    n_val = int(round(val_fraction * examples))
    x_val, y_val, x_train, y_train = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    scores = {}
    for name, (xs, ys) in (("honest", (x_train, y_train)), ("leaky", (x, y))):
        selector = SelectKBest(f_regression, k=k).fit(xs, ys)
        model = LinearRegression(fit_intercept=False).fit(selector.transform(x_train), y_train)
        predicted = np.sign(model.predict(selector.transform(x_val)))
        scores[name] = float(np.mean(predicted == y_val))
    return scores


def ridge_sweep(splits, l2_values) -> list[dict]:
    """Train/val/test MSE of the exact ridge solution A^-1 b (float64) for every lam > 0."""
    rows = []
    for lam in l2_values:
        a, b = quadratic(*splits["train"], float(lam))
        w = np.linalg.solve(a, b)
        rows += [
            {"L2 lam": float(lam), "split": name, "MSE": float(mse(w[None], *xy)[0])}
            for name, xy in splits.items()
        ]
    return rows
