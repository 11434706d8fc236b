"""The predict artifact's manifest schema (ArtifactManifest: strict and closed). Kept apart from
the HTTP models so that loading an artifact imports no web framework."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

FORMAT = "jax-tpu-lab predict artifact"
FORMAT_VERSION = 1
BATCH_DIM = "b"  # the symbolic batch dimension's name in the exported shapes
Dim = int | str  # a constant dimension, or the symbolic one ("b")


class Closed(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")


class Leaf(Closed):
    name: Annotated[str, pydantic.Field(min_length=1)]
    shape: list[Dim]
    dtype: Annotated[str, pydantic.Field(min_length=1)]


class FileEntry(Closed):
    file: Annotated[str, pydantic.Field(min_length=1)]
    sha256: Annotated[str, pydantic.Field(pattern=r"^[0-9a-f]{64}$")]
    bytes: Annotated[int, pydantic.Field(ge=1)]


class WeightsEntry(FileEntry):
    leaves: Annotated[list[Leaf], pydantic.Field(min_length=1)]


class ExportedEntry(FileEntry):
    platforms: Annotated[list[str], pydantic.Field(min_length=1)]
    calling_convention_version: Annotated[int, pydantic.Field(ge=1)]
    inputs: Annotated[list[Leaf], pydantic.Field(min_length=2)]
    outputs: Annotated[list[Leaf], pydantic.Field(min_length=1)]


class Contract(Closed):
    """What a caller may send: x_BF input_dtype (b, features), 1 <= b <= max_batch, every value
    finite and in [min_value, max_value]."""

    features: Annotated[int, pydantic.Field(ge=1)]
    classes: Annotated[int, pydantic.Field(ge=2)]
    min_value: float
    max_value: float
    max_batch: Annotated[int, pydantic.Field(ge=1, le=4096)]
    batch_dim: Literal["b"]
    input_dtype: Literal["float32", "bfloat16"]


class ModelInfo(Closed):
    kind: str
    sizes: list[int]
    seed: int
    steps: int
    learning_rate: float
    train_accuracy: float
    test_accuracy: float


class Versions(Closed):
    jax: str
    jaxlib: str
    flax: str
    numpy: str
    python: str
    calling_convention_version: int


class ArtifactManifest(Closed):
    format: Literal["jax-tpu-lab predict artifact"]
    format_version: Literal[1]
    model_version: Annotated[str, pydantic.Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    created: str
    model: ModelInfo
    contract: Contract
    weights: WeightsEntry
    exported: ExportedEntry
    versions: Versions
    manifest_sha256: Annotated[str, pydantic.Field(pattern=r"^[0-9a-f]{64}$")]
