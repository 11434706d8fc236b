import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import numerics
from core.optim import transforms


def _tree(seed, scale):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"w": scale * jax.random.normal(k1, (4, 3)), "b": scale * jax.random.normal(k2, (3,))}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("scale", [1e-3, 0.3, 1.0, 50.0])
@pytest.mark.parametrize("max_norm", [0.5, 2.0])
def test_clip_equals_optax(seed, scale, max_norm):
    tree = _tree(seed, scale)
    ours = transforms.clip_by_global_norm(tree, max_norm)
    theirs, _ = optax.clip_by_global_norm(max_norm).update(tree, optax.EmptyState())
    assert numerics.tree_normwise_max_error(ours, theirs) <= numerics.tolerance("float32")
    norm64 = np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree.leaves(tree)))
    assert float(transforms.global_norm(tree)) == pytest.approx(norm64, rel=1e-6)
    assert float(transforms.global_norm(ours)) == pytest.approx(min(norm64, max_norm), rel=1e-5)


def test_direction_is_kept_and_zero_stays_zero():
    tree = _tree(3, 10.0)
    clipped = transforms.clip_by_global_norm(tree, 1.0)
    ratio = np.asarray(clipped["w"]) / np.asarray(tree["w"])
    assert np.allclose(ratio, ratio.flat[0], rtol=1e-6)
    zeros = jax.tree.map(jnp.zeros_like, tree)
    assert all(
        np.all(np.asarray(x) == 0)
        for x in jax.tree.leaves(transforms.clip_by_global_norm(zeros, 1.0))
    )


def test_bad_bound_refused():
    with pytest.raises(ValueError):
        transforms.clip_by_global_norm(_tree(0, 1.0), 0.0)
