"""Artifact ``timing-placement``: a synchronized timing report and a checked array placement.

Timing (core/perf/timing.py) of one jitted program, a chain of ``tanh(x @ w)`` layers: trace +
lower and compile apart, then steady state timed over repeats with ``block_until_ready``
(the clock stops when the result exists) and without (the clock stops when the work is
queued: the classic wrong number), as median and spread. Its output is checked against the
same chain in NumPy float64 first, so the timed program is the right one.

Placement on logical CPU devices: a (2, 4) mesh ("data", "model") over 8 CPU devices
($JAX_NUM_CPU_DEVICES=8), an (8, 16) array placed with several PartitionSpecs, and every
device's shard checked: its index against the slice computed here in NumPy from the device's
position in the mesh, its data against that slice of the array.
"""

from __future__ import annotations

from tpu_scripts import receipt as runtime_receipt
from tpu_scripts.artifacts import common

NAME = "timing-placement"
MESH_SHAPE = (2, 4)
MESH_AXES = ("data", "model")
ARRAY_SHAPE = (8, 16)
# PartitionSpecs placed, as (dimension 0 axis, dimension 1 axis); None: not split.
SPECS = (
    ("data", "model"),
    ("data", None),
    (None, "model"),
    ("model", "data"),
    (None, None),
    (("data", "model"), None),
)
LAYERS = 4


class Document(common.Envelope):
    timing: dict
    placement: list[dict]


def spec_text(spec) -> str:
    def one(axis):
        if axis is None:
            return "None"
        if isinstance(axis, tuple):
            return "(" + ", ".join(repr(a) for a in axis) + ")"
        return repr(axis)

    return "P(" + ", ".join(one(a) for a in spec) + ")"


def expected_index(shape, spec, mesh_position: dict[str, int], mesh_sizes: dict[str, int]):
    """The slice of an array of ``shape`` that the device at ``mesh_position`` holds under
    ``spec`` (NamedSharding's block layout), computed in plain integers: each dimension is cut
    into as many equal blocks as the product of its mesh axes' sizes, and the device's block
    number is its position along those axes, major to minor."""
    index = []
    for size, axes in zip(shape, spec, strict=True):
        axes = () if axes is None else (axes if isinstance(axes, tuple) else (axes,))
        blocks, block = 1, 0
        for axis in axes:
            blocks *= mesh_sizes[axis]
            block = block * mesh_sizes[axis] + mesh_position[axis]
        step = size // blocks
        index.append(slice(block * step, (block + 1) * step))
    return tuple(index)


def placement(cpu_devices) -> tuple[list[dict], list[dict]]:
    """(rows: one per device and spec, checks) for the specs in SPECS on a 2 x 4 CPU mesh."""
    import jax
    import numpy as np

    mesh_devices = np.array(cpu_devices[: MESH_SHAPE[0] * MESH_SHAPE[1]]).reshape(MESH_SHAPE)
    mesh = jax.sharding.Mesh(mesh_devices, MESH_AXES)
    sizes = dict(zip(MESH_AXES, MESH_SHAPE, strict=True))
    x_np = np.arange(np.prod(ARRAY_SHAPE), dtype=np.float32).reshape(ARRAY_SHAPE)
    rows, checks = [], []
    for spec in SPECS:
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
        x = jax.device_put(x_np, sharding)
        wrong = []
        shards = {shard.device.id: shard for shard in x.addressable_shards}
        for position in np.ndindex(*MESH_SHAPE):
            device = mesh_devices[position]
            where = dict(zip(MESH_AXES, position, strict=True))
            want = expected_index(ARRAY_SHAPE, spec, where, sizes)
            shard = shards[device.id]
            got = tuple(
                slice(*s.indices(n)[:2]) for s, n in zip(shard.index, ARRAY_SHAPE, strict=True)
            )
            same_index = got == want
            same_data = np.array_equal(np.asarray(shard.data), x_np[want])
            if not (same_index and same_data):
                wrong.append(device.id)
            rows.append(
                {
                    "spec": spec_text(spec),
                    "device": device.id,
                    "mesh (data, model)": f"({position[0]}, {position[1]})",
                    "rows": f"{want[0].start}:{want[0].stop}",
                    "cols": f"{want[1].start}:{want[1].stop}",
                    "shard shape": "x".join(str(d) for d in shard.data.shape),
                    "matches": same_index and same_data,
                }
            )
        checks.append(
            common.check(
                f"placement {spec_text(spec)}: every shard is the NumPy slice",
                not wrong and len(shards) == len(mesh_devices.flat),
                f"{len(shards)} shards of {ARRAY_SHAPE} checked (index and data)"
                + (f"; wrong on devices {wrong}" if wrong else ""),
            )
        )
    return rows, checks


def _chain_numpy(x, ws):
    import numpy as np

    h = np.asarray(x, np.float64)
    for w in ws:
        h = np.tanh(h @ np.asarray(w, np.float64))
    return h


def timing_report(size: int, repeats: int, seed: int = 0) -> tuple[dict, list[dict]]:
    import jax
    import jax.numpy as jnp

    from core import numerics
    from core.perf import timing

    keys = jax.random.split(jax.random.key(seed), LAYERS + 1)
    x = jax.random.normal(keys[0], (size, size), jnp.float32)
    ws = [jax.random.normal(k, (size, size), jnp.float32) / size**0.5 for k in keys[1:]]

    def make_chain():  # a new function object each time: JAX caches compiles per function
        def chain(x, ws):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return h

        return chain

    first_s = timing.time_first_call(jax.jit(make_chain()), x, ws)  # trace + compile + run
    compiled = timing.lower_and_compile(jax.jit(make_chain()), x, ws)
    error = numerics.scaled_max_error(compiled.executable(x, ws), _chain_numpy(x, ws))
    blocked = timing.time_calls(compiled.executable, x, ws, repeats=repeats, warmup=1)
    unblocked = timing.time_calls(
        compiled.executable, x, ws, repeats=repeats, warmup=1, block=False
    )
    b, u = blocked.summary, unblocked.summary
    flops = 2 * LAYERS * size**3
    report = {
        "program": f"{LAYERS} x tanh(x @ w), x and w {size} x {size} float32",
        "flops_per_call": flops,
        "trace_lower_s": compiled.lower_s,
        "compile_s": compiled.compile_s,
        "first_call_s": first_s,
        "blocked_median_s": b.median,
        "blocked_p10_s": b.p10,
        "blocked_p90_s": b.p90,
        "unblocked_median_s": u.median,
        "unblocked_p10_s": u.p10,
        "unblocked_p90_s": u.p90,
        "repeats": repeats,
        "blocked_samples_s": list(blocked.samples),
        "unblocked_samples_s": list(unblocked.samples),
        "error_vs_float64": error,
    }
    checks = [
        common.check(
            "the timed program computes the chain (vs NumPy float64)",
            error <= numerics.tolerance("float32"),
            f"scaled max error {error:.2g} (float32 tolerance {numerics.tolerance('float32'):g})",
        )
    ]
    return report, checks


def build(size: int = 256, repeats: int = 20) -> tuple[dict, list]:
    import jax

    from core import runtime

    runtime.use_cpu_devices(8)
    receipt = runtime_receipt.runtime_receipt(repeats=3)
    cpu_devices = jax.devices("cpu")
    timing, checks = timing_report(size, repeats)
    if len(cpu_devices) < 8:
        rows = []
        checks.append(
            common.check(
                "8 logical CPU devices for the placement",
                False,
                f"JAX has {len(cpu_devices)} CPU devices: run with JAX_NUM_CPU_DEVICES=8 "
                "before JAX starts",
            )
        )
    else:
        rows, placement_checks = placement(cpu_devices)
        checks += placement_checks
    ratio = timing["unblocked_median_s"] / timing["blocked_median_s"]
    steady_ms = timing["blocked_median_s"] * 1e3
    decisions = [
        common.decision(
            "timing",
            f"report the blocked median, {steady_ms:.3g} ms per call "
            f"(p10-p90 {timing['blocked_p10_s'] * 1e3:.3g}-{timing['blocked_p90_s'] * 1e3:.3g} ms"
            f", {timing['repeats']} repeats), and the compile, "
            f"{timing['compile_s'] * 1e3:.3g} ms, apart",
            f"without block_until_ready the median is {timing['unblocked_median_s'] * 1e3:.3g}"
            f" ms ({ratio:.0%} of the blocked one): it timed the dispatch, not the work; the "
            f"first call took {timing['first_call_s'] * 1e3:.3g} ms "
            f"({timing['first_call_s'] / timing['blocked_median_s']:.0f}x a steady call)",
        )
    ]
    document = common.envelope(NAME, receipt, checks, decisions)
    document["timing"] = timing
    document["placement"] = rows
    timing_rows = [
        {"what": "trace + lower", "ms": timing["trace_lower_s"] * 1e3},
        {"what": "compile", "ms": timing["compile_s"] * 1e3},
        {"what": "first call (trace + compile + run)", "ms": timing["first_call_s"] * 1e3},
        {
            "what": "steady call, blocked: median (p10-p90)",
            "ms": f"{steady_ms:.4g} ({timing['blocked_p10_s'] * 1e3:.3g}-"
            f"{timing['blocked_p90_s'] * 1e3:.3g})",
        },
        {
            "what": "steady call, NOT blocked: median (p10-p90), wrong",
            "ms": f"{timing['unblocked_median_s'] * 1e3:.4g} ("
            f"{timing['unblocked_p10_s'] * 1e3:.3g}-{timing['unblocked_p90_s'] * 1e3:.3g})",
        },
    ]
    sections = [
        (f"Timing: {timing['program']} on {receipt['backend']}", timing_rows),
        (
            f"Placement: {ARRAY_SHAPE} array on a {MESH_SHAPE} mesh {MESH_AXES} of CPU devices",
            rows,
        ),
    ]
    return document, sections


def add_arguments(parser) -> None:
    parser.add_argument("--size", type=int, default=256, help="matrix size N of the timed chain")
    parser.add_argument("--repeats", type=int, default=20, help="timed steady-state calls")


def problem(args) -> str | None:
    if not 8 <= args.size <= 8192:
        return f"--size must be in 8..8192, got {args.size}"
    if not 3 <= args.repeats <= 10000:
        return f"--repeats must be in 3..10000 (a median and a spread), got {args.repeats}"
    return None


def produce(args, out_dir) -> tuple[dict, list]:
    document, sections = build(args.size, args.repeats)
    return document, common.write(out_dir, Document, document, sections)
