"""Hyperparameter sweeps with Optuna (TPE, sqlite storage), every trial logged to MLflow, and
the same study as a Vertex AI Vizier study spec.

The objective is a real training run: optax SGD with momentum, ``steps`` full-batch steps on
a least-squares problem (one jitted ``lax.scan``; the learning rate and momentum are traced
arguments, so every trial reuses one compilation). Its final loss has a closed form in float64
(the iteration is linear: per eigenvalue l of the Hessian, the error and velocity follow
[[1 - lr l, -lr mu], [l, mu]]), which gives an independent reference for every trial and, with
scipy, the true optimum of the sweep's box.

The Vizier document follows the Vertex AI StudySpec REST resource (metrics[].metricId/goal,
parameters[].parameterId/doubleValueSpec/scaleType, algorithm;
cloud.google.com/vertex-ai/docs/reference/rest/v1/StudySpec, read 2026-12-03). Vertex has no
TPE: the spec asks for ALGORITHM_UNSPECIFIED, Vizier's default Bayesian optimization.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import time
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pydantic

from core import documents

LR_RANGE = (1e-3, 30.0)  # log scale: from far too slow to divergent (the optimum inside)
MOMENTUM_RANGE = (0.0, 0.95)
DIVERGED = 6.0  # objective of a run whose loss overflowed or passed 1e6: log10(1e6)
METRIC = "log10_final_loss"


@dataclasses.dataclass(frozen=True)
class Problem:
    """Least squares 1/(2n) |X w - y|^2 from w = 0, with a spread of curvatures."""

    x_ND: np.ndarray
    y_N: np.ndarray
    steps: int

    @property
    def hessian(self) -> np.ndarray:
        x = self.x_ND.astype(np.float64)
        return x.T @ x / len(x)


def make_problem(seed: int = 0, n: int = 64, d: int = 8, steps: int = 20) -> Problem:
    """Features with curvatures spread over two decades, noisy targets (minimum loss > 0)."""
    if n < d or d < 1 or steps < 1:
        raise ValueError(f"need n >= d >= 1 and steps >= 1, got n={n}, d={d}, steps={steps}")
    rng = np.random.default_rng(seed)
    scales = np.geomspace(1.0, 0.1, d)
    x = (rng.standard_normal((n, d)) * scales).astype(np.float32)
    w_true = rng.standard_normal(d)
    y = (x @ w_true + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return Problem(x, y, steps)


@jax.jit
def _train(x_ND, y_N, lr, momentum, steps_marker):
    def loss(w):
        r = x_ND @ w - y_N
        return 0.5 * jnp.mean(r * r)

    tx = optax.sgd(lr, momentum)
    w = jnp.zeros(x_ND.shape[1], x_ND.dtype)

    def step(carry, _):
        w, state = carry
        value, grad = jax.value_and_grad(loss)(w)
        updates, state = tx.update(grad, state, w)
        return (optax.apply_updates(w, updates), state), value

    (w, _), losses = jax.lax.scan(step, (w, tx.init(w)), None, length=steps_marker.shape[0])
    return jnp.append(losses, loss(w))


def train(problem: Problem, lr: float, momentum: float) -> np.ndarray:
    """Losses before each step and after the last (steps + 1 values, float32)."""
    marker = np.zeros(problem.steps, np.int8)  # the scan length as a shape: one compile per T
    return np.asarray(
        _train(problem.x_ND, problem.y_N, np.float32(lr), np.float32(momentum), marker)
    )


def closed_form_losses(problem: Problem, lr: float, momentum: float) -> np.ndarray:
    """The same losses in float64 from the eigen-decomposition of the Hessian (no optax)."""
    x = problem.x_ND.astype(np.float64)
    y = problem.y_N.astype(np.float64)
    w_star, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = x @ w_star - y
    floor = 0.5 * np.mean(r * r)
    curvatures, vectors = np.linalg.eigh(problem.hessian)
    error = vectors.T @ (0.0 - w_star)  # w0 = 0
    velocity = np.zeros_like(error)
    losses = []
    for _ in range(problem.steps + 1):
        losses.append(floor + 0.5 * np.sum(curvatures * error**2))
        velocity = momentum * velocity + curvatures * error
        error = error - lr * velocity
    return np.asarray(losses)


def objective_value(final_loss: float) -> float:
    """log10 of the final loss, DIVERGED for an overflow or a loss past 1e6."""
    if not math.isfinite(final_loss) or final_loss > 10**DIVERGED:
        return DIVERGED
    return math.log10(final_loss)


def true_optimum(problem: Problem, seed: int = 0) -> tuple[float, float, float]:
    """(objective, lr, momentum) minimizing the closed form over the box (scipy, float64)."""
    from scipy import optimize

    def f(z):
        return objective_value(closed_form_losses(problem, 10 ** z[0], z[1])[-1])

    bounds = [tuple(np.log10(LR_RANGE)), MOMENTUM_RANGE]
    result = optimize.differential_evolution(f, bounds, seed=seed, tol=1e-10, polish=True)
    return float(result.fun), float(10 ** result.x[0]), float(result.x[1])


@dataclasses.dataclass(frozen=True)
class Trial:
    number: int
    lr: float
    momentum: float
    value: float
    losses: np.ndarray
    seconds: float
    run_id: str = ""


def run_sweep(
    run_dir: str | os.PathLike,
    problem: Problem,
    n_trials: int,
    seed: int = 0,
    sampler: Literal["tpe", "random"] = "tpe",
    track: bool = True,
    study_name: str = "capacity-cost-sweep",
    in_memory: bool = False,
) -> list[Trial]:
    """An Optuna study in ``run_dir/optuna.db`` (sqlite; ``in_memory``: Optuna's in-memory
    storage, same sampler, for tests of the sampler alone); each trial also an MLflow run."""
    import optuna

    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_dir = pathlib.Path(run_dir)
    if track or not in_memory:
        run_dir.mkdir(parents=True, exist_ok=True)
    samplers = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }
    if sampler not in samplers:
        raise ValueError(f"sampler must be one of {sorted(samplers)}, got {sampler!r}")
    study = optuna.create_study(
        study_name=study_name,
        storage=None if in_memory else f"sqlite:///{run_dir.absolute() / 'optuna.db'}",
        sampler=samplers[sampler](),
        direction="minimize",
        load_if_exists=True,
    )
    tracker = None
    if track:
        from core.state import tracking

        tracker = tracking.Tracker(run_dir / "mlflow", experiment=study_name)
    trials = []

    def objective(trial):
        lr = trial.suggest_float("lr", *LR_RANGE, log=True)
        momentum = trial.suggest_float("momentum", *MOMENTUM_RANGE)
        start = time.perf_counter()
        losses = train(problem, lr, momentum)
        seconds = time.perf_counter() - start
        value = objective_value(float(losses[-1]))
        run_id = ""
        if tracker is not None:
            history = {i: float(v) for i, v in enumerate(losses) if math.isfinite(v)}
            run_id = tracker.log_run(
                f"trial-{trial.number}",
                params={"lr": lr, "momentum": momentum, "sampler": sampler, "seed": seed},
                metrics={"loss": history, METRIC: {0: value}},
                tags={"optuna.study": study_name, "optuna.trial": str(trial.number)},
            )
        trials.append(Trial(trial.number, lr, momentum, value, losses, seconds, run_id))
        return value

    study.optimize(objective, n_trials=n_trials)
    return trials


class DoubleValueSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    minValue: float
    maxValue: float


class ParameterSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    parameterId: str = pydantic.Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_]*$")
    doubleValueSpec: DoubleValueSpec
    scaleType: Literal["UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"]

    @pydantic.model_validator(mode="after")
    def _range(self) -> ParameterSpec:
        spec = self.doubleValueSpec
        if not spec.minValue < spec.maxValue:
            raise ValueError(f"{self.parameterId}: minValue must be below maxValue")
        if self.scaleType == "UNIT_LOG_SCALE" and spec.minValue <= 0:
            raise ValueError(f"{self.parameterId}: a log scale needs minValue > 0")
        return self


class MetricSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    metricId: str
    goal: Literal["MAXIMIZE", "MINIMIZE"]


class StudySpec(pydantic.BaseModel):
    """The Vertex AI Vizier StudySpec fields this course writes."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    metrics: list[MetricSpec] = pydantic.Field(min_length=1)
    parameters: list[ParameterSpec] = pydantic.Field(min_length=1)
    algorithm: Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"]


def vizier_spec(sampler: str = "tpe") -> dict:
    """The sweep as a Vizier StudySpec (validated): TPE -> Vizier's default algorithm."""
    spec = {
        "metrics": [{"metricId": METRIC, "goal": "MINIMIZE"}],
        "parameters": [
            {"parameterId": "lr", "scaleType": "UNIT_LOG_SCALE",
             "doubleValueSpec": {"minValue": LR_RANGE[0], "maxValue": LR_RANGE[1]}},
            {"parameterId": "momentum", "scaleType": "UNIT_LINEAR_SCALE",
             "doubleValueSpec": {"minValue": MOMENTUM_RANGE[0], "maxValue": MOMENTUM_RANGE[1]}},
        ],
        "algorithm": "RANDOM_SEARCH" if sampler == "random" else "ALGORITHM_UNSPECIFIED",
    }  # fmt: skip
    return documents.validate(StudySpec, spec, "Vizier study spec")


def write_vizier_spec(path: str | os.PathLike, spec: dict) -> pathlib.Path:
    """Validate, then write atomically (JSON)."""
    import json

    documents.validate(StudySpec, spec, "Vizier study spec")
    return documents.write_text_atomic(path, json.dumps(spec, indent=2) + "\n")
