import inspect
import sys
import types

import jax
import optax
import pytest

from core import numerics
from core.optim import optimizers, references, schedules

STEPS = 100
# Over 100 float32 steps the hand-written and optax's updates round differently; the
# parameters (magnitude ~1) stay within a few ulps of each other: the bound.
AGREEMENT = 1e-6
# torch.optim.AdamW rounds the parameters twice a step (decay, then the Adam step): over 100
# steps that walks a few ulps further, so torch is compared relative to the parameters' scale.
TORCH_AGREEMENT = numerics.tolerance("float32")


def _problem(seed, shapes, grad_scale=1.0):
    """float32 params ~ N(0, 1) and STEPS gradients ~ N(0, grad_scale^2)."""
    keys = jax.random.split(jax.random.key(seed), 2 * len(shapes))
    params = {f"p{i}": jax.random.normal(keys[i], s) for i, s in enumerate(shapes)}
    grads_S = {
        f"p{i}": grad_scale * jax.random.normal(keys[len(shapes) + i], (STEPS, *s))
        for i, s in enumerate(shapes)
    }
    return params, grads_S


def _max_diff(a, b):
    return max(
        numerics.max_abs_error(x, y)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


SHAPES = [[(3,)], [(4, 5), (5,)], [(2, 3, 4), (1,)]]
SCHEDULE = schedules.warmup_cosine(0.0, 3e-3, 10, STEPS, 1e-4)
OPTAX_SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 10, STEPS, 1e-4)


# Gradients of size ~1 make eps (1e-8 .. 1e-6) negligible beside sqrt(s) ~ 1: where eps sits
# (inside the square root, before the bias correction) then changes nothing measurable. Small
# gradients (sqrt(s) ~ 1e-6, eps 1e-8: a 1% term) and a large eps (0.1 beside sqrt(s) ~ 1) are
# where it shows (issue 25).
SMALL_GRADS = 1e-6
CASES = {
    "sgd": (lambda o: o.sgd(0.01), lambda: optax.sgd(0.01), 1.0),
    "momentum": (lambda o: o.momentum(0.01, 0.9), lambda: optax.sgd(0.01, momentum=0.9), 1.0),
    "adam": (lambda o: o.adam(1e-3), lambda: optax.adam(1e-3), 1.0),
    "adamw": (
        lambda o: o.adamw(3e-3, o.AdamConfig(0.8, 0.99, 1e-6, 0.05)),
        lambda: optax.adamw(3e-3, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.05),
        1.0,
    ),
    "adamw_schedule": (
        lambda o: o.adamw(SCHEDULE, o.AdamConfig(weight_decay=0.1)),
        lambda: optax.adamw(OPTAX_SCHEDULE, weight_decay=0.1),
        1.0,
    ),
    "adam_small_grads": (lambda o: o.adam(1e-3), lambda: optax.adam(1e-3), SMALL_GRADS),
    "adam_large_eps": (lambda o: o.adam(1e-2, eps=0.1), lambda: optax.adam(1e-2, eps=0.1), 1.0),
    "adamw_small_grads": (
        lambda o: o.adamw(SCHEDULE, o.AdamConfig(0.9, 0.99, 1e-8, 0.1)),
        lambda: optax.adamw(OPTAX_SCHEDULE, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1),
        SMALL_GRADS,
    ),
}
ADAM_CASES = [name for name in CASES if name.startswith("adam")]


def _optax_error(module, case, shapes):
    """Largest |ours - optax| over every step's parameters, ours built from ``module``."""
    ours, theirs, grad_scale = CASES[case]
    params, grads_S = _problem(len(shapes), shapes, grad_scale)
    ours_S, state = jax.jit(lambda p, g: module.run(ours(module), p, g))(params, grads_S)
    assert int(state.count) == STEPS
    return _max_diff(ours_S, references.optax_run(theirs(), params, grads_S))


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("case", list(CASES))
def test_equals_optax_over_100_steps(case, shapes):
    assert _optax_error(optimizers, case, shapes) <= AGREEMENT


def test_jit_equals_no_jit():
    params, grads_S = _problem(0, [(4, 5)])
    opt = optimizers.adamw(1e-2, optimizers.AdamConfig(weight_decay=0.01))
    state = opt.init(params)
    grads = jax.tree.map(lambda g: g[0], grads_S)
    eager, _ = opt.update(grads, state, params)
    jitted, _ = jax.jit(opt.update)(grads, state, params)
    assert _max_diff(eager, jitted) <= 1e-7


def _torch_error(module, shapes, wd, grad_scale, eps=1e-8, other_decay=False):
    """Scaled |ours - torch.optim.AdamW| over every step, ours built from ``module``; with
    ``other_decay``, against a torch AdamW with another decay instead (to be told apart)."""
    params, grads_S = _problem(7, shapes, grad_scale)
    config = module.AdamConfig(0.9, 0.999, eps, wd)
    ours_S, _ = module.run(module.adamw(SCHEDULE, config), params, grads_S)
    lr = [float(SCHEDULE(t)) for t in range(STEPS)]
    decay = wd + 0.05 if other_decay else wd
    theirs = references.torch_adamw(params, grads_S, lr, 0.9, 0.999, eps, decay)
    return numerics.tree_scaled_max_error(ours_S, theirs)


TORCH_CASES = [(1.0, 1e-8), (SMALL_GRADS, 1e-8), (1.0, 0.1)]


@pytest.mark.parametrize("grad_scale, eps", TORCH_CASES)
@pytest.mark.parametrize("shapes", SHAPES[1:])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_equals_torch(shapes, wd, grad_scale, eps):
    assert _torch_error(optimizers, shapes, wd, grad_scale, eps) <= TORCH_AGREEMENT
    # a torch AdamW with a different decay is told apart
    assert _torch_error(optimizers, shapes, wd, grad_scale, eps, other_decay=True) > (
        10 * TORCH_AGREEMENT
    )


# Wrong versions of the project's own Adam: its source with one line changed.
ADAM_LINE = "direction = (m / c1) / (jnp.sqrt(s / c2) + eps)"
MUTANTS = {
    "eps inside the square root": "direction = (m / c1) / jnp.sqrt(s / c2 + eps)",
    "eps before s's bias correction": "direction = (m / c1) / ((jnp.sqrt(s) + eps) / c2**0.5)",
    "no bias correction of m": "direction = m / (jnp.sqrt(s / c2) + eps)",
    "eps squared": "direction = (m / c1) / (jnp.sqrt(s / c2) + eps**2)",
}


def _mutant(monkeypatch, line):
    source = inspect.getsource(optimizers)
    assert source.count(ADAM_LINE) == 1
    module = types.ModuleType("optimizers_mutant")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    exec(compile(source.replace(ADAM_LINE, line), "optimizers_mutant.py", "exec"), module.__dict__)
    return module


def test_the_unchanged_source_run_as_a_mutant_passes(monkeypatch):
    same = _mutant(monkeypatch, ADAM_LINE)
    assert _optax_error(same, "adam_small_grads", SHAPES[1]) <= AGREEMENT
    assert _torch_error(same, SHAPES[1], 0.1, SMALL_GRADS) <= TORCH_AGREEMENT


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_wrong_adam_is_caught(monkeypatch, mutant):
    wrong = _mutant(monkeypatch, MUTANTS[mutant])
    assert any(_optax_error(wrong, case, SHAPES[1]) > AGREEMENT for case in ADAM_CASES), (
        f"{mutant}: every optax comparison passed"
    )
    assert any(
        _torch_error(wrong, SHAPES[1], 0.1, *case) > TORCH_AGREEMENT for case in TORCH_CASES
    ), f"{mutant}: every torch comparison passed"


@pytest.mark.parametrize(
    "make",
    [
        lambda: optimizers.sgd(-1.0),
        lambda: optimizers.momentum(0.1, 1.0),
        lambda: optimizers.AdamConfig(b1=1.0),
        lambda: optimizers.AdamConfig(eps=0.0),
        lambda: optimizers.AdamConfig(weight_decay=-0.1),
    ],
)
def test_bad_hyperparameters_are_refused(make):
    with pytest.raises(ValueError):
        make()
