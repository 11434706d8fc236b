"""The base of the capstone's document models: ``Document`` (core.documents' strict model,
named for its messages), ``DocumentError``, the field types several documents share and the
validator for ISO timestamps. The models are in documents.py (what a run leaves), bench_documents
.py (bench.json, profile.json) and plan_documents.py (plan.json, cache_report.json)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import pydantic

from capstones.byte_transformer import args
from core import documents

Config = dict[str, Any]  # Config.to_dict(): checked by config.Config.from_dict where it is used
Precision = Literal["fp32", "bf16", "int8"]


class Document(documents.Document):
    """A capstone document: core.documents' strict model, named for its messages."""

    what: ClassVar[str] = "document"


class DocumentError(args.UsageError):
    """A document that is not JSON or not what its model says; the message names the file
    and the first bad field (a UsageError: exit status 2 through the CLI)."""


def iso(field: str):
    """A validator for ``field``: an ISO 8601 timestamp (core.documents.iso_time)."""
    return pydantic.field_validator(field)(documents.iso_time)
