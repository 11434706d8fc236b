"""Array partitioning, collective communication and before/after figures for the kernel.

1. Sharded == unsharded: the kernel (forward and Pallas backward, interpret mode) inside
   ``jax.shard_map`` over a (4, 2) mesh of 8 CPU devices, axes ("batch", "heads"), q, k, v,
   dO split as P("batch", "heads"): each device owns whole (b, h) rows of attention, so its
   result equals the unsharded kernel's and the NumPy float64 reference.
2. The collectives in the compiled HLO (all-reduce, all-gather, reduce-scatter, all-to-all,
   collective-permute, counted in ``compiled.as_text()``): none for attention alone (no
   row needs another device's keys); at least one all-reduce for a step whose projection
   weights are replicated over the mesh (their gradient sums every device's part).
3. Before/after on this CPU: XLA's attention (jnp, T x T scores) vs the kernel path, forward
   + backward, median blocked seconds, interleaved. The kernel runs in Pallas interpret mode
   on a CPU: these figures measure semantics, not speed.
4. The TPU compiler's memory for attention with and without the kernel (Mosaic vs XLA) on
   v5e:2x2, v6e:2x2 and tpu7x:2x2x1, compiled on this host (needs libtpu; never run), with
   the closed-form O(T^2) score bytes B * H * T * T * 4 beside them.
"""

from __future__ import annotations

import functools
import pathlib
import re

import numpy as np

from capstones.byte_transformer import args
from capstones.pallas_kernel import agreement, common
from core import numerics

MESH_SHAPE = (4, 2)
AXES = ("batch", "heads")
SHAPE = (4, 2, 32, 16)  # (B, H, T, D): every device gets one (b, h) pair
BLOCKS = (16, 16)
TIMING_SHAPE = (1, 2, 256, 64)
TIMING_BLOCKS = (64, 64)
TOPOLOGIES = ("v5e:2x2", "v6e:2x2", "tpu7x:2x2x1")
TPU_TS = (2048, 4096)
TPU_SHAPE = (1, 4, None, 64)  # (B, H, T, D) of the TPU compiles, T from TPU_TS
TPU_BLOCKS = (128, 128)
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_COLLECTIVE = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def count_collectives(hlo_text: str) -> dict[str, int]:
    """{collective: instructions of that kind} in an HLO module's text (async pairs once)."""
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _COLLECTIVE.finditer(hlo_text):
        counts[match.group(1)] += 1
    return counts


def make_mesh(devices=None):
    """The (4, 2) ("batch", "heads") mesh over the first 8 devices; ValueError with fewer."""
    import jax

    devices = list(devices if devices is not None else jax.devices())
    need = MESH_SHAPE[0] * MESH_SHAPE[1]
    if len(devices) < need:
        raise ValueError(
            f"the partition needs {need} devices, JAX has {len(devices)}: start the process "
            f"with JAX_NUM_CPU_DEVICES={need} (the capstone's CLI and the lab ask for it)"
        )
    return jax.sharding.Mesh(np.array(devices[:need]).reshape(MESH_SHAPE), AXES)


def _local(q, k, v, do, *, causal, blocks, interpret):
    """Forward and backward of the kernel on whatever rows this device holds."""
    import jax

    from core.kernels import flash_attention

    attend = functools.partial(
        flash_attention.flash_attention,
        causal=causal,
        block_q=blocks[0],
        block_k=blocks[1],
        backward="kernel",
        interpret=interpret,
    )
    o, vjp = jax.vjp(attend, q, k, v)
    return (o, *vjp(do))


def programs(mesh, causal: bool, blocks, interpret):
    """(sharded, unsharded) jitted programs: (q, k, v, dO) -> (O, dQ, dK, dV)."""
    import jax

    from core.kernels import flash_attention

    spec = jax.sharding.PartitionSpec(*AXES)
    local = functools.partial(_local, causal=causal, blocks=blocks, interpret=interpret)
    mapped = jax.shard_map(
        local, mesh=mesh, in_specs=(spec,) * 4, out_specs=(spec,) * 4, check_vma=False
    )
    options = flash_attention.COMPILER_OPTIONS
    return jax.jit(mapped, compiler_options=options), jax.jit(local, compiler_options=options)


def projection_step(mesh, causal: bool, blocks, interpret):
    """A step that needs a collective: q, k, v projected from x_BTD (split over "batch") by
    weights w_3DHK replicated over the mesh, the kernel in shard_map, loss mean(O^2); its
    jitted gradient with respect to the weights (replicated: every device's part summed)."""
    import jax
    import jax.numpy as jnp

    from core.kernels import flash_attention

    P = jax.sharding.PartitionSpec
    spec = P(*AXES)

    def kernel(q, k, v):
        return flash_attention.flash_attention(
            q, k, v, causal, blocks[0], blocks[1], "kernel", interpret
        )

    mapped = jax.shard_map(kernel, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)

    def loss(w_3DHK, x_BTD):
        q, k, v = (jnp.einsum("btd,dhk->bhtk", x_BTD, w) for w in w_3DHK)
        return jnp.mean(mapped(q, k, v).astype(jnp.float32) ** 2)

    sharding = functools.partial(jax.sharding.NamedSharding, mesh)
    return jax.jit(
        jax.grad(loss),
        in_shardings=(sharding(P()), sharding(P("batch"))),
        out_shardings=sharding(P()),
        compiler_options=flash_attention.COMPILER_OPTIONS,
    ), loss


def sharded_check(
    shape=SHAPE,
    blocks=BLOCKS,
    causal: bool = True,
    dtype: str = "float32",
    seed: int = 0,
    interpret=None,
    mesh=None,
) -> dict:
    """Sharded vs unsharded vs float64, and the collectives of both programs."""
    import jax
    import jax.numpy as jnp

    mesh = mesh or make_mesh()
    if shape[0] % MESH_SHAPE[0] or shape[1] % MESH_SHAPE[1]:
        raise ValueError(f"B and H of {shape} must be multiples of the mesh {MESH_SHAPE}")
    q, k, v, do = agreement.operands(shape, dtype, seed)
    sharded, unsharded = programs(mesh, causal, blocks, interpret)
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*AXES))
    placed = [jax.device_put(x, spec) for x in (q, k, v, do)]
    compiled = sharded.lower(*placed).compile()
    out_sharded = compiled(*placed)
    out_whole = unsharded(q, k, v, do)
    expected = agreement.references(q, k, v, do, causal)
    attention_collectives = count_collectives(compiled.as_text())

    step, _ = projection_step(mesh, causal, blocks, interpret)
    d_model = shape[1] * shape[3]
    rng = np.random.default_rng(seed + 1)
    w = jnp.asarray(rng.standard_normal((3, d_model, shape[1], shape[3])) / np.sqrt(d_model), dtype)
    x = jnp.asarray(rng.standard_normal((shape[0], shape[2], d_model)), dtype)
    step_compiled = step.lower(w, x).compile()
    step_collectives = count_collectives(step_compiled.as_text())
    tol = numerics.tolerance(dtype)
    sharded_vs_whole = agreement.errors(out_sharded, out_whole)
    sharded_vs_64 = agreement.errors(out_sharded, expected)
    return {
        "mesh": {"shape": list(MESH_SHAPE), "axes": list(AXES), "devices": 8},
        "shape (B,H,T,D)": list(shape),
        "per-device shape": [shape[0] // MESH_SHAPE[0], shape[1] // MESH_SHAPE[1], *shape[2:]],
        "blocks": list(blocks),
        "causal": causal,
        "dtype": dtype,
        "sharded vs unsharded": sharded_vs_whole,
        "sharded vs float64": sharded_vs_64,
        "tolerance": tol,
        "equal": bool(max(sharded_vs_whole.values()) <= tol and max(sharded_vs_64.values()) <= tol),
        "output sharding": str(out_sharded[0].sharding.spec),
        "collectives": {
            "attention (shard_map over batch, heads)": attention_collectives,
            "projection-weight gradient (weights replicated)": step_collectives,
        },
        "why": "attention alone: each device owns whole (b, h) rows and a row's softmax runs "
        "over its own keys, so nothing crosses devices (0 collectives). The projection step: "
        "x is split over batch and the weights are replicated; each device computes the "
        "weight gradient of its own head slice from its batch slice, XLA sums those over the "
        "batch axis (all-reduce within each column of the mesh) and gathers the head slices "
        "into the replicated gradient (all-gather over 'heads').",
    }


def before_after(shape=TIMING_SHAPE, blocks=TIMING_BLOCKS, rounds: int = 3, interpret=None):
    """Median blocked seconds of forward + backward: XLA's attention vs the kernel path."""
    from core.kernels import flash_attention
    from core.perf import timing

    q, k, v, do = agreement.operands(shape, "float32", 0)
    steppers = {
        "XLA reference (jnp attention, T x T scores)": lambda: flash_attention.reference_and_grads(
            q, k, v, do, True
        ),
        "kernel path (Pallas forward + backward)": lambda: flash_attention.forward_and_grads(
            q, k, v, do, True, blocks[0], blocks[1], "kernel", interpret
        ),
    }
    wall, _ = timing.interleaved(steppers, rounds=rounds, warmup=1, alternate=True)
    rows = [
        {"program": name, "median (ms)": timing.summarize(samples).median * 1e3, "rounds": rounds}
        for name, samples in wall.items()
    ]
    return {
        "label": common.INTERPRET_LABEL,
        "shape (B,H,T,D)": list(shape),
        "blocks": list(blocks),
        "what": "forward + backward, causal, float32, interleaved rounds (core.perf.timing)",
        "rows": rows,
    }


def tpu_memory_rows(
    topologies=TOPOLOGIES,
    ts=TPU_TS,
    heads: int = TPU_SHAPE[1],
    d: int = TPU_SHAPE[3],
    blocks=TPU_BLOCKS,
    progress=None,
) -> list[dict]:
    """One row per (topology, T, program): the TPU compiler's memory_analysis of one chip
    for the Mosaic kernel and for XLA's attention, and the closed-form score bytes."""
    import jax.numpy as jnp

    from core.kernels import flash_attention
    from core.tpu import topology_compile

    problem = topology_compile.libtpu_problem()
    rows = []
    cfg = flash_attention.Config(blocks[0], blocks[1], causal=True)
    for topology in topologies:
        for t in ts:
            scores = heads * t * t * 4
            for program, kernel in (("flash kernel (Mosaic)", True), ("XLA attention", False)):
                row = {
                    "topology": topology,
                    "T": t,
                    "program": program,
                    "closed-form scores (MiB)": scores / 2**20,
                }
                if problem is not None:
                    rows.append({**row, "result": f"not compiled: {problem}"})
                    continue
                try:
                    report, has_call = flash_attention.compile_for_topology(
                        topology, (1, heads, t, d), cfg, jnp.float32, kernel=kernel
                    )
                except Exception as exc:  # a compiler refusal is a result, reported as such
                    rows.append({**row, "result": f"compile failed: {str(exc)[:160]}"})
                    continue
                memory = report.memory
                rows.append(
                    {
                        **row,
                        "device kind": report.device_kind,
                        "Mosaic call in HLO": ("yes" if has_call else "no") if kernel else "-",
                        "peak (MiB)": topology_compile.peak_bytes(memory) / 2**20,
                        "temporaries (MiB)": memory["temp_size_in_bytes"] / 2**20,
                        "result": "compiled",
                    }
                )
                if progress is not None:
                    progress(
                        f"partition: {topology} T={t} {program}: peak "
                        f"{rows[-1]['peak (MiB)']:.1f} MiB"
                    )
    return rows


def run(
    interpret: str = "tpu",
    topologies=TOPOLOGIES,
    ts=TPU_TS,
    rounds: int = 3,
    progress=None,
) -> dict:
    """The partition section: sharded check, collectives, CPU before/after, TPU memory."""
    mode = common.interpret_mode(interpret)
    say = progress or (lambda line: None)
    check = sharded_check(interpret=mode)
    say(f"partition: sharded == unsharded: {check['equal']}; collectives {check['collectives']}")
    timing_figures = before_after(rounds=rounds, interpret=mode)
    say(f"partition: before/after {timing_figures['rows']}")
    return {
        "section": "partition",
        "created_utc": common.now_utc(),
        "hardware": common.hardware(),
        "label": common.INTERPRET_LABEL if mode is not False else "compiled by Mosaic on a TPU",
        "sharded": check,
        "before_after": timing_figures,
        "tpu_memory": {
            "what": "compiled on this host for each TPU topology (jax.experimental.topologies "
            "+ libtpu): one chip's memory_analysis; evidence about memory, never speed",
            "shape (B,H,T,D)": f"1 x {TPU_SHAPE[1]} x T x {TPU_SHAPE[3]}",
            "blocks": list(TPU_BLOCKS),
            "rows": tpu_memory_rows(topologies, ts, progress=say),
        },
    }


def _parse_list(name: str, text: str, kind=str) -> tuple:
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise args.UsageError(f"{name} needs at least one value, got {text!r}")
    try:
        return tuple(kind(item) for item in items)
    except ValueError:
        raise args.UsageError(
            f"{name} takes comma-separated {kind.__name__}s, got {text!r}"
        ) from None


def command(parsed: args.Parsed) -> int:
    interpret = args.choice("interpret", parsed["interpret"], common.INTERPRETS)
    topologies = (
        () if parsed["topologies"] == "none" else _parse_list("topologies", parsed["topologies"])
    )
    for name in topologies:
        args.choice("topologies", name, TOPOLOGIES)
    ts = _parse_list("ts", parsed["ts"], int)
    for t in ts:
        if t < TPU_BLOCKS[0] or t % TPU_BLOCKS[0] or t > 16384:
            raise args.UsageError(
                f"each T must be a multiple of {TPU_BLOCKS[0]} in {TPU_BLOCKS[0]}..16384, got {t}"
            )
    if not 1 <= parsed["rounds"] <= 50:
        raise args.UsageError(f"rounds must be in 1..50, got {parsed['rounds']}")
    section = run(interpret, topologies, ts, parsed["rounds"], progress=print)
    check = section["sharded"]
    print(f"\nsharded == unsharded == float64: {check['equal']} (tolerance {check['tolerance']:g})")
    for what, counts in check["collectives"].items():
        print(f"collectives, {what}: {counts}")
    common.print_rows(
        section["before_after"]["rows"], f"\nbefore/after ({common.INTERPRET_LABEL}):"
    )
    common.print_rows(section["tpu_memory"]["rows"], "\nTPU compiler memory (one chip):")
    print(f"wrote {common.write_json(pathlib.Path(parsed['out']), 'partition.json', section)}")
    return 0 if check["equal"] else 1


OPTIONS = {
    "out": args.Option(str, common.DEFAULT_OUT, "output folder (partition.json)"),
    "interpret": args.Option(str, "tpu", "tpu (races detected) or hlo (plain HLO interpreter)"),
    "topologies": args.Option(str, ",".join(TOPOLOGIES), "TPU topologies to compile for, or none"),
    "ts": args.Option(str, ",".join(map(str, TPU_TS)), "sequence lengths of the TPU compiles"),
    "rounds": args.Option(int, 3, "interleaved timing rounds of the CPU before/after"),
}
COMMANDS = {
    "partition": args.Command(
        "the kernel in shard_map on 8 devices, collectives, TPU memory", OPTIONS, command, False
    )
}
