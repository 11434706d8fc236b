"""The predict service's HTTP request/response models, whose bounds come from the manifest's
contract (manifest.py holds the manifest's schema), with the classifier's own wording of
validation errors (predict_wording)."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import pydantic
import pydantic_core

from core.serving.http import Strict, short
from core.serving.predict.manifest import BATCH_DIM, FORMAT, FORMAT_VERSION  # noqa: F401

# --- HTTP --------------------------------------------------------------------------------------


def request_model(contract: dict | None) -> type[Strict]:
    """The /predict body bounded by the contract (None: not known yet; the loaded artifacts'
    contract is checked on every request anyway)."""
    c = contract or {}
    features, most = c.get("features"), c.get("max_batch")
    low, high = c.get("min_value", 0.0), c.get("max_value", 16.0)
    # The range is checked once for the whole batch (one message naming the first value
    # outside it, not one per value); the document states it per value.
    Value = Annotated[  # noqa: N806
        float, pydantic.WithJsonSchema({"type": "number", "minimum": low, "maximum": high})
    ]
    Row = Annotated[list[Value], pydantic.Field(min_length=features, max_length=features)]  # noqa: N806
    rows = f"1 to {most}" if most else "1 to max_batch"
    feats = features if features else "features"

    def in_range(rows: list[list[float]]) -> list[list[float]]:
        problem = value_problem(rows, low, high)
        if problem is not None:
            raise pydantic_core.PydanticCustomError("pixel_range", problem)
        return rows

    class PredictRequest(Strict):
        inputs: Annotated[
            list[Row],
            pydantic.AfterValidator(in_range),
            pydantic.Field(
                min_length=1,
                max_length=most,
                description=f"a list of {rows} rows, each a list of {feats} numbers in "
                f"[{low:g}, {high:g}] (an 8x8 digit's pixel intensities, row by row)",
            ),
        ]

    return PredictRequest


def value_problem(rows, low: float, high: float) -> str | None:
    """Why the rows' values break the contract (None when every one is finite, in range)."""
    x = np.asarray(rows, np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        return f"inputs[{i}][{j}] must be a finite number, got {x[i, j]}"
    outside = (x < low) | (x > high)
    if outside.any():
        i, j = np.argwhere(outside)[0]
        return (
            f"inputs[{i}][{j}] must be a number in [{low:g}, {high:g}] (a pixel intensity), "
            f"got {x[i, j]:g} ({int(outside.sum())} values outside the range)"
        )
    return None


class Prediction(pydantic.BaseModel):
    labels: list[Annotated[int, pydantic.Field(ge=0, le=9)]]
    probabilities: list[list[float]]
    model_version: str


class Batching(pydantic.BaseModel):
    max_batch: int
    max_wait_ms: float
    batches: int
    rows: int
    queue_depth: int


class Ready(pydantic.BaseModel):
    status: Literal["ready"]
    model_version: str
    max_batch: int
    features: int
    classes: int
    min_value: float
    max_value: float
    platforms: list[str]
    buckets: list[int]
    batching: Batching


def predict_wording(kind: str, loc: list[str], value, error: dict) -> str | None:
    """The classifier's wording of a validation error (core.serving.http.describe_errors
    words the rest): batch size, a row's feature count, a value's type and range."""
    if not loc or loc[0] != "inputs":
        return None
    if loc == ["inputs"] and kind == "pixel_range":
        return error["msg"]
    if len(loc) == 1 and kind in ("too_short", "too_long"):
        size = len(value) if isinstance(value, list) else "?"
        most = error.get("ctx", {}).get("max_length")
        bound = f"1 to {most} rows" if most is not None else "at least 1 row"
        return f"inputs must hold {bound} (the batch), got {size}"
    if len(loc) == 2 and kind in ("too_short", "too_long"):
        want = error["ctx"].get("min_length", error["ctx"].get("max_length"))
        size = len(value) if isinstance(value, list) else "?"
        return f"inputs[{loc[1]}] must hold {want} numbers (the features), got {size}"
    if len(loc) == 2 and kind == "list_type":
        return f"inputs[{loc[1]}] must be a list of numbers, got {short(value)}"
    if len(loc) == 3:
        return f"inputs[{loc[1]}][{loc[2]}] must be a number, got {short(value)}"
    return None
