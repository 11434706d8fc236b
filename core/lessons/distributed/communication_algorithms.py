"""Gradient accumulation over a data-sharded batch, and how many all-reduces a step runs.

Two jitted steps over the same batch, split over the mesh axis "x" (``jax.shard_map``); each
device cuts its rows into K microbatches and sums their gradients in a ``lax.scan``:

- accumulate, then reduce: one ``lax.pmean`` of the summed gradient after the scan;
- reduce every microbatch: a ``lax.pmean`` inside the scan's body, run K times.

The compiled HLO holds each all-reduce once, but one inside the scan's while loop runs once per
iteration: :func:`all_reduces_per_step` counts what a step executes (an op in a loop body times
the loop's trip count, which XLA writes as ``known_trip_count``). Bytes become seconds with the
per-link ICI figures of core/tpu/specs.py.

Glossary: B batch rows (all devices), D devices, K microbatches, N parameters.
"""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from core import distributed
from core.tpu import specs

AXIS = distributed.AXIS
P = jax.sharding.PartitionSpec
NamedSharding = jax.sharding.NamedSharding
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(")
_WHILE = re.compile(r"\bwhile\(.*\bbody=%([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_ALL_REDUCE = re.compile(r"=\s*\S.*?\ball-reduce(?:-start)?\(")


def accumulation_step(mesh: jax.sharding.Mesh, microbatches: int, reduce_every: bool):
    """A jitted ``(params, batch) -> mean gradient`` over ``batch`` split on the mesh.

    ``reduce_every``: all-reduce each microbatch's gradient inside the scan (K all-reduces a
    step) instead of the accumulated sum after it (one). Both give the big-batch gradient."""
    if microbatches < 1:
        raise ValueError(f"microbatches must be >= 1, got {microbatches}")

    def local(params, batch):
        rows = batch["x"].shape[0]
        if rows % microbatches:
            raise ValueError(
                f"{rows} rows per device can't be cut into {microbatches} microbatches: "
                f"pick a divisor of {rows}"
            )
        micro = jax.tree.map(
            lambda v: v.reshape(microbatches, rows // microbatches, *v.shape[1:]), batch
        )
        flat, unravel = ravel_pytree(params)  # one vector: one all-reduce, not one per leaf

        def body(total, mb):
            grads, _ = ravel_pytree(jax.grad(distributed.loss_fn)(params, mb))
            if reduce_every:
                grads = jax.lax.pmean(grads, AXIS)
            return total + grads, None

        total, _ = jax.lax.scan(body, jnp.zeros_like(flat), micro)
        if not reduce_every:
            total = jax.lax.pmean(total, AXIS)
        return unravel(total / microbatches)

    # check_vma=False: with it on, the gradient of the replicated params would be summed over
    # the axis by the transpose of the implicit replication, an all-reduce of its own
    step = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(), check_vma=False)
    return jax.jit(step)


def _computations(hlo_text: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    name = None
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match and line.rstrip().endswith("{"):
            name = match.group(1)
            blocks[name] = []
            if line.startswith("ENTRY"):
                blocks["__entry__"] = blocks[name]
        elif name is not None:
            blocks[name].append(line)
    return blocks


def all_reduces_per_step(hlo_text: str) -> int:
    """All-reduce ops one run of the compiled module executes: each op in the entry once,
    each op in a while body times the loop's ``known_trip_count`` (nested loops multiply).

    ValueError for a loop XLA gave no trip count (the count would be unknown)."""
    blocks = _computations(hlo_text)
    if "__entry__" not in blocks:
        raise ValueError("no ENTRY computation in this HLO text")

    def executed(name: str, depth: int = 0) -> int:
        if depth > 32:
            raise ValueError("while loops nested deeper than 32")
        total = 0
        for line in blocks.get(name, []):
            if _ALL_REDUCE.search(line):
                total += 1
            loop = _WHILE.search(line)
            if loop:
                trip = _TRIP.search(line)
                if trip is None:
                    raise ValueError(f"while loop {loop.group(1)} has no known trip count")
                total += int(trip.group(1)) * executed(loop.group(1), depth + 1)
        return total

    return executed("__entry__")


_COMPILED: dict = {}  # (mesh, K, variant, argument signature) -> compiled program


def compiled_step(mesh, microbatches: int, reduce_every: bool, params, batch):
    """:func:`accumulation_step` lowered and compiled once per mesh, K, variant and argument
    shapes/dtypes/structure; new values of the same signature (a new seed) reuse it, and
    running the compiled program needs no second compile."""
    leaves, treedef = jax.tree.flatten((params, batch))
    signature = (str(treedef), tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves))
    key = (mesh, microbatches, reduce_every, signature)
    if key not in _COMPILED:
        if len(_COMPILED) >= 16:  # a served app's sliders: keep the most recent few
            _COMPILED.pop(next(iter(_COMPILED)))
        step = accumulation_step(mesh, microbatches, reduce_every)
        _COMPILED[key] = step.lower(params, batch).compile()
    return _COMPILED[key]


def accumulation_versions(mesh, params, batch, microbatches: int) -> tuple[list[dict], dict]:
    """Both versions compiled once each (:func:`compiled_step`): per version, the all-reduces
    in the HLO text, those executed per step and the closed form (rows), and its gradient
    ({reduce_every: grads})."""
    # Placed once, as the step expects (params replicated, batch rows split), from host
    # copies: moving device arrays between shardings compiles a small program per shape,
    # a host-to-device transfer compiles nothing.
    params = jax.device_put(jax.tree.map(np.asarray, params), NamedSharding(mesh, P()))
    batch = jax.device_put(jax.tree.map(np.asarray, batch), NamedSharding(mesh, P(AXIS)))
    rows, grads = [], {}
    for reduce_every in (False, True):
        compiled = compiled_step(mesh, microbatches, reduce_every, params, batch)
        hlo = compiled.as_text()
        grads[reduce_every] = compiled(params, batch)
        rows.append(
            {
                "version": (
                    f"all-reduce every microbatch ({microbatches}×)"
                    if reduce_every
                    else "accumulate, then one all-reduce"
                ),
                "all-reduce ops in the HLO text": distributed.collective_counts(hlo)["all-reduce"],
                "all-reduces run per step": all_reduces_per_step(hlo),
                "closed form": microbatches if reduce_every else 1,
            }
        )
    return rows, grads


def ici_seconds(ring_bytes_sent: float, generation: str) -> float:
    """Seconds to send ``ring_bytes_sent`` per device around one ring with wraparound, both
    directions of each link in use: bytes / the per-link bidirectional ICI figure."""
    link = specs.chip(generation).ici_link_bidirectional
    if link is None:
        raise ValueError(f"no per-link ICI figure for {generation}")
    if ring_bytes_sent < 0:
        raise ValueError(f"bytes must be >= 0, got {ring_bytes_sent}")
    return ring_bytes_sent / link.value


def strategy_rows_with_seconds(rows: list[dict], generations=None) -> list[dict]:
    """``distributed.strategy_bytes`` rows with one column of ICI microseconds per generation
    (default: every generation whose per-link figure is published; TPU7x's is not)."""
    generations = specs.generations_with_link_figures() if generations is None else generations
    return [
        {
            **row,
            **{f"µs on {g} ICI": ici_seconds(row["bytes"], g) * 1e6 for g in generations},
        }
        for row in rows
    ]


def ici_source_line() -> str:
    """Where the per-link figures come from, for the page."""
    return json.dumps(
        {
            g: f"{specs.chip(g).ici_link_bidirectional.value / 1e9:.0f} GB/s "
            f"({specs.chip(g).ici_link_bidirectional.source})"
            for g in specs.generations_with_link_figures()
        }
    )
