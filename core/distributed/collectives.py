"""Distributed training on a device mesh: sharding propagation, data/FSDP/tensor-parallel
training steps, collectives and their bytes, and restoring a sharded state onto another mesh.

The model is a small MLP classifier, parameters as a plain dict so every leaf can carry its
own PartitionSpec:

    h_BH = tanh(x_BF @ w1_FH + b1_H);  logits_BC = h_BH @ w2_HC + b2_C

Dimension glossary: B batch, F features, H hidden units, C classes, N gradient length,
D devices, K microbatches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics
from core.distributed import sharding

P = jax.sharding.PartitionSpec
AXIS = "x"  # the one mesh axis of this phase's meshes
STRATEGIES = ("data", "fsdp", "tensor")
STRATEGY_WORDS = {
    "data": "data parallel: batch split over devices, parameters replicated",
    "fsdp": (
        "FSDP: batch split, every parameter (and its optimizer state) split along its first dim"
    ),
    "tensor": "tensor parallel: hidden units split (w1 by columns, w2 by rows), batch replicated",
}
OPTIMIZERS = ("sgd", "adam")
HLO_COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "collective-permute", "all-to-all")
_DTYPE_BYTES = {
    "f64": 8,
    "f32": 4,
    "bf16": 2,
    "f16": 2,
    "s32": 4,
    "u32": 4,
    "s8": 1,
    "u8": 1,
    "pred": 1,
}


# --- sharding propagation -----------------------------------------------------------------


def propagation_steps(x_BF, w_FH, mesh: jax.sharding.Mesh, x_spec, w_spec) -> list[dict]:
    """Shard x and W, jit ``y = x @ W; s = sum(y)``, and read each value's sharding.

    Returns rows {value, shape, spec, result} for x, W (inputs), y and s (outputs of the
    compiled program, read from ``compiled.output_shardings``).
    """
    x = sharding.shard(x_BF, mesh, x_spec)
    w = sharding.shard(w_FH, mesh, w_spec)

    def forward(x, w):
        y = x @ w
        return y, jnp.sum(y)

    compiled = jax.jit(forward).lower(x, w).compile()
    y_sharding, s_sharding = compiled.output_shardings
    y, s = compiled(x, w)
    rows = []
    for name, value, named in (
        ("x", x, x.sharding),
        ("W", w, w.sharding),
        ("y = x @ W", y, y_sharding),
        ("sum(y)", s, s_sharding),
    ):
        rows.append(
            {
                "value": name,
                "shape": tuple(value.shape),
                "spec": sharding.spec_name(named.spec),
                "result": value,
            }
        )
    return rows


# --- the MLP ------------------------------------------------------------------------------


# jitted: one compile instead of one per eager random op (seconds on a busy CPU)
@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def init_mlp(key: jax.Array, features: int, hidden: int, classes: int) -> dict[str, jax.Array]:
    """MLP parameters: w1_FH, b1_H, w2_HC, b2_C, float32 (scaled normal weights, zero biases)."""
    if min(features, hidden, classes) < 1:
        raise ValueError(
            f"features, hidden, classes must be positive, got {features}, {hidden}, {classes}"
        )
    key1, key2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(key1, (features, hidden), jnp.float32) / np.sqrt(features),
        "b1": jnp.zeros((hidden,), jnp.float32),
        "w2": jax.random.normal(key2, (hidden, classes), jnp.float32) / np.sqrt(hidden),
        "b2": jnp.zeros((classes,), jnp.float32),
    }


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def example_batch(key: jax.Array, batch: int, features: int, classes: int) -> dict[str, jax.Array]:
    """x_BF ~ N(0,1), labels y_B uniform in [0, C), mask_B all True."""
    key_x, key_y = jax.random.split(key)
    return {
        "x": jax.random.normal(key_x, (batch, features), jnp.float32),
        "y": jax.random.randint(key_y, (batch,), 0, classes, jnp.int32),
        "mask": jnp.ones((batch,), bool),
    }


def loss_fn(params, batch) -> jax.Array:
    """Mean softmax cross-entropy over the real rows (mask_B) of the batch."""
    h_BH = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    logits_BC = h_BH @ params["w2"] + params["b2"]
    log_p_BC = jax.nn.log_softmax(logits_BC)
    nll_B = -jnp.take_along_axis(log_p_BC, batch["y"][:, None], axis=1)[:, 0]
    mask_B = batch["mask"].astype(jnp.float32)
    return jnp.sum(nll_B * mask_B) / jnp.maximum(jnp.sum(mask_B), 1.0)


def reference_loss_and_grads(params, batch) -> tuple[float, dict[str, np.ndarray]]:
    """The same loss and its gradients by hand-written backprop in NumPy float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(batch["x"], np.float64)
    y = np.asarray(batch["y"])
    m = np.asarray(batch["mask"], np.float64)
    h = np.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    count = max(m.sum(), 1.0)
    loss = float(-(np.log(probs[np.arange(len(y)), y]) * m).sum() / count)
    d_logits = probs.copy()
    d_logits[np.arange(len(y)), y] -= 1.0
    d_logits *= m[:, None] / count
    d_z1 = (d_logits @ p["w2"].T) * (1.0 - h**2)
    grads = {"w1": x.T @ d_z1, "b1": d_z1.sum(0), "w2": h.T @ d_logits, "b2": d_logits.sum(0)}
    return loss, grads


def make_optimizer(name: str, learning_rate: float):
    """optax sgd or adam."""
    import optax

    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    return optax.sgd(learning_rate) if name == "sgd" else optax.adam(learning_rate)


# --- strategies ---------------------------------------------------------------------------


def param_specs(strategy: str) -> dict[str, jax.sharding.PartitionSpec]:
    """The PartitionSpec of each MLP parameter under ``strategy``."""
    if strategy == "data":
        return {"w1": P(), "b1": P(), "w2": P(), "b2": P()}
    if strategy == "fsdp":
        return {"w1": P(AXIS), "b1": P(AXIS), "w2": P(AXIS), "b2": P()}
    if strategy == "tensor":
        return {"w1": P(None, AXIS), "b1": P(AXIS), "w2": P(AXIS), "b2": P()}
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def batch_specs(strategy: str) -> dict[str, jax.sharding.PartitionSpec]:
    """The PartitionSpec of each batch field: split over the batch except for tensor parallel."""
    spec = P() if strategy == "tensor" else P(AXIS)
    return {"x": spec, "y": spec, "mask": spec}


def strategy_problem(
    strategy: str, mesh_size: int, batch: int, features: int, hidden: int
) -> str | None:
    """Why ``strategy`` cannot split these shapes evenly over ``mesh_size`` devices, or None."""
    sizes = {AXIS: mesh_size}
    shapes = {"w1": (features, hidden), "b1": (hidden,), "w2": (hidden, 1), "b2": (1,)}
    for name, spec in param_specs(strategy).items():
        if problem := sharding.divisibility_problem(shapes[name], sizes, spec):
            return f"{strategy}: parameter {name} {shapes[name]}: {problem}"
    if problem := sharding.divisibility_problem(
        (batch, features), sizes, batch_specs(strategy)["x"]
    ):
        problem = problem.replace("rows=", "batch=").replace("pick rows", "pick a batch")
        return f"{strategy}: batch: {problem}"
    return None


def place(tree: Mapping, specs: Mapping, mesh: jax.sharding.Mesh) -> dict:
    """Put each leaf of a flat dict on ``mesh`` with its spec."""
    return {
        k: jax.device_put(v, jax.sharding.NamedSharding(mesh, specs[k])) for k, v in tree.items()
    }


def opt_shardings(opt_state, params):
    """Shardings for an optax state: a leaf shaped like a parameter gets that parameter's
    sharding (Adam's moments), anything else (the count) is replicated."""
    by_shape = {}
    for leaf in params.values():
        by_shape.setdefault(leaf.shape, leaf.sharding)
    replicated = jax.sharding.NamedSharding(next(iter(params.values())).sharding.mesh, P())
    return jax.tree.map(lambda leaf: by_shape.get(leaf.shape, replicated), opt_state)


def make_train_step(tx, matmul_precision: str | None = None):
    """``step(params, opt_state, batch) -> (params, opt_state, loss)``, jitted; shardings
    follow the inputs (out_shardings equal to the parameters'). ``matmul_precision``
    ("highest", ...): the step's matmuls run at it whatever precision is in force (for a run
    compared with NumPy float64: a TPU's DEFAULT is one bfloat16 pass); None: the one in
    force."""
    import contextlib

    import optax

    def step(params, opt_state, batch):
        with (
            jax.default_matmul_precision(matmul_precision)
            if matmul_precision
            else contextlib.nullcontext()
        ):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One training step under one strategy."""

    strategy: str
    params: dict  # after the step (sharded as the strategy says)
    opt_state: object
    loss: float
    collectives: dict[str, int]


def sharded_step(params, batch, mesh, strategy: str, tx) -> StepResult:
    """Place params, optimizer state and batch as ``strategy`` says and take one step.

    ``mesh=None`` runs the single-device reference (everything on device 0).
    """
    if mesh is None:
        mesh = sharding.make_mesh((1,), (AXIS,))
    if problem := strategy_problem(strategy, mesh.size, batch["x"].shape[0], *params["w1"].shape):
        raise ValueError(problem)
    params = place(params, param_specs(strategy), mesh)
    batch = place(batch, batch_specs(strategy), mesh)
    opt_state = tx.init(params)
    opt_state = jax.device_put(opt_state, opt_shardings(opt_state, params))
    param_shardings = {k: v.sharding for k, v in params.items()}
    step = jax.jit(
        make_train_step(tx).__wrapped__,
        out_shardings=(param_shardings, opt_shardings(opt_state, params), None),
    )
    compiled = step.lower(params, opt_state, batch).compile()  # compile once: run it, read its HLO
    hlo = compiled.as_text()
    new_params, new_opt_state, loss = compiled(params, opt_state, batch)
    counts = {op: n for op, n in collective_counts(hlo).items() if n}
    return StepResult(strategy, new_params, new_opt_state, float(loss), counts)


def device_bytes(tree) -> dict[int, int]:
    """Bytes each device holds for all leaves of ``tree`` (from ``addressable_shards``)."""
    totals: dict[int, int] = {}
    for leaf in jax.tree.leaves(tree):
        for piece in leaf.addressable_shards:
            totals[piece.device.id] = totals.get(piece.device.id, 0) + int(piece.data.nbytes)
    return dict(sorted(totals.items()))


def max_tree_error(a, b) -> float:
    """max |a - b| over all leaves, in float64."""
    return max(
        numerics.max_abs_error(x, y)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# --- collectives and their bytes ----------------------------------------------------------


def collective_counts(hlo_text: str) -> dict[str, int]:
    """How many of each collective the compiled HLO contains."""
    return {
        op: n
        for op, n in (
            (op, sum(1 for r in hlo_collectives(hlo_text) if r["op"] == op))
            for op in HLO_COLLECTIVES
        )
    }


def _shape_bytes(text: str) -> tuple[list[str], int]:
    shapes = re.findall(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]", text)
    total = 0
    names = []
    for dtype, dims in shapes:
        count = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        total += count * _DTYPE_BYTES.get(dtype, 4)
        names.append(f"{dtype}[{dims}]")
    return names, total


def hlo_collectives(hlo_text: str) -> list[dict]:
    """Each collective instruction of an HLO module: {op, shape, bytes} (bytes of its result).

    Reads lines like ``%all-reduce.3 = f32[64]{0} all-reduce(%x), ...`` (``-start`` variants
    of async collectives count once; their ``-done`` halves are skipped).
    """
    ops = "|".join(HLO_COLLECTIVES)
    pattern = re.compile(
        r"=\s*(\(.*?\)|[a-z]+[0-9]*\[[0-9,]*\](?:\{[^}]*\})?)\s+(" + ops + r")(-start)?\("
    )
    rows = []
    for line in hlo_text.splitlines():
        match = pattern.search(line)
        if not match:
            continue
        result_type, op, start = match.groups()
        names, nbytes = _shape_bytes(result_type)
        if start and op in ("all-gather", "all-reduce", "collective-permute") and len(names) > 1:
            # an async start returns (operand, result): count the result only
            names, nbytes = names[-1:], _shape_bytes(names[-1])[1]
        rows.append({"op": op, "shape": ", ".join(names), "bytes": nbytes})
    return rows


def compiled_hlo(fn, *args) -> str:
    """The optimized HLO text of ``jax.jit(fn)(*args)``."""
    return jax.jit(fn).lower(*args).compile().as_text()


def allreduce_fn(mesh: jax.sharding.Mesh):
    """``g_DN`` (one local gradient per device, rows split over the mesh) -> sum over D,
    replicated, via ``lax.psum``."""

    def local(g_1N):
        return jax.lax.psum(g_1N[0], AXIS)

    return jax.shard_map(local, mesh=mesh, in_specs=P(AXIS), out_specs=P())


def reduce_scatter_gather_fn(mesh: jax.sharding.Mesh):
    """The same sum as :func:`allreduce_fn` in two halves: ``psum_scatter`` (each device gets
    the sum of its 1/D slice) then ``all_gather`` (everyone gets every slice)."""

    def local(g_1N):
        piece = jax.lax.psum_scatter(g_1N[0], AXIS, scatter_dimension=0, tiled=True)
        return jax.lax.all_gather(piece, AXIS, axis=0, tiled=True)

    # all_gather's result is the same on every device, but shard_map's replication check
    # cannot infer it from psum_scatter's varying input; the test checks it instead.
    return jax.shard_map(local, mesh=mesh, in_specs=P(AXIS), out_specs=P(), check_vma=False)


def ring_bytes(op: str, n_bytes: int, devices: int) -> float:
    """Bytes each device sends in a ring implementation, for an array of ``n_bytes`` (the full
    reduced/gathered size): all-reduce 2(D-1)/D·n, reduce-scatter and all-gather (D-1)/D·n."""
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    factor = {"all-reduce": 2.0, "reduce-scatter": 1.0, "all-gather": 1.0}
    if op not in factor:
        raise ValueError(f"op must be one of {tuple(factor)}, got {op!r}")
    return factor[op] * (devices - 1) / devices * n_bytes


def expected_result_bytes(op: str, n: int, devices: int, itemsize: int = 4) -> int:
    """Closed form of the HLO result size of each collective on an N-vector over D devices."""
    return {"all-reduce": n, "reduce-scatter": n // devices, "all-gather": n}[op] * itemsize


def accumulated_grads(params, batch, microbatches: int):
    """Mean gradient over ``microbatches`` equal slices of the batch (``lax.scan``), for a
    loss that is a mean over rows: equals the gradient of the whole batch."""
    size = batch["x"].shape[0]
    if microbatches < 1 or size % microbatches:
        raise ValueError(
            f"batch={size} can't be cut into {microbatches} equal microbatches: "
            f"pick a divisor of {size}"
        )
    micro = jax.tree.map(
        lambda v: v.reshape(microbatches, size // microbatches, *v.shape[1:]), batch
    )

    def body(total, mb):
        grads = jax.grad(loss_fn)(params, mb)
        return jax.tree.map(jnp.add, total, grads), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    total, _ = jax.lax.scan(body, zeros, micro)
    return jax.tree.map(lambda g: g / microbatches, total)


# Accumulated gradient vs the NumPy float64 big-batch gradient, absolute: float32 backprop of
# up to 16 microbatches in a lax.scan stays well inside 1e-4 on a CPU.
ACCUMULATION_TOLERANCE = 1e-4


def big_batch_and_accumulated_grads(params, batch, microbatches: int) -> tuple[dict, dict]:
    """The whole batch's gradient and ``accumulated_grads``, both jitted with their matmuls at
    HIGHEST precision, for the comparison with NumPy float64: a TPU's DEFAULT runs them as one
    bfloat16 pass (the accumulated gradient was 4.75e-4 off on a v5e chip). A CPU computes
    float32 either way."""
    with jax.default_matmul_precision("highest"):
        big = jax.jit(jax.grad(loss_fn))(params, batch)
        accumulated = jax.jit(accumulated_grads, static_argnums=2)(params, batch, microbatches)
    return big, accumulated


def accumulation_tolerance(backend: str | None = None) -> float:
    """ACCUMULATION_TOLERANCE, or on a TPU numerics' float32 bound at HIGHEST if larger (its
    log-softmax and tanh set a floor of their own there), with the reason."""
    return max(
        ACCUMULATION_TOLERANCE,
        numerics.tolerance("float32", backend=backend, precision="HIGHEST"),
    )


def strategy_bytes(n: int, devices: int, microbatches: int, itemsize: int = 4) -> list[dict]:
    """Ring bytes each device sends per optimizer step for an N-parameter model, by strategy.

    Gradients and weights have the same N x itemsize bytes. FSDP keeps 1/D of the weights, so
    before the next forward it all-gathers them: with the reduce-scatter of the gradients that
    is an all-reduce's bytes. ZeRO-3 as usually run frees the gathered weights after the
    forward and gathers them again for the backward: 1.5 all-reduces."""
    full = n * itemsize
    allreduce = ring_bytes("all-reduce", full, devices)
    scatter = ring_bytes("reduce-scatter", full, devices)
    gather = ring_bytes("all-gather", full, devices)
    return [
        {
            "strategy": f"all-reduce every microbatch ({microbatches}×)",
            "bytes": microbatches * allreduce,
        },
        {"strategy": "accumulate, then one all-reduce", "bytes": allreduce},
        {"strategy": "reduce-scatter + all-gather", "bytes": scatter + gather},
        {
            "strategy": "FSDP: reduce-scatter grads, all-gather weights for the forward",
            "bytes": scatter + gather,
        },
        {
            "strategy": "ZeRO-3: reduce-scatter, all-gather for the forward and the backward",
            "bytes": scatter + 2 * gather,
        },
    ]


# --- resilient training -------------------------------------------------------------------


def data_parallel_state(params, tx, mesh) -> dict:
    """{"params", "opt_state"} replicated on ``mesh`` (data parallel)."""
    params = place(params, param_specs("data"), mesh)
    opt_state = tx.init(params)
    return {
        "params": params,
        "opt_state": jax.device_put(opt_state, opt_shardings(opt_state, params)),
    }


def train_steps(
    state, iterator, steps: int, mesh, step
) -> tuple[dict, list[float], list[list[int]]]:
    """``steps`` data-parallel steps of ``step`` (:func:`make_train_step`), batches read
    from ``iterator`` (Grain, padded, with mask_B).

    Returns the new state, the loss of each step, and the example ids each batch held.
    """
    losses, ids = [], []
    for _ in range(steps):
        host = next(iterator)
        batch = place(
            {"x": host["x"], "y": host["y"], "mask": host["mask"]}, batch_specs("data"), mesh
        )
        params, opt_state, loss = step(state["params"], state["opt_state"], batch)
        state = {"params": params, "opt_state": opt_state}
        losses.append(float(loss))
        ids.append([int(i) for i in host["id"][host["mask"]]])
    return state, losses, ids


def abstract_on_mesh(state, mesh: jax.sharding.Mesh):
    """ShapeDtypeStructs of ``state`` carrying the same PartitionSpecs on another ``mesh``:
    what Orbax restores into (``ocp.args.StandardRestore``) to reshard while loading."""
    return jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=jax.sharding.NamedSharding(mesh, leaf.sharding.spec)
        ),
        state,
    )


def bitwise_equal(a, b) -> bool:
    """Every leaf of ``a`` and ``b`` has the same shape, dtype and bytes."""
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


@dataclasses.dataclass(frozen=True)
class ResumeRun:
    """An uninterrupted run and a run stopped, saved, and resumed on another mesh."""

    losses_straight: list[float]
    losses_resumed: list[float]  # first ``stop_at`` from the first mesh, the rest after restore
    ids_straight: list[list[int]]
    ids_resumed: list[list[int]]
    saved_state: dict  # the state at ``stop_at`` as it was on the first mesh
    restored_state: dict  # the same state read back onto the second mesh
    final_straight: dict
    final_resumed: dict
    restored_devices: int
    data_state: dict


def resume_on_other_mesh(
    directory,
    *,
    seed: int,
    examples: int,
    features: int,
    hidden: int,
    classes: int,
    batch: int,
    steps: int,
    stop_at: int,
    devices_before: int,
    devices_after: int,
    optimizer: str = "adam",
    learning_rate: float = 0.05,
    matmul_precision: str | None = None,
) -> ResumeRun:
    """Train ``steps`` steps straight on ``devices_before`` devices; again, but stop at
    ``stop_at``, save with core/state/checkpoint (state + Grain iterator state), restore onto
    ``devices_after`` devices and continue. Both use the same seeded data and init, and the
    same step (its matmuls at ``matmul_precision``, see :func:`make_train_step`)."""
    from core import data
    from core.state import checkpoint

    if not 0 < stop_at < steps:
        raise ValueError(f"stop_at must be between 1 and steps-1={steps - 1}, got {stop_at}")
    for devices in (devices_before, devices_after):
        if batch % devices:
            raise ValueError(
                f"batch={batch} can't be split evenly over {devices} devices: "
                f"pick a batch divisible by {devices}"
            )
    tx = make_optimizer(optimizer, learning_rate)
    step = make_train_step(tx, matmul_precision)  # one jitted step for both runs and meshes
    source = data.ColumnSource(data.make_columns(seed, examples, features, classes))
    contract = data.classification_contract(features, classes)
    params = init_mlp(jax.random.key(seed), features, hidden, classes)
    mesh_before = sharding.make_mesh((devices_before,), (AXIS,))
    mesh_after = sharding.make_mesh((devices_after,), (AXIS,))

    def iterator():
        return data.grain_iterator(data.grain_dataset(source, contract, batch, seed))

    final_straight, losses_straight, ids_straight = train_steps(
        data_parallel_state(params, tx, mesh_before), iterator(), steps, mesh_before, step
    )
    it = iterator()
    saved_state, losses_first, ids_first = train_steps(
        data_parallel_state(params, tx, mesh_before), it, stop_at, mesh_before, step
    )
    data_state = it.get_state()
    with checkpoint.Checkpointer(directory, async_save=False) as ckpt:
        ckpt.save(
            stop_at, saved_state, data_state, {"optimizer": optimizer, "batch": batch}, force=True
        )
    with checkpoint.Checkpointer(directory, async_save=False) as ckpt:
        restored = ckpt.restore(stop_at, abstract_on_mesh(saved_state, mesh_after))
    it = iterator()
    it.set_state(restored.data_state)
    final_resumed, losses_rest, ids_rest = train_steps(
        restored.state, it, steps - stop_at, mesh_after, step
    )
    return ResumeRun(
        losses_straight=losses_straight,
        losses_resumed=losses_first + losses_rest,
        ids_straight=ids_straight,
        ids_resumed=ids_first + ids_rest,
        saved_state=saved_state,
        restored_state=restored.state,
        final_straight=final_straight,
        final_resumed=final_resumed,
        restored_devices=len(
            {d.id for leaf in jax.tree.leaves(restored.state) for d in leaf.sharding.device_set}
        ),
        data_state=dict(restored.data_state),
    )


def reference_losses(
    *,
    seed: int,
    examples: int,
    features: int,
    hidden: int,
    classes: int,
    batch_ids: Sequence[Sequence[int]],
    optimizer: str,
    learning_rate: float,
) -> list[float]:
    """The losses of the same run in NumPy float64: same init, the same examples per step
    (``batch_ids``), hand-written backprop and hand-written SGD/Adam (optax's defaults:
    b1=0.9, b2=0.999, eps=1e-8). Independent of JAX, Orbax and the meshes."""
    from core import data

    columns = data.make_columns(seed, examples, features, classes)
    params = {
        k: np.asarray(v, np.float64)
        for k, v in init_mlp(jax.random.key(seed), features, hidden, classes).items()
    }
    mu = {k: np.zeros_like(v) for k, v in params.items()}
    nu = {k: np.zeros_like(v) for k, v in params.items()}
    losses = []
    for count, ids in enumerate(batch_ids, start=1):
        ids = np.asarray(ids)
        host = {"x": columns["x"][ids], "y": columns["y"][ids], "mask": np.ones(len(ids), bool)}
        loss, grads = reference_loss_and_grads(params, host)
        losses.append(loss)
        for k in params:
            if optimizer == "sgd":
                params[k] = params[k] - learning_rate * grads[k]
                continue
            mu[k] = 0.9 * mu[k] + 0.1 * grads[k]
            nu[k] = 0.999 * nu[k] + 0.001 * grads[k] ** 2
            mu_hat, nu_hat = mu[k] / (1 - 0.9**count), nu[k] / (1 - 0.999**count)
            params[k] = params[k] - learning_rate * mu_hat / (np.sqrt(nu_hat) + 1e-8)
    return losses
