"""Pick a Cloud TPU slice from a model's size, batch and sequence length.

Two needs decide the slice. **Memory**: every byte of training state (or inference weights)
plus the activations a step keeps must fit in the slice's HBM, sharded across its chips
(FSDP/ZeRO-style: nothing replicated). **Throughput**: the step's FLOPs (6 N per trained
token, 2 N per inferred token, N = parameters) divided by the target step time and a model
FLOP utilization (MFU) give the peak FLOP/s the slice must offer. The chip count is the
larger of the two, rounded up to a slice gcloud sells (core/tpu/cloud_tpu.ACCELERATOR_TYPES);
per-chip figures come from core/tpu/specs.py.

Units: bytes, FLOP, FLOP/s, seconds. "GB" is 1e9 bytes.
"""

from __future__ import annotations

import dataclasses
import math

from core.tpu import cloud_tpu, specs

# Bytes kept per parameter. Training: bf16 weights for the forward pass are cast on the fly
# from float32 master weights (4), float32 gradients (4) and Adam's two float32 moments (8).
BYTES_PER_PARAM = {
    "train": {"float32 master weights": 4, "float32 gradients": 4, "Adam moments (2 x float32)": 8},
    "inference": {"bfloat16 weights": 2},
}
ACTIVATION_BYTES = 2  # bfloat16 activations
HBM_USABLE = 0.9  # the runtime, XLA scratch and fragmentation take the rest
MODES = tuple(BYTES_PER_PARAM)

# Slice topologies (chip grid) by chip count: 2D torus for v5e/v6e, 3-D for v5p and TPU7x.
TOPOLOGY_2D = {
    1: "1x1",
    4: "2x2",
    8: "2x4",
    16: "4x4",
    32: "4x8",
    64: "8x8",
    128: "8x16",
    256: "16x16",
}
TOPOLOGY_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8"}
THREE_D = ("v5p", "tpu7x")


@dataclasses.dataclass(frozen=True)
class Workload:
    """A transformer to train or serve: size, shapes and the step time you want."""

    params_billion: float = 1.0
    layers: int = 24
    d_model: int = 2048
    batch: int = 32  # global batch, sequences
    seq_len: int = 2048
    mode: str = "train"
    step_time_s: float = 1.0  # target seconds per step
    mfu: float = 0.4  # model FLOP utilization you expect to reach

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("params_billion", "step_time_s", "mfu"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.mfu > 1:
            raise ValueError(f"mfu is a fraction of peak (0..1], got {self.mfu}")
        for name in ("layers", "d_model", "batch", "seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def params(self) -> float:
        return self.params_billion * 1e9

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


def state_breakdown(workload: Workload) -> dict[str, float]:
    """Bytes of per-parameter state by component (training state, or inference weights)."""
    return {name: per * workload.params for name, per in BYTES_PER_PARAM[workload.mode].items()}


def memory_breakdown(workload: Workload) -> dict[str, float]:
    """Bytes by component: per-parameter state, then activations.

    Activations assume per-layer rematerialization: a step keeps each layer's input
    (batch x seq x d_model, bfloat16) and recomputes the rest; inference keeps one layer's.
    """
    rows = state_breakdown(workload)
    kept_layers = workload.layers if workload.mode == "train" else 1
    rows["activations (layer inputs, bf16)"] = (
        workload.tokens * workload.d_model * kept_layers * ACTIVATION_BYTES
    )
    return rows


def memory_need_bytes(workload: Workload) -> float:
    return sum(memory_breakdown(workload).values())


def step_flops(workload: Workload) -> float:
    """6 N per token for a training step (forward 2N + backward 4N), 2 N for inference."""
    return (6 if workload.mode == "train" else 2) * workload.params * workload.tokens


def flops_need(workload: Workload) -> float:
    """Peak FLOP/s the slice must offer: step FLOPs / step time / MFU."""
    return step_flops(workload) / workload.step_time_s / workload.mfu


@dataclasses.dataclass(frozen=True)
class SliceOption:
    """One generation's answer: the chips each need asks for and the slice that covers both."""

    generation: str
    chips_for_memory: int
    chips_for_compute: int
    accelerator_type: str | None  # None: no slice gcloud sells is large enough
    chips: int
    topology: str
    hosts: int
    hbm_per_chip_used: float  # fraction of each chip's HBM the workload fills
    step_time_at_mfu_s: float  # step FLOPs / (slice peak x MFU)
    reasoning: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return self.accelerator_type is not None


def _slices(generation: str) -> list[cloud_tpu.AcceleratorType]:
    return sorted(
        (t for t in cloud_tpu.ACCELERATOR_TYPES.values() if t.generation == generation),
        key=lambda t: t.chips,
    )


def topology(generation: str, chips: int) -> str:
    table = TOPOLOGY_3D if generation in THREE_D else TOPOLOGY_2D
    if chips not in table:
        raise ValueError(f"no {generation} topology with {chips} chips; known: {sorted(table)}")
    return table[chips]


def plan_generation(workload: Workload, generation: str) -> SliceOption:
    chip = specs.chip(generation)
    memory = memory_need_bytes(workload)
    usable = chip.hbm_bytes.value * HBM_USABLE
    for_memory = max(1, math.ceil(memory / usable))
    for_compute = max(1, math.ceil(flops_need(workload) / chip.bf16_flops.value))
    need = max(for_memory, for_compute)
    choice = next((t for t in _slices(generation) if t.chips >= need), None)
    reasoning = [
        f"memory: {memory / 1e9:.1f} GB / ({chip.hbm_bytes.value / 1e9:.0f} GB x {HBM_USABLE:.0%} "
        f"usable per chip) -> {for_memory} chip(s)",
        f"compute: {flops_need(workload) / 1e12:.0f} TFLOP/s needed / "
        f"{chip.bf16_flops.value / 1e12:.0f} TFLOP/s bf16 per chip -> {for_compute} chip(s)",
    ]
    if choice is None:
        largest = _slices(generation)[-1]
        reasoning.append(
            f"needs {need} chips: more than the largest {generation} slice offered here "
            f"({largest.name}, {largest.chips} chips)"
        )
        return SliceOption(
            generation,
            for_memory,
            for_compute,
            None,
            need,
            "-",
            0,
            memory / (need * chip.hbm_bytes.value),
            math.nan,
            tuple(reasoning),
        )
    reasoning.append(
        f"smallest {generation} slice with >= {need} chips: {choice.name} "
        f"({choice.chips} chips, {choice.hosts} host{'s' if choice.hosts > 1 else ''})"
    )
    step_time = step_flops(workload) / (choice.chips * chip.bf16_flops.value * workload.mfu)
    return SliceOption(
        generation,
        for_memory,
        for_compute,
        choice.name,
        choice.chips,
        topology(generation, choice.chips),
        choice.hosts,
        memory / (choice.chips * chip.hbm_bytes.value),
        step_time,
        tuple(reasoning),
    )


def plan(workload: Workload, generations=specs.GENERATIONS) -> list[SliceOption]:
    """One option per generation (v5e, v5p, v6e, tpu7x)."""
    return [plan_generation(workload, g) for g in generations]


def recommend(options: list[SliceOption]) -> SliceOption | None:
    """The fitting option with the fewest hosts, then fewest chips (simplest to run).

    Only generations the Cloud TPU API creates (the course's launcher) are recommended: TPU7x
    is planned and shown, but is created through GKE or Compute Engine (cloud_tpu.PROVISIONING).
    """
    fitting = [
        o for o in options if o.fits and cloud_tpu.provisioning_problem(o.generation) is None
    ]
    return min(fitting, key=lambda o: (o.hosts, o.chips, o.generation)) if fitting else None


def create_command(option: SliceOption, name: str = "jax-tpu-lab", spot: bool = False) -> str:
    """The gcloud line that creates ``option``'s slice, in the first zone offering it."""
    if not option.fits:
        raise ValueError(f"no {option.generation} slice fits this workload")
    if problem := cloud_tpu.provisioning_problem(option.generation):
        raise ValueError(problem)
    vm = cloud_tpu.TpuVm(
        name=name,
        accelerator_type=option.accelerator_type,
        zone=cloud_tpu.ZONES[option.generation][0],
        spot=spot,
    )
    return cloud_tpu.shell_join(cloud_tpu.create_command(vm))


def option_rows(options: list[SliceOption]) -> list[dict]:
    return [
        {
            "generation": o.generation,
            "chips for memory": o.chips_for_memory,
            "chips for compute": o.chips_for_compute,
            "slice": o.accelerator_type or "none fits",
            "topology": o.topology,
            "hosts": o.hosts,
            "HBM used": f"{o.hbm_per_chip_used:.0%}",
            "step time at MFU": f"{o.step_time_at_mfu_s:.3g} s" if o.fits else "-",
            "created with": (
                "Cloud TPU API"
                if cloud_tpu.PROVISIONING[o.generation].tpu_vm_api
                else "GKE or Compute Engine"
            ),
        }
        for o in options
    ]


# --- checks against independent evidence ----------------------------------------------------

# The TPU compiler (libtpu, the `tpu` extra) compiles for a slice's topology on a CPU host:
# its memory_analysis() is the bytes one chip holds. A state of N parameters is compiled as
# one (rows, STATE_WIDTH) array per state component, sharded by rows over the slice's chips.
STATE_WIDTH = 1024  # lanes: a multiple of 128, so the TPU layout pads no columns
ROW_TILE = 8  # the TPU pads each shard's rows to a multiple of 8 (seen: 3907 -> 3912 rows)
COMPILER_TOLERANCE = 1e-3  # relative; covers Adam's step counter and the layout's own bytes


def compile_topology(option: SliceOption) -> tuple[str, int]:
    """(libtpu topology name, devices to use) for compiling ``option``'s slice.

    libtpu refuses a 1x1 topology (smaller than one host's chip layout), so a one-chip slice
    compiles for one device of the smallest topology of its generation.
    """
    if not option.fits:
        raise ValueError(f"no {option.generation} slice fits: nothing to compile for")
    if option.chips == 1:
        smallest = TOPOLOGY_3D[4] if option.generation in THREE_D else "2x2"
        return f"{option.generation}:{smallest}", 1
    return f"{option.generation}:{option.topology}", option.chips


def compiled_param_count(workload: Workload, chips: int) -> int:
    """The parameter count actually compiled: N rounded up to whole, unpadded shards."""
    row_block = ROW_TILE * chips
    rows = math.ceil(workload.params / STATE_WIDTH / row_block) * row_block
    return rows * STATE_WIDTH


@dataclasses.dataclass(frozen=True)
class CompilerCheck:
    """The planner's per-chip state bytes beside the TPU compiler's, for one slice."""

    topology: str
    chips: int
    params: int  # compiled parameter count (N rounded up to whole shards)
    planner_state_bytes_per_chip: float
    compiler_argument_bytes_per_chip: int  # memory_analysis().argument_size_in_bytes
    compiler_peak_bytes_per_chip: int
    compiler_hbm_bytes_per_chip: float  # the most the TPU compiler lets one program use
    planner_usable_hbm_bytes_per_chip: float

    @property
    def relative_error(self) -> float:
        planner = self.planner_state_bytes_per_chip
        return abs(self.compiler_argument_bytes_per_chip - planner) / planner

    @property
    def fits_compiler_hbm(self) -> bool:
        return self.compiler_peak_bytes_per_chip <= self.compiler_hbm_bytes_per_chip

    @property
    def usable_within_compiler_hbm(self) -> bool:
        return self.planner_usable_hbm_bytes_per_chip <= self.compiler_hbm_bytes_per_chip

    @property
    def passed(self) -> bool:
        return (
            self.relative_error <= COMPILER_TOLERANCE
            and self.fits_compiler_hbm
            and self.usable_within_compiler_hbm
        )

    def rows(self) -> list[dict]:
        figures = [
            ("state: planner's closed form (GB)", self.planner_state_bytes_per_chip),
            ("state: TPU compiler's arguments (GB)", self.compiler_argument_bytes_per_chip),
            ("TPU compiler's peak (GB)", self.compiler_peak_bytes_per_chip),
            ("HBM the TPU compiler allows (GB)", self.compiler_hbm_bytes_per_chip),
            ("HBM the planner counts on (GB)", self.planner_usable_hbm_bytes_per_chip),
        ]
        rows = [{"per chip": name, "value": f"{b / 1e9:.4g}"} for name, b in figures]
        rows.insert(2, {"per chip": "relative difference", "value": f"{self.relative_error:.2e}"})
        return rows


def compiler_check_problem() -> str | None:
    """Why the TPU compiler check cannot run here (libtpu missing), or None."""
    from core.tpu import topology_compile

    return topology_compile.libtpu_problem()


def state_program(mode: str, rows: int):
    """(function, argument shapes) of the program that holds ``mode``'s per-parameter state.

    train: one Adam update, ``(params, grads, adam_state) -> (params, adam_state)``: float32
    parameters, gradients as jax.grad makes them, Adam's state as optax.adam makes it; the
    parameters and optimizer state are donated, as a training loop does. inference: the
    bfloat16 weights applied to a fixed input.
    """
    import jax
    import jax.numpy as jnp
    import optax

    if mode == "train":
        params = jax.ShapeDtypeStruct((rows, STATE_WIDTH), jnp.float32)
        grads = jax.eval_shape(jax.grad(lambda p: jnp.sum(p * p)), params)
        tx = optax.adam(1e-3)
        opt_state = jax.eval_shape(tx.init, params)

        def update(params, grads, opt_state):
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        return update, (params, grads, opt_state)
    weights = jax.ShapeDtypeStruct((rows, STATE_WIDTH), jnp.bfloat16)
    return (lambda w: jnp.ones((ROW_TILE, STATE_WIDTH), jnp.bfloat16) @ w.T), (weights,)


def compiler_check(workload: Workload, option: SliceOption) -> CompilerCheck:
    """Compile ``workload``'s state for ``option``'s topology with the TPU compiler, and set
    its per-chip bytes beside the planner's closed form (raises ValueError without libtpu)."""
    import jax
    import numpy as np

    from core.tpu import topology_compile

    if (problem := compiler_check_problem()) is not None:
        raise ValueError(problem)
    topology_name, chips = compile_topology(option)
    devices = topology_compile.topology_devices(topology_name)[:chips]
    mesh = jax.sharding.Mesh(np.array(devices), ("chips",))
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("chips"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    params = compiled_param_count(workload, chips)
    fn, shapes = state_program(workload.mode, params // STATE_WIDTH)
    shardings = jax.tree.map(lambda leaf: split if leaf.ndim else whole, shapes)
    outputs = jax.eval_shape(fn, *shapes)
    out_shardings = jax.tree.map(lambda leaf: split if leaf.ndim else whole, outputs)
    donate = (0, 2) if workload.mode == "train" else ()
    compiled = (
        jax.jit(fn, in_shardings=shardings, out_shardings=out_shardings, donate_argnums=donate)
        .lower(*shapes)
        .compile()
    )
    memory = topology_compile.memory_dict(compiled)
    compiled_workload = dataclasses.replace(workload, params_billion=params / 1e9)
    chip = specs.chip(option.generation)
    return CompilerCheck(
        topology=topology_name,
        chips=chips,
        params=params,
        planner_state_bytes_per_chip=sum(state_breakdown(compiled_workload).values()) / chips,
        compiler_argument_bytes_per_chip=memory["argument_size_in_bytes"],
        compiler_peak_bytes_per_chip=topology_compile.peak_bytes(memory),
        compiler_hbm_bytes_per_chip=topology_compile.usable_hbm_bytes(topology_name),
        planner_usable_hbm_bytes_per_chip=chip.hbm_bytes.value * HBM_USABLE,
    )


# Hand-worked examples from papers: what the planner's formulas must reproduce.
@dataclasses.dataclass(frozen=True)
class PublishedExample:
    source: str
    claim: str
    published: float
    tolerance: float  # relative: the paper rounds its figure

    def planner_value(self) -> float:
        return _PLANNER_VALUES[self.claim]()


PUBLISHED_EXAMPLES = (
    # Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    # Models", Figure 1: a 7.5B model with mixed-precision Adam keeps 16 bytes/parameter:
    # 120 GB on one device, 1.9 GB per device with everything partitioned over 64 (stage 3).
    PublishedExample("ZeRO (2020), Fig. 1", "7.5B training state, one device (GB)", 120.0, 0.005),
    PublishedExample("ZeRO (2020), Fig. 1", "7.5B training state over 64 devices (GB)", 1.9, 0.02),
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table D.1: GPT-3 175B
    # trained on 300B tokens took 3.14e23 FLOPs (6 N per token; their N is 174.6B).
    PublishedExample("GPT-3 (2020), Table D.1", "GPT-3 175B on 300B tokens (FLOP)", 3.14e23, 0.005),
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
    # Models", Sec. 4: with full recomputation a layer keeps only its input, 2*s*b*h bytes
    # (16-bit). GPT-3 175B (h 12288, 96 layers), s 2048, b 1: 2*2048*12288*96 bytes.
    PublishedExample(
        "Korthikanti et al. (2022), Sec. 4",
        "GPT-3 175B full-recompute activations, b=1 (GB)",
        2 * 2048 * 12288 * 96 / 1e9,
        1e-9,
    ),
)


def _zero_state_gb(devices: int) -> float:
    w = Workload(params_billion=7.5, batch=1, seq_len=1, layers=1, d_model=1)
    return sum(state_breakdown(w).values()) / devices / 1e9


def _gpt3_flops() -> float:
    batch, seq = 1536, 2048  # GPT-3's 3.2M-token batch
    w = Workload(params_billion=174.6, layers=96, d_model=12288, batch=batch, seq_len=seq)
    return step_flops(w) * 300e9 / (batch * seq)


def _gpt3_activations_gb() -> float:
    w = Workload(params_billion=174.6, layers=96, d_model=12288, batch=1, seq_len=2048)
    return memory_breakdown(w)["activations (layer inputs, bf16)"] / 1e9


_PLANNER_VALUES = {
    "7.5B training state, one device (GB)": lambda: _zero_state_gb(1),
    "7.5B training state over 64 devices (GB)": lambda: _zero_state_gb(64),
    "GPT-3 175B on 300B tokens (FLOP)": _gpt3_flops,
    "GPT-3 175B full-recompute activations, b=1 (GB)": _gpt3_activations_gb,
}


def published_example_rows() -> list[dict]:
    """Each published figure beside the planner's, with the relative error and a verdict."""
    rows = []
    for example in PUBLISHED_EXAMPLES:
        planner = example.planner_value()
        error = abs(planner - example.published) / example.published
        rows.append(
            {
                "source": example.source,
                "claim": example.claim,
                "published": f"{example.published:.4g}",
                "planner": f"{planner:.4g}",
                "relative error": error,
                "tolerance": example.tolerance,
                "holds": error <= example.tolerance,
            }
        )
    return rows
