"""Explicit PRNG keys for the lesson "Random keys without surprises".

JAX has no hidden random state: a key is a value, ``jax.random.split`` makes new keys from
it, ``jax.random.fold_in`` derives a key from a key and an integer (a step, a device index),
and the same key always gives the same numbers, which is reproducibility when you mean it
and a silent bug (two "independent" draws that are identical) when you do not.

Dimension glossary: N samples, D devices.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

DISTRIBUTIONS = ("normal", "uniform")
# The KS test rejects a correct generator with probability KS_ALPHA at every (seed, samples)
# setting a learner picks. At 1e-3 a correct generator failed at some settings (--samples 20:
# p = 0.0008); at 1e-6 that is one setting in a million per distribution, while a wrong or a
# shifted distribution is still rejected from 2,000 samples (random_keys_test).
KS_ALPHA = 1e-6
_SCIPY_NAME = {"normal": "norm", "uniform": "uniform"}


def key_words(key: jax.Array) -> tuple[int, int]:
    """The two uint32 words of a (threefry) key: ``jax.random.key_data(key)``."""
    data = np.asarray(jax.random.key_data(key))
    if data.shape != (2,):
        raise ValueError(f"expected one threefry key (key data of shape (2,)), got {data.shape}")
    return int(data[0]), int(data[1])


def key_hex(words: tuple[int, int]) -> str:
    """Key data as 16 hex digits, first word first: easy to compare by eye."""
    return f"{words[0]:08x}{words[1]:08x}"


@dataclasses.dataclass(frozen=True)
class KeyNode:
    """One key of a split tree: the root, its children, their children..."""

    path: str  # "root", then "root/1", "root/1/0": the split index at each level
    parent: str | None
    level: int  # 0 for the root
    position: float  # where to draw it: leaves at 0, 1, 2 ...; a parent centred on its leaves
    words: tuple[int, int]  # jax.random.key_data(key)

    @property
    def hex(self) -> str:
        return key_hex(self.words)


def key_tree(key: jax.Array, fanout: int, depth: int) -> list[KeyNode]:
    """Split ``key`` into ``fanout`` children, and each child again, ``depth`` levels deep.

    Returns the fanout**0 + ... + fanout**depth nodes level by level, left to right.
    """
    if fanout < 1 or depth < 0:
        raise ValueError(f"fanout must be >= 1 and depth >= 0, got fanout={fanout}, depth={depth}")
    if fanout**depth > 4096:
        raise ValueError(f"{fanout}**{depth} leaves is too many to draw: keep it at most 4096")
    level_words = _key_tree_words(key, fanout, depth)  # one compiled program for all levels
    nodes: list[KeyNode] = []
    level_paths = ["root"]
    for level, words in enumerate(level_words):
        span = fanout ** (depth - level)  # leaves under each node of this level
        words = np.asarray(words)
        for j, path in enumerate(level_paths):
            nodes.append(
                KeyNode(
                    path=path,
                    parent=path.rsplit("/", 1)[0] if level else None,
                    level=level,
                    position=j * span + (span - 1) / 2,
                    words=(int(words[j, 0]), int(words[j, 1])),
                )
            )
        level_paths = [f"{p}/{i}" for p in level_paths for i in range(fanout)]
    return nodes


def _key_tree_words(key: jax.Array, fanout: int, depth: int) -> list[np.ndarray]:
    """Key data of every level of the split tree: [(1, 2), (fanout, 2), (fanout**2, 2), ...].

    Splits one key at a time, as a learner would: every call has the same shape, so JAX
    compiles the split once and reuses it.
    """
    level_keys = [key]
    words = [np.asarray(jax.random.key_data(key))[None]]
    for _ in range(depth):
        level_keys = [child for k in level_keys for child in jax.random.split(k, fanout)]
        words.append(np.stack([np.asarray(jax.random.key_data(k)) for k in level_keys]))
    return words


def sample(key: jax.Array, distribution: str, n: int) -> np.ndarray:
    """n float32 draws from N(0, 1) ("normal") or U[0, 1) ("uniform"): (N,), on the host.

    Exactly ``jax.random.normal(key, (n,))`` (or uniform). It draws a power-of-two length and
    keeps the first n: with JAX's default partitionable threefry the first n of a longer draw
    are the n-draw itself (element i depends only on the key and i), and a slider moving
    through sample sizes then compiles once per power of two, not once per size.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    if n < 1:
        raise ValueError(f"need at least one sample, got n={n}")
    bucket = max(256, 1 << (n - 1).bit_length())
    draw = jax.random.normal if distribution == "normal" else jax.random.uniform
    return np.asarray(draw(key, (bucket,), dtype=jnp.float32))[:n]


@dataclasses.dataclass(frozen=True)
class ReuseDemo:
    """Two draws that were meant to be independent: with one key reused, and with split keys."""

    reused_a: np.ndarray  # normal(key)
    reused_b: np.ndarray  # normal(key) again: the bug
    split_a: np.ndarray  # normal(k1), k1, k2 = split(key)
    split_b: np.ndarray  # normal(k2)

    @property
    def reused_identical(self) -> bool:
        return bool(np.array_equal(self.reused_a, self.reused_b))

    @property
    def split_identical(self) -> bool:
        return bool(np.array_equal(self.split_a, self.split_b))

    def correlation(self, which: str) -> float:
        """Pearson correlation of the pair ("reused" or "split"); 1.0 for the bug."""
        a, b = (self.reused_a, self.reused_b) if which == "reused" else (self.split_a, self.split_b)
        if a.size < 2:
            return float("nan")
        return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


def reuse_demo(key: jax.Array, n: int) -> ReuseDemo:
    """The reuse bug and its fix, side by side: (N,) arrays."""
    reused_a = sample(key, "normal", n)
    reused_b = sample(key, "normal", n)  # same key, same numbers
    key_a, key_b = jax.random.split(key)
    return ReuseDemo(reused_a, reused_b, sample(key_a, "normal", n), sample(key_b, "normal", n))


@dataclasses.dataclass(frozen=True)
class StepKeys:
    """One key per training step, ``fold_in(key, step)``, and what split would have given."""

    words: list[tuple[int, int]]  # key data of fold_in(key, step), step = 0 .. steps-1
    split_words: list[tuple[int, int]]  # key data of split(key, steps)

    @property
    def split_equals_fold_in(self) -> bool:
        """Whether ``split(key, steps)[i] == fold_in(key, i)`` for every i.

        True with JAX's default "partitionable" threefry (jax_threefry_partitionable, the
        default since JAX 0.5): split and fold_in on the same parent collide, so give each
        purpose its own parent key.
        """
        return self.words == self.split_words


def step_keys(key: jax.Array, steps: int) -> StepKeys:
    """``fold_in(key, step)`` for step = 0 .. steps-1: one key per training step."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    words, split_words = (np.asarray(x) for x in _step_keys(key, steps))
    return StepKeys(
        [(int(a), int(b)) for a, b in words], [(int(a), int(b)) for a, b in split_words]
    )


@functools.partial(jax.jit, static_argnums=1)
def _step_keys(key: jax.Array, steps: int):
    keys = jax.vmap(lambda t: jax.random.fold_in(key, t))(jnp.arange(steps, dtype=jnp.uint32))
    return jax.random.key_data(keys), jax.random.key_data(jax.random.split(key, steps))


def per_device_samples_DN(key: jax.Array, devices: int, n: int) -> jax.Array:
    """Each of the first ``devices`` devices draws n normals from ``fold_in(key, its index)``.

    Runs under ``jax.shard_map``: every device gets the same (replicated) key and folds in
    ``lax.axis_index``, so the streams differ per device without any communication.
    Returns a (D, N) array whose row d lives on device d.
    """
    if not 1 <= devices <= jax.device_count():
        raise ValueError(
            f"devices must be between 1 and {jax.device_count()} (jax.device_count()), got "
            f"{devices}"
        )
    if n < 1:
        raise ValueError(f"need at least one sample per device, got n={n}")
    return _per_device_program(devices, n)(key)


@functools.cache
def _per_device_program(devices: int, n: int):
    """The jitted shard_map program for (devices, n), built once so every key reuses its
    compilation."""
    from core.distributed import sharding  # the mesh helper of the sharding lessons

    mesh = sharding.make_mesh((devices,), ("device",))

    def draw(key):
        device_key = jax.random.fold_in(key, jax.lax.axis_index("device"))
        return jax.random.normal(device_key, (1, n), dtype=jnp.float32)

    spmd = jax.shard_map(
        draw, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec("device")
    )
    return jax.jit(spmd)


def per_device_reference_DN(key: jax.Array, devices: int, n: int) -> np.ndarray:
    """The same streams drawn on one device, ``vmap`` over d of ``fold_in(key, d)``: (D, N)."""
    return np.asarray(_per_device_reference(key, devices, n))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _per_device_reference(key: jax.Array, devices: int, n: int) -> jax.Array:
    indices = jnp.arange(devices, dtype=jnp.uint32)
    return jax.vmap(
        lambda d: jax.random.normal(jax.random.fold_in(key, d), (n,), dtype=jnp.float32)
    )(indices)


@dataclasses.dataclass(frozen=True)
class KSResult:
    distribution: str
    n: int
    statistic: float  # sup |empirical CDF - CDF|
    pvalue: float  # chance of a statistic this large if the samples do follow the CDF


def ks_test(samples, distribution: str) -> KSResult:
    """Kolmogorov-Smirnov test of samples against N(0, 1) or U[0, 1] (scipy.stats.kstest)."""
    import scipy.stats

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    x = np.asarray(samples, dtype=np.float64).ravel()
    result = scipy.stats.kstest(x, _SCIPY_NAME[distribution])
    return KSResult(distribution, int(x.size), float(result.statistic), float(result.pvalue))


def pdf(distribution: str, x) -> np.ndarray:
    """The density of N(0, 1) or U[0, 1] at x (scipy.stats), float64."""
    import scipy.stats

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    return getattr(scipy.stats, _SCIPY_NAME[distribution]).pdf(np.asarray(x, dtype=np.float64))


def histogram_vs_pdf(samples, distribution: str, bins: int) -> list[dict]:
    """One row per histogram bin: its edges, centre, the samples' density and the pdf there.

    Density is count / (n * bin width), so it is comparable with the pdf.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    x = np.asarray(samples, dtype=np.float64).ravel()
    value_range = (
        (0.0, 1.0) if distribution == "uniform" else (min(-4.0, x.min()), max(4.0, x.max()))
    )
    density, edges = np.histogram(x, bins=bins, range=value_range, density=True)
    centres = (edges[:-1] + edges[1:]) / 2
    return [
        {
            "bin_left": float(lo),
            "bin_right": float(hi),
            "centre": float(c),
            "density": float(d),
            "pdf": float(p),
        }
        for lo, hi, c, d, p in zip(
            edges[:-1], edges[1:], centres, density, pdf(distribution, centres), strict=True
        )
    ]
