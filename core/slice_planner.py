"""Pick a Cloud TPU slice from a model's size, batch and sequence length.

Two needs decide the slice. **Memory**: every byte of training state (or inference weights)
plus the activations a step keeps must fit in the slice's HBM, sharded across its chips
(FSDP/ZeRO-style: nothing replicated). **Throughput**: the step's FLOPs (6 N per trained
token, 2 N per inferred token, N = parameters) divided by the target step time and a model
FLOP utilization (MFU) give the peak FLOP/s the slice must offer. The chip count is the
larger of the two, rounded up to a slice gcloud sells (core/cloud_tpu.ACCELERATOR_TYPES);
per-chip figures come from core/tpu/specs.py.

Units: bytes, FLOP, FLOP/s, seconds. "GB" is 1e9 bytes.
"""

from __future__ import annotations

import dataclasses
import math

from core import cloud_tpu
from core.tpu import specs

# Bytes kept per parameter. Training: bf16 weights for the forward pass are cast on the fly
# from float32 master weights (4), float32 gradients (4) and Adam's two float32 moments (8).
BYTES_PER_PARAM = {
    "train": {"float32 master weights": 4, "float32 gradients": 4, "Adam moments (2 x float32)": 8},
    "inference": {"bfloat16 weights": 2},
}
ACTIVATION_BYTES = 2  # bfloat16 activations
HBM_USABLE = 0.9  # the runtime, XLA scratch and fragmentation take the rest
MODES = tuple(BYTES_PER_PARAM)

# Slice topologies (chip grid) by chip count: 2D torus for v5e/v6e, 3D for v5p.
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


def memory_breakdown(workload: Workload) -> dict[str, float]:
    """Bytes by component: per-parameter state, then activations.

    Activations assume per-layer rematerialization: a step keeps each layer's input
    (batch x seq x d_model, bfloat16) and recomputes the rest; inference keeps one layer's.
    """
    rows = {name: per * workload.params for name, per in BYTES_PER_PARAM[workload.mode].items()}
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
    table = TOPOLOGY_3D if generation == "v5p" else TOPOLOGY_2D
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
    """One option per generation (v5e, v5p, v6e)."""
    return [plan_generation(workload, g) for g in generations]


def recommend(options: list[SliceOption]) -> SliceOption | None:
    """The fitting option with the fewest hosts, then fewest chips (simplest to run)."""
    fitting = [o for o in options if o.fits]
    return min(fitting, key=lambda o: (o.hosts, o.chips, o.generation)) if fitting else None


def create_command(option: SliceOption, name: str = "jax-tpu-lab", spot: bool = False) -> str:
    """The gcloud line that creates ``option``'s slice, in the first zone offering it."""
    if not option.fits:
        raise ValueError(f"no {option.generation} slice fits this workload")
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
        }
        for o in options
    ]
