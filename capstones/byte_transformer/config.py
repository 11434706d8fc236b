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
CACHE_PRECISIONS = ("fp32", "bf16", "int8")
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
    # data: Python's own standard library, split by file
    seq_len: int = 256
    batch_size: int = 16
    max_files: int = 0  # 0: every top-level stdlib .py file
    max_bytes: int = 65536  # per file
    heldout_fraction: float = 0.1
    data_seed: int = 0
    min_piece: int = 16  # a row's tail shorter than this is padding, not a 1-byte document
    # optimizer: AdamW with global-norm clipping
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    clip_norm: float = 1.0
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
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
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
        for name in ("dropout", "heldout_fraction", "learning_rate", "weight_decay", "clip_norm"):
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
