"""What every artifact shares: the envelope (label, receipt, checks), validation, writing.

An artifact document is ``{"schema", "version", "artifact", "created_utc", "label",
"tpu_result", "receipt", "checks", "decisions", ...}``: ``receipt`` is the runtime receipt of
where it ran (tpu_scripts/receipt.py), ``label`` and ``tpu_result`` come from the receipt's
backend alone (core.state.artifacts.label). It is validated by its pydantic model before it
is written, then written atomically as NAME.json (core.state.checkpoint.write_json_atomic),
NAME.json.sha256 (sha256 of its canonical JSON) and NAME.md.
"""

from __future__ import annotations

import datetime
import pathlib
import sys
from collections.abc import Sequence

import pydantic

from core import documents
from core.state import artifacts
from tpu_scripts import receipt as runtime_receipt


class CheckRow(documents.Document):
    what: str
    passed: bool
    detail: str


class Decision(documents.Document):
    topic: str
    decision: str
    evidence: str


class Envelope(documents.Document):
    """The fields every artifact document has (each artifact's model adds its own)."""

    schema_: str = pydantic.Field(alias="schema")
    version: int
    artifact: str
    created_utc: str
    label: str
    tpu_result: bool
    receipt: runtime_receipt.Receipt
    checks: list[CheckRow]
    decisions: list[Decision]

    _iso_created = pydantic.field_validator("created_utc")(documents.iso_time)

    @pydantic.model_validator(mode="after")
    def _label_follows_the_backend(self):
        backend = self.receipt.backend
        if self.tpu_result is not (backend == "tpu") or self.label != artifacts.label(backend):
            raise ValueError(
                f"label {self.label!r} / tpu_result {self.tpu_result} do not follow backend "
                f"{backend!r}: only a TPU run is a TPU result"
            )
        if self.schema_ != artifacts.SCHEMA or self.version != artifacts.VERSION:
            raise ValueError(f"not a {artifacts.SCHEMA} v{artifacts.VERSION} document")
        return self


def check(what: str, passed: bool, detail: str) -> dict:
    return {"what": what, "passed": bool(passed), "detail": detail}


def decision(topic: str, text: str, evidence: str) -> dict:
    return {"topic": topic, "decision": text, "evidence": evidence}


def envelope(name: str, receipt: dict, checks: list[dict], decisions: list[dict]) -> dict:
    """The shared fields of artifact ``name`` measured where ``receipt`` was taken."""
    artifacts.get(name)
    backend = receipt["backend"]
    return {
        "schema": artifacts.SCHEMA,
        "version": artifacts.VERSION,
        "artifact": name,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "label": artifacts.label(backend),
        "tpu_result": backend == "tpu",
        "receipt": receipt,
        "checks": checks,
        "decisions": decisions,
    }


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[dict]) -> str:
    if not rows:
        return "(none)\n"
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def markdown(document: dict, sections: Sequence[tuple[str, object]]) -> str:
    """The report a learner reads: label and title, where it ran, checks, decisions, sections.

    ``sections``: (heading, rows or text); rows (a list of dicts) render as a table.
    """
    artifact = artifacts.get(document["artifact"])
    rec = document["receipt"]
    versions = ", ".join(f"{k} {v}" for k, v in rec["versions"].items() if v)
    passed = sum(c["passed"] for c in document["checks"])
    parts = [
        f"# {document['label']}: {artifact.title}\n",
        f"{artifact.what}.\n",
        f"- artifact: `{artifact.name}` (learning path: {artifact.path_title})",
        f"- made by: `{artifact.command}` at {document['created_utc']}",
        f"- where it ran: backend **{rec['backend']}**, {rec['device_count']} x "
        f"{rec['device_kind']}, {rec['process_count']} process(es), host {rec['host']['hostname']}",
        f"- versions: {versions}",
        f"- tpu_result: **{str(document['tpu_result']).lower()}**"
        + (
            ""
            if document["tpu_result"]
            else f" (a {rec['backend'].upper()} rehearsal: no figure here is a TPU result)"
        ),
        f"- checks: {passed} of {len(document['checks'])} passed",
        "",
        "## Checks\n",
        markdown_table(
            [
                {
                    "check": c["what"],
                    "result": "PASS" if c["passed"] else "FAIL",
                    "detail": c["detail"],
                }
                for c in document["checks"]
            ]
        ),
    ]
    if document["decisions"]:
        parts.append("## Decisions\n")
        for d in document["decisions"]:
            parts.append(f"- **{d['topic']}**: {d['decision']}  \n  evidence: {d['evidence']}")
        parts.append("")
    for heading, body in sections:
        parts.append(f"## {heading}\n")
        parts.append(markdown_table(body) if isinstance(body, list) else f"{body}\n")
    parts.append(
        f"Verify this file: `python -m tpu_scripts artifact verify {artifact.name}.json` "
        "(checks its sha256 and schema).\n"
    )
    return "\n".join(parts)


def validate(model: type[Envelope], document: dict) -> dict:
    return documents.validate(model, document, f"{document.get('artifact', '?')} artifact")


def write(
    out_dir: pathlib.Path, model: type[Envelope], document: dict, sections
) -> list[pathlib.Path]:
    """Validate, then write NAME.json, NAME.json.sha256 and NAME.md into ``out_dir``."""
    from core.state import checkpoint

    validate(model, document)
    name = document["artifact"]
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    checkpoint.write_json_atomic(json_path, document)
    digest = artifacts.canonical_sha256(document)
    sha_path = documents.write_text_atomic(
        artifacts.hash_path(json_path), f"{digest}  {json_path.name}\n"
    )
    md_path = documents.write_text_atomic(out_dir / f"{name}.md", markdown(document, sections))
    return [json_path, sha_path, md_path]


def verify(path: str | pathlib.Path, models: dict[str, type[Envelope]]) -> dict:
    """Reload an artifact: hash, envelope and its own schema; ValueError says what is wrong."""
    document = artifacts.load_verified(path)
    return validate(models[document["artifact"]], document)


def print_written(document: dict, paths: Sequence[pathlib.Path]) -> None:
    failed = [c for c in document["checks"] if not c["passed"]]
    print(f"{document['label']}: {artifacts.get(document['artifact']).title}")
    for c in document["checks"]:
        print(f"  {'PASS' if c['passed'] else 'FAIL'}: {c['what']}: {c['detail']}")
    for d in document["decisions"]:
        print(f"  DECISION ({d['topic']}): {d['decision']}")
    for path in paths:
        print(f"  wrote {path}")
    if failed:
        print(f"  {len(failed)} check(s) failed", file=sys.stderr)
