"""The capstone's one configuration: a frozen, validated dataclass with ``key=value`` overrides.

    config = Config.from_overrides(["steps=50", "d_model=64"])  # ValueError on a bad key/value
    config.model_config()  # core.lm.transformer.TransformerConfig

The fields fall in two groups. IDENTITY fields define the model, the data and the
optimizer: a run directory's checkpoints only make sense under the same values, so resuming
with a different one is refused. The other fields (how long, how often, how to log) may
change between a run and its resumption.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import pathlib
import typing
from collections.abc import Sequence
from typing import Any

from core.lm import transformer

COMPUTE_DTYPES = ("float32", "bfloat16")
# The training step's attention core: "blocked" (core.lm.causal_blocked, XLA, the default),
# "dense" (core.lm.attention, the whole T x T), "flash" (core.kernels.flash_attention, the
# Pallas kernel with segment ids: interpret mode off a TPU, so slow on a CPU).
ATTENTION_CORES = ("blocked", "dense", "flash")
FLASH_LAYOUTS = ("BHTD", "BTHD")  # core.kernels.flash_attention.LAYOUTS
CACHE_PRECISIONS = ("fp32", "bf16", "int8")
# The learning rate over the steps (optax schedules, training.learning_rate_schedule):
# "constant" (after warmup_steps of linear warmup from 0), "cosine" (linear warmup, then a
# cosine decay to final_lr_fraction x learning_rate at schedule_steps, held after that).
LR_SCHEDULES = ("constant", "cosine")
_TYPE_NAMES = {int: "an int", float: "a float", bool: "true or false", str: "a string"}
MAX_SEED = 2**32 - 1  # seeds are uint32 (numpy's default_rng refuses negative ones)

# Fields that may differ between a run and its resumption (everything else is identity).
RUNTIME_FIELDS = frozenset(
    {"steps", "ckpt_every", "max_to_keep", "async_ckpt", "eval_every", "eval_batches", "log_every"}
)


@dataclasses.dataclass(frozen=True)
class Config:
    """Model, data, optimizer and run settings of the byte Transformer.

    Shapes: d_model D, num_layers L, num_heads H (head dim K = D / H), mlp_width F
    (0: 4 * D), seq_len T (training row length, bytes), batch_size B (rows per step),
    max_len (position table: the longest prompt + generation).
    """

    # model
    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 4
    mlp_width: int = 0
    max_len: int = 1024
    dropout: float = 0.1
    compute_dtype: str = "float32"
    attention: str = "blocked"  # ATTENTION_CORES
    attention_block_q: int = 512  # the flash kernel's blocks along T (capped at seq_len)
    attention_block_k: int = 512
    # the flash kernel's q, k, v layout: "BHTD" (the model transposes its (B, T, H, K)
    # projections; XLA lays them out head-major, so the transpose is nearly free) or "BTHD"
    # (read in place, each head a 128-lane block: heads of 128 or a single head). On a v5e
    # chip the preset's step was slower with BTHD (see PRESETS below).
    flash_layout: str = "BHTD"
    # data: Python's own standard library, split by file
    seq_len: int = 256
    batch_size: int = 16
    max_files: int = 0  # 0: every top-level stdlib .py file
    max_bytes: int = 65536  # per file
    heldout_fraction: float = 0.1
    data_seed: int = 0
    min_piece: int = 16  # a row's tail shorter than this is padding, not a 1-byte document
    # optimizer: AdamW with global-norm clipping
    learning_rate: float = 3e-3  # the peak, reached after warmup_steps
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    adam_b2: float = 0.999  # the second moment's decay (0.95 forgets a gradient spike sooner)
    lr_schedule: str = "constant"  # LR_SCHEDULES
    warmup_steps: int = 0
    # "cosine": the step where the decay ends (0: the run's `steps` when it first starts;
    # training.run_config writes that number into the run's config, so a resumed run that
    # asks for more steps keeps the same curve)
    schedule_steps: int = 0
    final_lr_fraction: float = 0.1
    seed: int = 0
    # run
    steps: int = 200
    ckpt_every: int = 50
    max_to_keep: int = 3
    async_ckpt: bool = True
    eval_every: int = 50
    eval_batches: int = 4
    log_every: int = 10

    def __post_init__(self):
        self._check_types()
        positive = (
            "d_model num_layers num_heads max_len seq_len batch_size steps "
            "attention_block_q attention_block_k "
            "ckpt_every max_to_keep eval_every eval_batches log_every min_piece"
        ).split()
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.num_heads:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0][:8]
            raise ValueError(
                f"num_heads={self.num_heads} must divide d_model={self.d_model} "
                f"(each head gets d_model / num_heads channels); try one of {divisors}"
            )
        if self.mlp_width < 0:
            raise ValueError(f"mlp_width must be >= 0 (0 means 4 * d_model), got {self.mlp_width}")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2 (a byte and its next byte), got {self.seq_len}")
        if self.seq_len > self.max_len:
            raise ValueError(
                f"seq_len={self.seq_len} exceeds max_len={self.max_len}, the position table"
            )
        if self.max_files == 1 or self.max_files < 0:
            raise ValueError(
                f"max_files must be 0 (all) or >= 2 (one to train on, one held out), "
                f"got {self.max_files}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(
                f"compute_dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}"
            )
        if self.attention not in ATTENTION_CORES:
            raise ValueError(f"attention must be one of {ATTENTION_CORES}, got {self.attention!r}")
        if self.flash_layout not in FLASH_LAYOUTS:
            raise ValueError(
                f"flash_layout must be one of {FLASH_LAYOUTS}, got {self.flash_layout!r}"
            )
        head_dim = self.d_model // self.num_heads
        if self.flash_layout == "BTHD" and head_dim % 128 and self.num_heads > 1:
            raise ValueError(
                f"flash_layout='BTHD' reads each head as 128-lane blocks: heads of "
                f"{head_dim} (d_model / num_heads) need 'BHTD', or heads a multiple of 128"
            )
        if self.attention == "flash":
            for name in ("attention_block_q", "attention_block_k"):
                if self.seq_len % self.flash_blocks[name == "attention_block_k"]:
                    raise ValueError(
                        f"{name}={getattr(self, name)} (capped at seq_len) must divide "
                        f"seq_len={self.seq_len} for the flash kernel"
                    )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        for name in ("warmup_steps", "schedule_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.lr_schedule == "cosine" and 0 < self.schedule_steps <= self.warmup_steps:
            raise ValueError(
                f"schedule_steps={self.schedule_steps} must exceed warmup_steps="
                f"{self.warmup_steps} (the cosine decays between them)"
            )
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            raise ValueError(f"final_lr_fraction must be in [0, 1], got {self.final_lr_fraction}")
        if not 0.0 < self.adam_b2 < 1.0:
            raise ValueError(f"adam_b2 must be in (0, 1), got {self.adam_b2}")
        if self.weight_decay < 0 or not self.clip_norm > 0:
            raise ValueError(
                f"need weight_decay >= 0 and clip_norm > 0, got {self.weight_decay}, "
                f"{self.clip_norm}"
            )
        if self.min_piece >= self.seq_len:
            raise ValueError(f"min_piece={self.min_piece} must be < seq_len={self.seq_len}")
        # bounds that core.lm.corpus / numpy / optax would otherwise enforce only later, after
        # a training start had already written its run directory
        if self.max_bytes < 2:
            raise ValueError(
                f"max_bytes must be >= 2 (a file needs a byte and its next byte to train "
                f"on), got {self.max_bytes}"
            )
        for name in ("seed", "data_seed"):
            if not 0 <= getattr(self, name) <= MAX_SEED:
                raise ValueError(f"{name} must be in [0, {MAX_SEED}], got {getattr(self, name)}")
        finite = "dropout heldout_fraction learning_rate weight_decay clip_norm adam_b2"
        for name in finite.split() + ["final_lr_fraction"]:
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")

    def _check_types(self):
        """Each field has its annotated type (a config.json edited by hand, or a Config built
        in code, would otherwise fail deep inside training); an int for a float field is
        stored as a float."""
        for name, kind in field_types().items():
            value = getattr(self, name)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
                continue
            if kind in (int, float) and isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"{name} must be {_TYPE_NAMES[kind]}, got {value!r}")

    # -- derived --

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def hidden(self) -> int:
        return self.mlp_width or 4 * self.d_model

    @property
    def flash_blocks(self) -> tuple[int, int]:
        """(block_q, block_k) the flash kernel uses: the configured blocks capped at T."""
        return (
            min(self.attention_block_q, self.seq_len),
            min(self.attention_block_k, self.seq_len),
        )

    def model_config(self, cache: str | None = None) -> transformer.TransformerConfig:
        """The core.lm.transformer config of this model (params float32, compute_dtype
        activations, float32 accumulators; ``cache``: a KV cache dtype override)."""
        return transformer.TransformerConfig(
            width=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            mlp_width=self.hidden,
            max_len=self.max_len,
            precision=transformer.Precision(compute=self.compute_dtype, cache=cache),
            dropout_rate=self.dropout,
        )

    def program_key(self) -> Config:
        """This config with the run-time fields at their defaults: two configs with the
        same key compile to the same programs (a resumed or longer run reuses them)."""
        defaults = Config()
        return dataclasses.replace(self, **{f: getattr(defaults, f) for f in RUNTIME_FIELDS})

    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    # -- (de)serialisation --

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        unknown = sorted(set(values) - set(field_types()))
        if unknown:
            raise ValueError(f"unknown config keys {unknown}")
        return cls(**values)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> Config:
        return cls.from_dict(json.loads(pathlib.Path(path).read_text()))

    @classmethod
    def from_overrides(cls, overrides: Sequence[str], base: Config | None = None) -> Config:
        """``base`` (default: the defaults) with ``key=value`` strings applied."""
        return dataclasses.replace(base or cls(), **parse_overrides(overrides))

    def identity_differences(self, other: Config) -> list[str]:
        """'field: ours vs theirs' for each identity field that differs."""
        return [
            f"{name}: {getattr(self, name)!r} vs {getattr(other, name)!r}"
            for name in field_types()
            if name not in RUNTIME_FIELDS and getattr(self, name) != getattr(other, name)
        ]


# Named configurations a learner can ask for (``preset(name)``; the TPU scripts'
# --preset). tpu-v5e: one v5e chip (MXU 128 x 128, bf16 peak 197 TFLOP/s, 15.7 GiB HBM).
#   - bf16 matmul inputs, float32 parameters, Adam moments and accumulators (the model's
#     Precision policy); dropout 0 (its random bits and selects are non-matmul work);
#   - D = 2048 = 16 heads x 128 (each head's q.k^T and p.v contract over the MXU's 128),
#     F = 4 D = 8192, 6 layers (N = 307 M parameters, 302 M of them in matmuls);
#   - 8 rows x T = 2048 bytes: every weight matmul is (16384 x 2048) @ (2048 x 2048 or
#     8192), large multiples of 128 on every side;
#   - attention by the flash kernel with segment ids (no T x T scores or mask in HBM; its
#     blocks 512 x 512 until the chip's sweep, tpu_scripts/flash_vs_jax.py, says better),
#     in the "BHTD" layout (flash_layout): with "BTHD" (q, k, v read in the projections'
#     (B, T, H, 128) layout) the step on one v5e chip took 265.8 ms against 259.0 ms, its
#     data formatting 12.0 ms against 6.5 (benchmarks/records/byte_transformer_mfu/
#     2026-12-06_tpu-v5-lite-x1-unknown-13core-tpu.json and its git history): XLA already
#     lays the projections out head-major, and the kernel's row-major (B, T, H*D) view
#     made it copy them back;
#   - no remat: plan.memory.training_memory estimates, in GiB, 3.4 of state in (12 N: f32
#     params, Adam mu, nu) + 7.7 of saved activations (6 layers x 1.25: the f32 MLP
#     pre-activation 0.5, GELU output 0.25, q/k/v 0.19, five more b T D bf16 tensors 0.31;
#     the flash kernel keeps only its log-sum-exp, no T x T) = 11.1 at the peak of
#     liveness; 15.68 if the 3.4 of new state (not donated) and 1.1 of gradients lived at the
#     same time too. config_test.py checks both under the chip's 15.7 GiB. The TPU compiler
#     agrees (plan/compile.py on v5e:2x2 with 8 rows a chip, compiled on a CPU host with
#     libtpu): arguments 3.44 GiB, outputs 3.43, temporaries 6.86, code 0.28: 13.73 GiB.
PRESETS: dict[str, dict[str, Any]] = {
    "tpu-v5e": {
        "compute_dtype": "bfloat16",
        "dropout": 0.0,
        "d_model": 2048,
        "num_heads": 16,
        "num_layers": 6,
        "mlp_width": 8192,
        "seq_len": 2048,
        "max_len": 2048,
        "batch_size": 8,
        "attention": "flash",
        "attention_block_q": 512,
        "attention_block_k": 512,
        "learning_rate": 3e-4,
    },
    # quality-v5e: the model worth keeping, on one v5e chip in under 7 minutes (compile
    # included): held-out 1.41 bits per byte after 7,500 steps (35 epochs of the 3.5 MB of
    # training files), below xz -9e given every training file first (1.50)
    # (benchmarks/records/byte_transformer_quality). Chosen by the chip sweep
    # (tpu_scripts/byte_transformer_sweep.py, benchmarks/records/byte_transformer_sweep):
    # at 25.7 M parameters a run of 12,000 steps was best at step 7,200 and then overfitted
    # (1.38 -> 1.45), so the schedule ends at 7,500; 3.4 M parameters reached 1.76 in the
    # 80 s a 25.7 M model spent compiling and warming up. A warmup and a cosine decay to a
    # tenth; Adam's b2 0.95 and weight decay 0.1; dropout 0.1; bf16 matmuls; every held-out
    # byte evaluated (31 batches of 32 x 512).
    "quality-v5e": {
        "compute_dtype": "bfloat16",
        "d_model": 512,
        "num_layers": 8,
        "num_heads": 4,
        "seq_len": 512,
        "max_len": 512,
        "batch_size": 32,
        "dropout": 0.1,
        "learning_rate": 1e-3,
        "lr_schedule": "cosine",
        "warmup_steps": 200,
        "final_lr_fraction": 0.1,
        "adam_b2": 0.95,
        "weight_decay": 0.1,
        "steps": 7500,
        "ckpt_every": 2500,
        "eval_every": 750,
        "eval_batches": 31,
        "log_every": 250,
    },
}


def preset(name: str, base: Config | None = None) -> Config:
    """``base`` (default: the defaults) with the named preset's values; ValueError listing
    the presets for an unknown name."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return dataclasses.replace(base or Config(), **PRESETS[name])


def field_types() -> dict[str, type]:
    hints = typing.get_type_hints(Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(Config)}


def convert(name: str, text: str, kind: type) -> Any:
    """``text`` as a ``kind`` (bool: true/false, yes/no, on/off, 1/0); ValueError naming
    ``name`` otherwise."""
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name} takes true or false, got {text!r}")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{name} takes a {kind.__name__}, got {text!r}") from None


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """{"steps": 50, ...} from ["steps=50", ...]; ValueError naming the bad item (with the
    closest valid key for a typo)."""
    types = field_types()
    values: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {item!r}")
        if key not in types:
            close = difflib.get_close_matches(key, list(types), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"unknown config key {key!r}{hint}; keys: {', '.join(types)}")
        values[key] = convert(key, text, types[key])
    return values


def help_table() -> str:
    """One line per field: name, type, default (for --help)."""
    defaults = Config()
    return "\n".join(
        f"  {name:<17} {kind.__name__:<6} default {getattr(defaults, name)!r}"
        for name, kind in field_types().items()
    )
