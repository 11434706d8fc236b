"""The JSON documents the project writes and reads, validated by pydantic models.

A document model is strict (a JSON ``true`` is not a count, ``"8"`` is not an int) and keeps
fields it does not know (later versions may add some). ``validate`` turns pydantic's error into
one ValueError that names the field path (``jax.devices[0]``) and what was wrong, so a learner
who hands the lab the wrong file reads what to fix. ``json_schema`` exports a model as JSON
Schema for the documented file formats.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import tempfile
from typing import Annotated, Any, Literal

import pydantic


class Document(pydantic.BaseModel):
    """Base of every document model: strict types, unknown fields kept."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow")


def iso_time(value: str) -> str:
    """A field validator body: ``value`` if it parses as an ISO 8601 time, else ValueError."""
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"is not an ISO time: {value!r}") from None
    return value


Number = int | float


def _figure(value: Any) -> Any:
    """A record figure: a number, a string, or a flat list of those (not a bool, not a dict)."""

    def scalar(item: Any) -> bool:
        return isinstance(item, (int, float, str)) and not isinstance(item, bool)

    if scalar(value) or (isinstance(value, list) and all(scalar(item) for item in value)):
        return value
    raise ValueError("a figure is a number, a string or a list of those")


Figure = Annotated[
    Any,
    pydantic.AfterValidator(_figure),
    pydantic.WithJsonSchema(
        {
            "anyOf": [
                {"type": "number"},
                {"type": "string"},
                {"type": "array", "items": {"type": ["number", "string"]}},
            ]
        }
    ),
]


class RecordAccelerator(pydantic.BaseModel):
    """The accelerator a record's figures came from (JAX's device kind and count)."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    kind: str = pydantic.Field(min_length=1)  # jax.Device.device_kind: "TPU v5 lite"
    count: int = pydantic.Field(ge=1)  # devices this process saw


class RecordMachine(pydantic.BaseModel):
    """The machine a benchmark record was measured on."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    label: str = pydantic.Field(min_length=1)
    cpu: str = pydantic.Field(min_length=1)
    cores: int | None = pydantic.Field(ge=1)  # None: not known where the record was written
    platform: str = pydantic.Field(min_length=1)
    accelerator: RecordAccelerator | None = None  # None: a CPU record, or an older one


class RecordLoad(pydantic.BaseModel):
    """The load during a benchmark record's run (``core.perf.records.measure_load``)."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    seconds: Number
    cpus: int = pydantic.Field(ge=1)
    own_cores: Number  # this process and its children, on average
    other_processes_cores: Number | None  # everything else, on average (None: not measurable)
    limit_cores: Number  # more than this from others and the record is refused
    load_average_start: Annotated[list[Number], pydantic.Field(min_length=3, max_length=3)] | None
    load_average_end: Annotated[list[Number], pydantic.Field(min_length=3, max_length=3)] | None


class Closed(pydantic.BaseModel):
    """A strict, closed part of a record (a typo in a field name is an error)."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")


class CourseCheck(Closed):
    """One check of a lesson, from its bundle: the worst error against its tolerance."""

    what: str
    passed: bool
    line: str  # the check line as the lesson printed it
    max_error: Number | None  # the error nearest its bound (None: NaN or infinite)
    tolerance: Number  # that error's bound
    tolerance_reason: str  # why the bound has its value, as the check line says ("" if not)


class CourseNumber(Closed):
    """A key number the lesson reported (``lab.report``)."""

    name: str
    value: str | int | float | bool | None
    unit: str


class CourseReceipt(Closed):
    """Where a lesson's numbers came from: its bundle's receipt, in short."""

    backend: str
    tpu_result: bool
    device_kinds: list[str]
    device_count: int = pydantic.Field(ge=0)
    process_count: int = pydantic.Field(ge=1)


class CourseLesson(Closed):
    """One lesson of a course run, read from its results.json and run.json."""

    slug: str = pydantic.Field(min_length=1)
    status: Literal["passed", "failed", "refused", "timed_out", "error"]
    reason: str  # why it did not pass ("" when it passed)
    checks: list[CourseCheck]
    seconds: Number | None
    exit_code: int | None
    finished_utc: str | None
    numbers: list[CourseNumber]
    receipt: CourseReceipt | None  # None: no bundle came back (a crash, a timeout)
    results_sha256: str | None = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    # sha256 of the app (apps/<slug>.py) the run exported and ran; None in records written
    # before it was kept. A differing app now means the entry is of an earlier version.
    app_sha256: str | None = pydantic.Field(default=None, pattern=r"^[0-9a-f]{64}$")
    run: str  # the run it came from (CourseRun.id)
    replaced: list[str] = []  # earlier runs of this lesson that this later one replaces


class CourseRun(Closed):
    """One run folder (run.json) a course record was read from."""

    id: str  # "<folder>@<created_utc>"
    folder: str  # "local/2026-12-06": the run folder's last two parts
    created_utc: str
    updated_utc: str
    commands: list[str]  # each call of course-run into the folder (run.json)
    lessons: list[str]


class PytestCounts(Closed):
    """``pytest`` on the record's machine: its counts, from its summary line or junit xml."""

    command: str = pydantic.Field(min_length=1)
    source: str  # "summary line" or "junit xml"
    summary: str  # the summary line, or the junit totals as one line
    passed: int = pydantic.Field(ge=0)
    failed: int = pydantic.Field(ge=0)
    skipped: int = pydantic.Field(ge=0)
    errors: int = pydantic.Field(ge=0)
    seconds: Number | None


class CourseResults(Closed):
    """A course run's lessons on one machine and date (``benchmarks/records/tpu_course``)."""

    lessons: list[CourseLesson] = pydantic.Field(min_length=1)
    runs: list[CourseRun] = pydantic.Field(min_length=1)
    pytest: PytestCounts | None = None


class BenchmarkRecord(pydantic.BaseModel):
    """One dated benchmark result kept in the repo (``benchmarks/records/<name>/...json``).

    The course's record spec: what was measured (``figures``), by which exact ``command``, on
    which machine with which versions, under what load. Strict and closed (extra fields are
    refused): a record is read by apps and docs that cite it, so a typo is an error.
    """

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    schema_version: Literal[1]
    name: str = pydantic.Field(pattern=r"^[a-z0-9]+(_[a-z0-9]+)*$")
    date: str = pydantic.Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    machine: RecordMachine
    versions: dict[str, str]
    command: str = pydantic.Field(min_length=1)
    load_average: Annotated[list[Number], pydantic.Field(min_length=3, max_length=3)] | None
    load: RecordLoad | None = None  # measured since records carry it; None: an older record
    figures: dict[str, Figure] = pydantic.Field(min_length=1)
    notes: str = ""
    under_load: str = ""  # non-empty: taken on a busy machine (why); never cited
    course: CourseResults | None = None  # a course run's lessons (tpu_scripts course-record)

    @pydantic.field_validator("date")
    @classmethod
    def _real_date(cls, value: str) -> str:
        try:
            datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"is not a calendar date: {value!r}") from None
        return value


def _where(location: tuple) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_json(text: str | bytes, what: str) -> Any:
    """``text`` as JSON; ValueError "<what> is not JSON: ..." for whatever json cannot read
    back: a syntax error (JSONDecodeError), bytes that are not UTF-8, an integer past Python's
    int max str digits (a bare ValueError) and nesting past the recursion limit
    (RecursionError, which ``except json.JSONDecodeError`` lets through)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is not usable JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, "Exceeds the limit"
        raise ValueError(f"{what} is not JSON: {exc}") from None


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in the file at ``path`` (ValueError "<path> is not JSON: ...")."""
    return parse_json(pathlib.Path(path).read_text(encoding="utf-8"), str(path))


def load(path: str | os.PathLike, model: type[pydantic.BaseModel], what: str) -> dict:
    """The document in the file at ``path``, validated by ``model`` (see read_json, validate)."""
    return validate(model, read_json(path), what)


def validate(model: type[pydantic.BaseModel], document: Any, what: str) -> dict:
    """``document`` when ``model`` accepts it, else ValueError naming the first bad field.

    ``what`` names the document in the message ("environment receipt"). The dict is returned
    as given (not re-serialized), so a validated document round-trips byte for byte.
    """
    article = "an" if what[:1].lower() in "aeiou" else "a"
    if not isinstance(document, dict):
        raise ValueError(f"{article} {what} is a JSON object, got {type(document).__name__}")
    try:
        model.model_validate(document)
    except pydantic.ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = _where(error["loc"])
        if error["type"] == "missing":
            raise ValueError(f"not {article} {what}: required field {where!r} is missing") from None
        got = error.get("input")
        message = error["msg"].removeprefix("Value error, ")
        raise ValueError(f"{what} field {where!r}: {message}, got {got!r}") from None
    return document


def json_schema(model: type[pydantic.BaseModel]) -> dict:
    """The model as a JSON Schema document (for the file formats the docs describe)."""
    return model.model_json_schema()


def write_text_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Write ``text`` (UTF-8) so a reader sees the old file or the new one, never half of one
    (``write_bytes_atomic`` of its UTF-8 bytes)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> pathlib.Path:
    """Write ``data`` so a reader sees the old file or the new one, never half of one.

    A unique temporary file beside ``path``, flushed to disk, renamed over it; the folder is
    made if missing and synced after the rename; the temporary file never outlives a failure.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path
