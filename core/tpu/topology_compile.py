"""Compile for real TPU topologies on a CPU host (libtpu, the `tpu` extra): memory and cost.

``jax.experimental.topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")``
returns compile-only TPU devices; ``jax.jit(f).lower(...).compile()`` on a mesh of them
runs the real TPU compiler, whose ``memory_analysis()`` and ``cost_analysis()`` are evidence
about TPU memory and compilation (never about TPU speed: nothing runs).

Gotchas handled here:
- libtpu takes a host-wide lock file (/tmp/libtpu_lockfile) when it loads; a second process
  doing the same then fails with "Internal error when accessing libtpu multi-process
  lockfile". Compile-only use needs no exclusive chip access, so this module sets
  ``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` before libtpu loads.
- On a host without TPU chips libtpu looks for the VM it runs on (its accelerator type and
  worker hostnames, from the metadata server) and prints "Failed to find host bounds...",
  "WARNING: Logging before InitGoogle()" and "E0000 ... unexpected worker hostname" to
  stderr: not errors for compile-only use, but a learner reads them as failures. There this
  module names the host itself (``TPU_WORKER_HOSTNAMES=localhost`` and an accelerator type),
  which libtpu then reads instead; the compiled programs are byte-for-byte the same (checked
  for v5e, v5p, v6e and TPU7x), and a topology libtpu refuses still raises. On a TPU VM
  nothing is set.
- Topology names are the ``vXX:AxB`` form (``v5e:2x2``, ``v5p:2x2x1``, ``v6e:2x2``), and
  ``tpu7x:2x2x1`` for Ironwood (``v7x:...`` is refused);
  gcloud accelerator types such as ``v5litepod-8`` are rejected, and a topology must be a
  multiple of the host's chip layout (``v5e:1x1`` is refused).
- memory_analysis() and cost_analysis() describe ONE device's program (SPMD: every chip
  runs the same program on its shard).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re

import jax
import numpy as np

from core import runtime

P = jax.sharding.PartitionSpec

MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
    "peak_memory_in_bytes",
)


# What libtpu would read from the metadata server of a TPU VM, named for a CPU host. The
# accelerator type only tells libtpu the host's own chip layout, which compile-only
# topologies (named in get_topology_desc) do not use. TPU_SKIP_MDS_QUERY: a CPU host has no
# metadata server to ask; in a kernel forked by `make lab` (core/lab/warm_kernels.py) libtpu's
# start asked it in a retry loop and the lesson hung for minutes (seen in gdb: FetchUrl under
# FetchGceInstanceAttributeMetadata, select_tpu_slice's first run).
CPU_HOST_LIBTPU_ENV = {
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_SKIP_MDS_QUERY": "1",
}


def _prepare_libtpu_for_compile_only() -> None:
    """Set libtpu's environment before it loads (it reads it once per process)."""
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # A persistent compilation cache cannot load a compile-only TPU executable back (no TPU
    # client: "PjRtCompiler must be constructed with a Client"): every read would warn, then
    # recompile. So a process that compiles for TPU topologies compiles without one.
    jax.config.update("jax_enable_compilation_cache", False)
    # JAX decides once per process whether the cache is in use: forget that decision, or a
    # process that compiled for its CPU first would keep using the cache.
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()
    if not runtime.host_has_tpu():
        for name, value in CPU_HOST_LIBTPU_ENV.items():
            os.environ.setdefault(name, value)


def libtpu_problem() -> str | None:
    """Why TPU topologies cannot be compiled for here (libtpu missing), or None."""
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return "libtpu is not installed: install the `tpu` extra (pip install -e '.[tpu]')"
    return None


# Topologies this process compiled for: a lesson's results receipt names them (core.lab.results).
TOPOLOGIES_USED: set[str] = set()


@functools.cache
def topology_devices(topology_name: str) -> tuple:
    """The compile-only TPU devices of ``topology_name`` (cached per process)."""
    if (problem := libtpu_problem()) is not None:
        raise ValueError(problem)
    if topology_name.startswith(("v7", "7x")):
        raise ValueError(
            f"Ironwood's topology names start with tpu7x (tpu7x:2x2x1), got {topology_name!r}"
        )
    if not re.fullmatch(r"(v[0-9][a-z]?|tpu7x):[0-9]+(x[0-9]+){1,2}", topology_name):
        raise ValueError(
            "topology name must look like v5e:2x2, v5p:2x2x1 or tpu7x:2x2x1, got "
            f"{topology_name!r} "
            "(gcloud accelerator types such as v5litepod-8 are not topology names)"
        )
    _prepare_libtpu_for_compile_only()
    from jax.experimental import topologies

    try:
        description = topologies.get_topology_desc(platform="tpu", topology_name=topology_name)
    except Exception as error:  # libtpu raises JaxRuntimeError with a readable message
        raise ValueError(
            f"libtpu refused topology {topology_name!r}: {str(error).splitlines()[0]}"
        ) from error
    TOPOLOGIES_USED.add(topology_name)
    return tuple(description.devices)


def topology_mesh(topology_name: str, axis: str = "data") -> jax.sharding.Mesh:
    """A 1-D mesh over every device of the topology."""
    return jax.sharding.Mesh(np.array(topology_devices(topology_name)), (axis,))


def memory_dict(compiled) -> dict[str, int]:
    """memory_analysis() of a compiled program as a plain dict of byte counts (one device)."""
    stats = compiled.memory_analysis()
    return {name: int(getattr(stats, name)) for name in MEMORY_FIELDS}


def cost_dict(compiled) -> dict[str, float]:
    """cost_analysis() as a dict (older JAX returned a one-element list of dicts)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {str(k): float(v) for k, v in (cost or {}).items()}


def peak_bytes(memory: dict[str, int]) -> int:
    """The compiler's peak live bytes for one device.

    The larger of ``peak_memory_in_bytes`` and arguments + outputs - aliased + temporaries:
    TPU compiles report a peak but may leave temp_size at 0 (v5e, v6e), while the CPU
    compiler's peak counts arguments and outputs only.
    """
    accounted = (
        memory["argument_size_in_bytes"]
        + memory["output_size_in_bytes"]
        - memory["alias_size_in_bytes"]
        + memory["temp_size_in_bytes"]
    )
    return max(memory.get("peak_memory_in_bytes", 0), accounted)


@dataclasses.dataclass(frozen=True)
class CompileReport:
    topology: str
    device_kind: str
    devices: int
    memory: dict[str, int]
    cost: dict[str, float]


def compile_for_topology(
    fn, arg_shapes, in_specs, topology_name: str, out_specs=None, donate_argnums=()
):
    """Compile ``fn`` for every device of the topology; returns (CompileReport, compiled).

    ``arg_shapes``: pytrees of jax.ShapeDtypeStruct; ``in_specs``: matching pytrees (or one
    prefix) of PartitionSpecs over the mesh axis "data".
    """
    mesh = topology_mesh(topology_name)
    to_sharding = lambda spec: jax.sharding.NamedSharding(mesh, spec)  # noqa: E731
    is_spec = lambda x: isinstance(x, P)  # noqa: E731
    in_shardings = jax.tree.map(to_sharding, in_specs, is_leaf=is_spec)
    out_shardings = (
        None if out_specs is None else jax.tree.map(to_sharding, out_specs, is_leaf=is_spec)
    )
    jitted = jax.jit(
        fn, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=donate_argnums
    )
    compiled = jitted.lower(*arg_shapes).compile()
    devices = topology_devices(topology_name)
    report = CompileReport(
        topology_name,
        devices[0].device_kind,
        len(devices),
        memory_dict(compiled),
        cost_dict(compiled),
    )
    return report, compiled


_HBM_MESSAGE = re.compile(r"exceeds available HBM \(([0-9.]+)([KMGT])\)")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_available_hbm(message: str) -> float | None:
    """Bytes from the compiler's "exceeds available HBM (15.75G)" message (G = GiB), or None."""
    match = _HBM_MESSAGE.search(message)
    return float(match.group(1)) * _UNITS[match.group(2)] if match else None


@functools.cache
def usable_hbm_bytes(topology_name: str) -> float:
    """HBM per chip that the TPU compiler lets one program use, read off its refusal.

    Compiles a program that needs 1 TiB on one chip; the compiler answers
    RESOURCE_EXHAUSTED "... exceeds available HBM (15.75G)" and the number is parsed.
    """
    import jax.numpy as jnp

    too_big = jax.ShapeDtypeStruct((2**38,), jnp.float32)  # 1 TiB
    try:
        compile_for_topology(lambda x: x * 2, (too_big,), (P(),), topology_name, donate_argnums=0)
    except Exception as error:  # the compiler's RESOURCE_EXHAUSTED
        if (available := parse_available_hbm(str(error))) is not None:
            return available
        raise
    raise RuntimeError(f"a 1 TiB program compiled for {topology_name}: cannot read the HBM limit")


def param_specs_fsdp(param_shapes, chips: int):
    """FSDP-style specs: split each parameter's first dimension that ``chips`` divides."""

    def spec(leaf):
        for dim, size in enumerate(leaf.shape):
            if size % chips == 0 and size >= chips:
                return P(*([None] * dim), "data")
        return P()

    return jax.tree.map(spec, param_shapes)


def _training_arg_shapes(shape, setup):
    from core.tpu import model

    step, optimizer = model.make_train_step(shape, setup.compute_dtype, setup.remat)
    param_shapes = jax.eval_shape(
        lambda: model.init_params(jax.random.key(0), shape, setup.param_dtype)
    )
    opt_shapes = jax.eval_shape(optimizer.init, param_shapes)
    import jax.numpy as jnp

    tokens = jax.ShapeDtypeStruct((setup.batch, setup.seq), jnp.int32)
    return step, (param_shapes, opt_shapes, tokens, tokens)


@functools.lru_cache(maxsize=32)
def training_step_report(shape, setup, topology_name: str) -> CompileReport:
    """Compile one Adam training step of core.tpu.model for the topology (cached per process).

    Batch split over the chips ("data"); parameters and optimizer state replicated
    (strategy "data") or split FSDP-style ("fsdp"); parameters and optimizer state donated,
    as a real training loop does.
    """
    devices = topology_devices(topology_name)
    if setup.chips != len(devices):
        raise ValueError(
            f"setup.chips is {setup.chips} but {topology_name} has {len(devices)} JAX devices "
            "(one per chip; one per TensorCore on TPU7x): compile over every device"
        )
    step, (params, opt_state, tokens, targets) = _training_arg_shapes(shape, setup)
    if setup.strategy == "fsdp":
        param_spec = param_specs_fsdp(params, setup.chips)
        opt_spec = jax.tree.map(lambda leaf: P(), opt_state)
        # optimizer moments mirror the parameter tree: shard them the same way
        opt_spec = (
            type(opt_state[0])(count=P(), mu=param_spec, nu=param_spec),
            *opt_spec[1:],
        )
    else:
        param_spec = jax.tree.map(lambda leaf: P(), params)
        opt_spec = jax.tree.map(lambda leaf: P(), opt_state)
    in_specs = (param_spec, opt_spec, P("data"), P("data"))
    out_specs = (param_spec, opt_spec, P())
    report, _compiled = compile_for_topology(
        step,
        (params, opt_state, tokens, targets),
        in_specs,
        topology_name,
        out_specs,
        donate_argnums=(0, 1),
    )
    return report


def training_comparison(shape, setup, report: CompileReport) -> list[dict]:
    """Analytic budget (core.tpu.budget) beside the compiler's memory_analysis, per chip.

    Rows: arguments (parameters + optimizer state + this chip's tokens and targets),
    outputs aliased to donated inputs, and peak live bytes.
    """
    from core.tpu import budget

    parts = budget.training_budget(shape, setup)
    batch_bytes = 2 * (setup.batch // setup.chips) * setup.seq * 4  # int32 tokens + targets
    state = parts["parameters"] + parts["master copy"] + parts["optimizer moments"]
    memory = report.memory
    rows = [
        (
            "arguments: parameters + optimizer state + batch",
            state + batch_bytes,
            memory["argument_size_in_bytes"],
        ),
        ("outputs aliased to donated inputs", state, memory["alias_size_in_bytes"]),
        (
            "peak live bytes (analytic: every component at once)",
            sum(parts.values()) + batch_bytes,
            peak_bytes(memory),
        ),
    ]
    return [
        {
            "topology": report.topology,
            "per chip": name,
            "analytic (MB)": round(analytic / 1e6, 3),
            "compiler (MB)": round(compiler / 1e6, 3),
            "compiler - analytic (KB)": round((compiler - analytic) / 1e3, 1),
        }
        for name, analytic, compiler in rows
    ]
