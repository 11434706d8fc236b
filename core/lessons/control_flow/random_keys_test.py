import jax
import numpy as np
import pytest
import scipy.stats

from core.lessons.control_flow import random_keys

# Threefry-2x32 (20 rounds), written from the Random123 paper in numpy: the independent
# reference for the key data JAX's default PRNG produces.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(key_words, counts):
    """Hash the pair ``counts`` (x0, x1) under the key (k0, k1): two uint32 words."""
    with np.errstate(over="ignore"):
        k0, k1 = (np.uint32(k) for k in key_words)
        ks = (k0, k1, np.uint32(k0 ^ k1 ^ np.uint32(0x1BD11BDA)))
        x0, x1 = np.uint32(counts[0]) + ks[0], np.uint32(counts[1]) + ks[1]
        for block in range(5):
            for r in _ROTATIONS[block % 2]:
                x0 = np.uint32(x0 + x1)
                x1 = np.uint32((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r)))
                x1 = np.uint32(x1 ^ x0)
            x0 = np.uint32(x0 + ks[(block + 1) % 3])
            x1 = np.uint32(x1 + ks[(block + 2) % 3] + np.uint32(block + 1))
    return int(x0), int(x1)


@pytest.mark.parametrize("seed", [0, 7, 123456])
def test_key_data_of_a_seed(seed):
    assert random_keys.key_words(jax.random.key(seed)) == (0, seed)


@pytest.mark.parametrize("seed", [0, 42])
@pytest.mark.parametrize("fanout, depth", [(2, 1), (3, 2), (2, 3)])
def test_key_tree_matches_threefry_reference(seed, fanout, depth):
    nodes = random_keys.key_tree(jax.random.key(seed), fanout, depth)
    assert len(nodes) == sum(fanout**level for level in range(depth + 1))
    by_path = {node.path: node for node in nodes}
    assert by_path["root"].words == (0, seed)
    for node in nodes[1:]:
        # default (partitionable) threefry: child i of a key is threefry(key, (0, i))
        child_index = int(node.path.rsplit("/", 1)[1])
        assert node.words == _threefry2x32(by_path[node.parent].words, (0, child_index))
    leaves = [n for n in nodes if n.level == depth]
    assert [n.position for n in leaves] == list(range(fanout**depth))
    assert by_path["root"].position == (fanout**depth - 1) / 2
    assert len({n.words for n in nodes}) == len(nodes), "every key in the tree is distinct"


@pytest.mark.parametrize("seed, steps", [(0, 1), (3, 5), (99, 12)])
def test_step_keys_match_threefry_reference(seed, steps):
    key = jax.random.key(seed)
    root = random_keys.key_words(key)
    result = random_keys.step_keys(key, steps)
    assert result.words == [_threefry2x32(root, (0, t)) for t in range(steps)]


@pytest.mark.parametrize("steps", [1, 4])
def test_split_and_fold_in_collide_on_one_parent(steps):
    key = jax.random.key(5)
    result = random_keys.step_keys(key, steps)
    root = random_keys.key_words(key)
    assert result.split_words == [_threefry2x32(root, (0, i)) for i in range(steps)]
    assert result.split_equals_fold_in


@pytest.mark.parametrize("distribution", random_keys.DISTRIBUTIONS)
@pytest.mark.parametrize("n", [1, 255, 256, 257, 5000])
def test_sample_is_exactly_the_n_draw(distribution, n):
    key = jax.random.key(n)
    draw = jax.random.normal if distribution == "normal" else jax.random.uniform
    x = random_keys.sample(key, distribution, n)
    assert x.shape == (n,) and x.dtype == np.float32
    np.testing.assert_array_equal(x, np.asarray(draw(key, (n,), dtype=np.float32)))


@pytest.mark.parametrize("n", [1, 5, 300])
def test_reuse_bug_gives_identical_draws_and_split_does_not(n):
    demo = random_keys.reuse_demo(jax.random.key(11), n)
    assert demo.reused_identical and demo.reused_a.shape == (n,)
    assert not demo.split_identical
    if n > 100:
        assert demo.correlation("reused") == pytest.approx(1.0)
        assert abs(demo.correlation("split")) < 0.3


@pytest.mark.parametrize("devices, n", [(1, 3), (4, 5), (8, 2)])
def test_per_device_streams_match_one_device_fold_in_and_differ(devices, n):
    key = jax.random.key(2)
    samples = random_keys.per_device_samples_DN(key, devices, n)
    assert samples.shape == (devices, n)
    np.testing.assert_allclose(
        np.asarray(samples), random_keys.per_device_reference_DN(key, devices, n), rtol=1e-6
    )
    for shard in samples.addressable_shards:  # row d is drawn and held by device d
        assert list(range(devices)[shard.index[0]]) == [shard.device.id]
    rows = {tuple(row) for row in np.asarray(samples)}
    assert len(rows) == devices


@pytest.mark.parametrize("distribution", random_keys.DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_key_samples_pass_ks_against_scipy(distribution, seed):
    x = random_keys.sample(jax.random.key(seed), distribution, 4000)
    result = random_keys.ks_test(x, distribution)
    assert result.n == 4000
    assert result.pvalue > random_keys.KS_ALPHA


def test_ks_rejects_the_wrong_distribution():
    normal = random_keys.sample(jax.random.key(0), "normal", 2000)
    assert random_keys.ks_test(normal, "uniform").pvalue < 1e-6
    shifted = np.asarray(normal) + 0.3
    assert random_keys.ks_test(shifted, "normal").pvalue < 1e-6


@pytest.mark.parametrize("distribution", random_keys.DISTRIBUTIONS)
@pytest.mark.parametrize("bins", [5, 30])
def test_histogram_is_a_density_and_pdf_is_scipys(distribution, bins):
    x = random_keys.sample(jax.random.key(4), distribution, 5000)
    rows = random_keys.histogram_vs_pdf(x, distribution, bins)
    assert len(rows) == bins
    widths = np.array([r["bin_right"] - r["bin_left"] for r in rows])
    assert np.sum(widths * np.array([r["density"] for r in rows])) == pytest.approx(1.0)
    reference = scipy.stats.norm.pdf if distribution == "normal" else scipy.stats.uniform.pdf
    np.testing.assert_allclose([r["pdf"] for r in rows], reference([r["centre"] for r in rows]))


def test_bad_inputs_name_the_problem():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="distribution"):
        random_keys.sample(key, "cauchy", 3)
    with pytest.raises(ValueError, match="devices"):
        random_keys.per_device_samples_DN(key, jax.device_count() + 1, 2)
    with pytest.raises(ValueError, match="fanout"):
        random_keys.key_tree(key, 0, 2)
    with pytest.raises(ValueError, match="steps"):
        random_keys.step_keys(key, 0)
