"""HBM budgets before you provision: training and serving memory per chip and per slice.

A decoder-only transformer is described by :class:`TransformerShape`; its parameter count
is a closed form (tested against the published counts of GPT-2 small and Llama-2-7B).

Training keeps, per chip: parameters, gradients, optimizer moments (and, with bf16
parameters, an f32 master copy), and the activations saved for the backward pass. The
activation model counts the tensors a straightforward implementation saves per layer:

    no remat:  B*T*(4*D + 2*Hq*hd + 2*Hkv*hd + mlp_saved*F) + B*Hq*T*T   elements per layer
    full remat (jax.checkpoint per layer): B*T*D per layer (the layer inputs) plus one
               layer's no-remat activations while that layer is recomputed

plus the logits (B*T*V, float32) that the loss needs. It is an estimate: a compiler fuses
elementwise work, may keep fewer or more tensors, and needs temporary workspace. The lesson
shows it beside the TPU compiler's own memory_analysis().

Serving keeps the weights and a KV cache of 2 * L * B * context * Hkv * hd elements.

Sharding over ``chips``: "data" parallel replicates weights, gradients and optimizer state
on every chip and splits the batch; "fsdp" (ZeRO-3 style) also splits weights, gradients and
optimizer state across chips. Serving splits weights and KV heads over chips (tensor
parallel), which needs kv_heads divisible by the chip count.

Dimension glossary: B batch, T sequence (context), D d_model, F d_ff, V vocab, L layers,
Hq query heads, Hkv key/value heads, hd head dim.
"""

from __future__ import annotations

import dataclasses

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "float8": 1, "int32": 4}
OPTIMIZER_MOMENTS = {"sgd": 0, "momentum": 1, "adam": 2}
MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("rms", "layer")
STRATEGIES = ("data", "fsdp")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (float32 4, bfloat16 2, int8 1, ...)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {tuple(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


@dataclasses.dataclass(frozen=True)
class TransformerShape:
    """A decoder-only transformer: the sizes that decide its memory."""

    vocab: int
    d_model: int
    layers: int
    heads: int
    d_ff: int
    kv_heads: int | None = None  # None: as many as query heads (multi-head attention)
    head_dim: int | None = None  # None: d_model // heads
    mlp: str = "gelu"  # "gelu": two matrices; "swiglu": three (gate, up, down)
    norm: str = "rms"  # "rms": a scale per norm; "layer": scale and bias
    bias: bool = False  # biases on the attention and MLP matrices (GPT-2 has them)
    tied_embeddings: bool = False  # the output projection reuses the embedding matrix
    learned_positions: int = 0  # rows of a learned position table (GPT-2: 1024), 0 for RoPE

    def __post_init__(self):
        for name in ("vocab", "d_model", "layers", "heads", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.head_dim is None and self.d_model % self.heads:
            raise ValueError(
                f"d_model {self.d_model} is not divisible by heads {self.heads}: "
                "pick a head count that divides it or set head_dim"
            )
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads}")
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"mlp must be one of {MLP_KINDS}, got {self.mlp!r}")
        if self.norm not in NORM_KINDS:
            raise ValueError(f"norm must be one of {NORM_KINDS}, got {self.norm!r}")

    @property
    def hd(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.heads

    @property
    def hkv(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    def param_counts(self) -> dict[str, int]:
        """Parameters by part: embeddings, attention, mlp, norms (all layers together)."""
        d, f, L = self.d_model, self.d_ff, self.layers
        q_width, kv_width = self.heads * self.hd, self.hkv * self.hd
        norm_size = d * (2 if self.norm == "layer" else 1)
        attention = d * (q_width + 2 * kv_width) + q_width * d
        mlp = self.mlp_matrices * d * f
        if self.bias:
            attention += q_width + 2 * kv_width + d
            mlp += (f * (self.mlp_matrices - 1)) + d
        embeddings = (
            self.vocab * d * (1 if self.tied_embeddings else 2) + self.learned_positions * d
        )
        return {
            "embeddings": embeddings,
            "attention": L * attention,
            "mlp": L * mlp,
            "norms": (2 * L + 1) * norm_size,
        }

    def param_count(self) -> int:
        return sum(self.param_counts().values())


PRESETS: dict[str, TransformerShape] = {
    # 124,439,808 parameters (Radford et al. 2019, the HF checkpoint "gpt2")
    "gpt2-small": TransformerShape(
        vocab=50257,
        d_model=768,
        layers=12,
        heads=12,
        d_ff=3072,
        norm="layer",
        bias=True,
        tied_embeddings=True,
        learned_positions=1024,
    ),
    # 6,738,415,616 parameters (Touvron et al. 2023, "Llama-2-7b")
    "llama2-7b": TransformerShape(
        vocab=32000,
        d_model=4096,
        layers=32,
        heads=32,
        d_ff=11008,
        mlp="swiglu",
    ),
    # Llama-2-13B: 13,015,864,320 parameters
    "llama2-13b": TransformerShape(
        vocab=32000,
        d_model=5120,
        layers=40,
        heads=40,
        d_ff=13824,
        mlp="swiglu",
    ),
    # A small model the lessons compile for real TPU topologies on a CPU host.
    "tiny": TransformerShape(vocab=512, d_model=256, layers=2, heads=4, d_ff=1024),
}


@dataclasses.dataclass(frozen=True)
class TrainingSetup:
    """How a model is trained: batch, sequence, dtypes, optimizer, remat, chips, sharding."""

    batch: int  # global batch (sequences per step, all chips together)
    seq: int
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"  # dtype of the saved activations
    grad_dtype: str | None = None  # None: same as param_dtype
    optimizer: str = "adam"
    moment_dtype: str = "float32"
    master_copy: bool = False  # an f32 copy of bf16 parameters (mixed-precision training)
    remat: bool = False  # jax.checkpoint around each layer
    chips: int = 1
    strategy: str = "data"

    def __post_init__(self):
        for name in ("batch", "seq", "chips"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("param_dtype", "compute_dtype", "moment_dtype"):
            dtype_bytes(getattr(self, name))
        if self.grad_dtype is not None:
            dtype_bytes(self.grad_dtype)
        if self.optimizer not in OPTIMIZER_MOMENTS:
            raise ValueError(
                f"optimizer must be one of {tuple(OPTIMIZER_MOMENTS)}, got {self.optimizer!r}"
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.batch % self.chips:
            raise ValueError(
                f"global batch {self.batch} does not split over {self.chips} chips: "
                "make the batch a multiple of the chip count"
            )


def layer_activation_elements(shape: TransformerShape, batch: int, seq: int) -> int:
    """Elements one layer saves for its backward pass without remat (see module docstring)."""
    tokens = batch * seq
    q_width, kv_width = shape.heads * shape.hd, shape.hkv * shape.hd
    mlp_saved = 3 if shape.mlp == "swiglu" else 2  # pre-activation(s) and activation output
    per_token = 4 * shape.d_model + 2 * q_width + 2 * kv_width + mlp_saved * shape.d_ff
    return tokens * per_token + batch * shape.heads * seq * seq


def training_budget(shape: TransformerShape, setup: TrainingSetup) -> dict[str, float]:
    """Bytes per chip by component: params, master copy, gradients, optimizer, activations,
    logits."""
    params = shape.param_count()
    state_split = setup.chips if setup.strategy == "fsdp" else 1
    local_batch = setup.batch // setup.chips
    grad_dtype = setup.grad_dtype or setup.param_dtype
    act_bytes = dtype_bytes(setup.compute_dtype)
    per_layer = layer_activation_elements(shape, local_batch, setup.seq)
    if setup.remat:
        activation_elements = shape.layers * local_batch * setup.seq * shape.d_model + per_layer
    else:
        activation_elements = shape.layers * per_layer
    master = params * 4 if setup.master_copy and setup.param_dtype != "float32" else 0
    return {
        "parameters": params * dtype_bytes(setup.param_dtype) / state_split,
        "master copy": master / state_split,
        "gradients": params * dtype_bytes(grad_dtype) / state_split,
        "optimizer moments": params
        * OPTIMIZER_MOMENTS[setup.optimizer]
        * dtype_bytes(setup.moment_dtype)
        / state_split,
        "activations": activation_elements * act_bytes,
        "logits (f32)": local_batch * setup.seq * shape.vocab * 4,
    }


@dataclasses.dataclass(frozen=True)
class ServingSetup:
    """How a model is served: batch of sequences, context length, dtypes, chips."""

    batch: int
    context: int
    weight_dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    chips: int = 1

    def __post_init__(self):
        for name in ("batch", "context", "chips"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        dtype_bytes(self.weight_dtype)
        dtype_bytes(self.kv_dtype)


def kv_cache_bytes(shape: TransformerShape, batch: int, context: int, kv_dtype: str) -> int:
    """Keys and values of every layer: 2 * L * B * T * Hkv * hd elements."""
    return 2 * shape.layers * batch * context * shape.hkv * shape.hd * dtype_bytes(kv_dtype)


def serving_problem(shape: TransformerShape, setup: ServingSetup) -> str | None:
    """Why the KV heads cannot be split over the chips, or None."""
    if shape.hkv % setup.chips:
        return (
            f"{shape.hkv} KV heads do not split over {setup.chips} chips: tensor parallelism "
            "over heads needs the chip count to divide the KV heads"
        )
    return None


def serving_budget(shape: TransformerShape, setup: ServingSetup) -> dict[str, float]:
    """Bytes per chip: weights and KV cache, both split over the chips (tensor parallel)."""
    if (problem := serving_problem(shape, setup)) is not None:
        raise ValueError(problem)
    return {
        "weights": shape.param_count() * dtype_bytes(setup.weight_dtype) / setup.chips,
        "KV cache": kv_cache_bytes(shape, setup.batch, setup.context, setup.kv_dtype) / setup.chips,
    }


def per_slice(budget: dict[str, float], chips: int) -> dict[str, float]:
    """The whole slice's bytes: every chip holds its share (replicas counted on each chip)."""
    return {name: value * chips for name, value in budget.items()}


def fits(budget: dict[str, float], capacity_bytes: float) -> bool:
    return sum(budget.values()) <= capacity_bytes


def max_batch_that_fits(shape: TransformerShape, setup: ServingSetup, capacity_bytes: float) -> int:
    """The largest serving batch whose weights + KV cache fit in ``capacity_bytes`` per chip."""
    fixed = serving_budget(shape, dataclasses.replace(setup, batch=1))
    per_sequence = fixed["KV cache"]
    room = capacity_bytes - fixed["weights"]
    return max(0, int(room // per_sequence)) if per_sequence else 0


def budget_rows(budget: dict[str, float], capacity_bytes: float, label: str) -> list[dict]:
    """Rows for a stacked bar chart: one per component, plus the capacity for the rule."""
    return [
        {"setup": label, "component": name, "GB": value / 1e9, "capacity GB": capacity_bytes / 1e9}
        for name, value in budget.items()
    ]
