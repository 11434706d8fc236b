import jax
import numpy as np
import optax
import pytest

from core import numerics
from core.optim import optimizers, schedules

STEPS = 100
# Over 100 float32 steps the hand-written and optax's updates round differently; the
# parameters (magnitude ~1) stay within a few ulps of each other: the bound.
AGREEMENT = 1e-6
# torch.optim.AdamW rounds the parameters twice a step (decay, then the Adam step): over 100
# steps that walks a few ulps further, so torch is compared relative to the parameters' scale.
TORCH_AGREEMENT = numerics.tolerance("float32")


def _problem(seed, shapes):
    keys = jax.random.split(jax.random.key(seed), 2 * len(shapes))
    params = {f"p{i}": jax.random.normal(keys[i], s) for i, s in enumerate(shapes)}
    grads_S = {
        f"p{i}": jax.random.normal(keys[len(shapes) + i], (STEPS, *s)) for i, s in enumerate(shapes)
    }
    return params, grads_S


def _optax_run(tx, params, grads_S):
    def body(carry, grads):
        params, state = carry
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        return (params, state), params

    return jax.jit(lambda p, g: jax.lax.scan(body, (p, tx.init(p)), g)[1])(params, grads_S)


def _max_diff(a, b):
    return max(
        numerics.max_abs_error(x, y)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


SHAPES = [[(3,)], [(4, 5), (5,)], [(2, 3, 4), (1,)]]
SCHEDULE = schedules.warmup_cosine(0.0, 3e-3, 10, STEPS, 1e-4)
OPTAX_SCHEDULE = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 10, STEPS, 1e-4)


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda: optimizers.sgd(0.01), lambda: optax.sgd(0.01)),
        (lambda: optimizers.momentum(0.01, 0.9), lambda: optax.sgd(0.01, momentum=0.9)),
        (lambda: optimizers.adam(1e-3), lambda: optax.adam(1e-3)),
        (
            lambda: optimizers.adamw(3e-3, optimizers.AdamConfig(0.8, 0.99, 1e-6, 0.05)),
            lambda: optax.adamw(3e-3, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.05),
        ),
        (
            lambda: optimizers.adamw(SCHEDULE, optimizers.AdamConfig(weight_decay=0.1)),
            lambda: optax.adamw(OPTAX_SCHEDULE, weight_decay=0.1),
        ),
    ],
    ids=["sgd", "momentum", "adam", "adamw", "adamw_schedule"],
)
def test_equals_optax_over_100_steps(ours, theirs, shapes):
    params, grads_S = _problem(len(shapes), shapes)
    ours_S, state = jax.jit(lambda p, g: optimizers.run(ours(), p, g))(params, grads_S)
    assert int(state.count) == STEPS
    assert _max_diff(ours_S, _optax_run(theirs(), params, grads_S)) <= AGREEMENT


def test_jit_equals_no_jit():
    params, grads_S = _problem(0, [(4, 5)])
    opt = optimizers.adamw(1e-2, optimizers.AdamConfig(weight_decay=0.01))
    state = opt.init(params)
    grads = jax.tree.map(lambda g: g[0], grads_S)
    eager, _ = opt.update(grads, state, params)
    jitted, _ = jax.jit(opt.update)(grads, state, params)
    assert _max_diff(eager, jitted) <= 1e-7


def torch_adamw(params, grads_S, lr, b1, b2, eps, wd):
    """torch.optim.AdamW on the same float32 params and gradients; lr is a list per step."""
    import torch

    tensors = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in params.items()}
    opt = torch.optim.AdamW(
        list(tensors.values()), lr=lr[0], betas=(b1, b2), eps=eps, weight_decay=wd
    )
    out = {k: [] for k in tensors}
    for t in range(len(lr)):
        for group in opt.param_groups:
            group["lr"] = lr[t]
        for k, tensor in tensors.items():
            tensor.grad = torch.tensor(np.asarray(grads_S[k][t]))
        opt.step()
        for k, tensor in tensors.items():
            out[k].append(tensor.detach().numpy().copy())
    return {k: np.stack(v) for k, v in out.items()}


@pytest.mark.parametrize("shapes", SHAPES[1:])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_equals_torch(shapes, wd):
    params, grads_S = _problem(7, shapes)
    config = optimizers.AdamConfig(0.9, 0.999, 1e-8, wd)
    ours_S, _ = optimizers.run(optimizers.adamw(SCHEDULE, config), params, grads_S)
    lr = [float(SCHEDULE(t)) for t in range(STEPS)]
    theirs = torch_adamw(params, grads_S, lr, 0.9, 0.999, 1e-8, wd)
    assert numerics.tree_scaled_max_error(ours_S, theirs) <= TORCH_AGREEMENT
    # and a torch AdamW with a different decay is told apart
    other = torch_adamw(params, grads_S, lr, 0.9, 0.999, 1e-8, wd + 0.05)
    assert numerics.tree_scaled_max_error(ours_S, other) > 10 * TORCH_AGREEMENT


def test_a_wrong_adam_is_caught():
    # eps inside the square root (optax's eps_root) is a different optimizer: the test bites.
    params, grads_S = _problem(3, [(6,)])
    ours_S, _ = optimizers.run(optimizers.adam(1e-2, eps=1e-3), params, grads_S)
    other = _optax_run(optax.adam(1e-2, eps=0.0, eps_root=1e-3), params, grads_S)
    assert _max_diff(ours_S, other) > 10 * AGREEMENT


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
