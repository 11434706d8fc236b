"""Answer sheets (what a learner hands in) and progress files (what the learner has done).

An answer sheet is JSON, validated before anything is graded:

    {"path": "learn-tpus", "seed": 7, "learner": "ada",
     "answers": {"setup.shard_shape": [2, 64], "arrays.plausible_bug": "wrong_axis",
                 "transformers.causal_attention": "import jax.numpy as jnp\\n...", ...}}

A number answers a predict item, a list of integers a shape, a string a diagnose item (the
choice id) or a code exercise (the source); null or a missing id means "not attempted".

Progress lives in the learner's workspace, one file per paper and seed:
``runs/assessments/<paper>/seed-<seed>.json`` (runs/ is git-ignored). It is validated by
``Progress`` when read and written atomically (a temporary file in the same folder, fsync,
rename), so a crash mid-write leaves the previous file whole.
"""

from __future__ import annotations

import datetime
import pathlib
from typing import Any, Literal

import pydantic

from core import documents
from core.assessment import PROGRESS_DIR_ENV, WORKSPACE  # noqa: F401 (re-exported)
from core.assessment import paper as papers

MAX_SEED = 2**31 - 1
MAX_SHEET_BYTES = 4 * 2**20  # a paper's answers, code included, are a few hundred KiB at most


class SheetError(ValueError):
    """A sheet or progress file that cannot be used; ``field`` names what is wrong."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class AnswerSheet(pydantic.BaseModel):
    """One learner's answers to one paper at their seed."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    path: str  # the paper's name: "learn-tpus" or "make-it-fast"
    seed: int = pydantic.Field(ge=0, le=MAX_SEED)
    learner: str = pydantic.Field("", max_length=200)
    answers: dict[str, Any] = {}  # item id -> answer (checked per item by the paper)

    @pydantic.field_validator("path")
    @classmethod
    def _known_paper(cls, value: str) -> str:
        if value not in papers.PAPERS:
            raise ValueError(f"no assessment {value!r}; choose one of {sorted(papers.PAPERS)}")
        return value


def _first_error(error: pydantic.ValidationError) -> SheetError:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "sheet"
    return SheetError(field, first["msg"])


def parse_json(text: str, what: str = "sheet") -> Any:
    """``text`` as JSON, or SheetError(``what``) for anything else: not JSON, an integer past
    Python's int max str digits (json raises ValueError), nesting past the recursion limit
    (RecursionError), text larger than MAX_SHEET_BYTES."""
    if len(text) > MAX_SHEET_BYTES:
        raise SheetError(what, f"larger than {MAX_SHEET_BYTES // 2**20} MiB")
    try:
        return documents.parse_json(text, f"the {what}")
    except ValueError as error:
        raise SheetError(what, str(error)) from None


def parse_sheet(text: str, expected_path: str | None = None) -> AnswerSheet:
    """Validate a sheet's JSON text; SheetError names the first field that is wrong."""
    data = parse_json(text)
    if not isinstance(data, dict):
        raise SheetError("sheet", "expected a JSON object with path, seed and answers")
    try:
        sheet = AnswerSheet.model_validate(data)
    except pydantic.ValidationError as error:
        raise _first_error(error) from None
    if expected_path is not None and sheet.path != expected_path:
        raise SheetError("path", f"the sheet answers {sheet.path!r}, not {expected_path!r}")
    problems = papers.answer_problems(sheet.path, sheet.answers)
    if problems:
        field, problem = next(iter(problems.items()))
        raise SheetError(field, problem)
    return sheet


def read_limited(file: pathlib.Path, what: str) -> str:
    """The text of ``file``, refused (SheetError) past MAX_SHEET_BYTES before it is read."""
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_SHEET_BYTES + 1)
        if len(data) > MAX_SHEET_BYTES:
            raise SheetError(what, f"{file} is larger than {MAX_SHEET_BYTES // 2**20} MiB")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SheetError(what, f"cannot read {file}: {error}") from None


def load_sheet(file: pathlib.Path, expected_path: str | None = None) -> AnswerSheet:
    return parse_sheet(read_limited(pathlib.Path(file), "answers file"), expected_path)


def template(slug: str, seed: int, learner: str = "") -> dict[str, Any]:
    """A blank sheet for paper ``slug``: every item id with null, code exercises with their
    stub (edit it in place)."""
    answers = papers.stub_answers(slug)
    return {"path": slug, "seed": seed, "learner": learner, "answers": answers}


class ItemProgress(pydantic.BaseModel):
    """One item's record: attempts counts distinct answers graded; the last one is kept."""

    model_config = pydantic.ConfigDict(extra="forbid")

    attempts: int = pydantic.Field(ge=0)
    passed: bool
    ever_passed: bool
    summary: str
    lesson: str  # the lesson to revisit when it failed
    last_answer: Any = None
    updated_utc: str


class Progress(pydantic.BaseModel):
    """A learner's progress on one paper at one seed."""

    model_config = pydantic.ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    paper: str
    seed: int = pydantic.Field(ge=0, le=MAX_SEED)
    items: dict[str, ItemProgress] = {}

    def counts(self) -> tuple[int, int, int]:
        """(attempted, passed now, items on the paper)."""
        total = len(papers.paper(self.paper).item_ids)
        passed = sum(record.passed for record in self.items.values())
        return len(self.items), passed, total

    def revisit(self) -> list[tuple[str, str]]:
        """(item id, lesson slug) for every attempted item whose last answer failed."""
        return [(i, r.lesson) for i, r in self.items.items() if not r.passed]


def progress_file(slug: str, seed: int, root: pathlib.Path = WORKSPACE) -> pathlib.Path:
    return pathlib.Path(root) / slug / f"seed-{seed}.json"


def load_progress(slug: str, seed: int, root: pathlib.Path = WORKSPACE) -> Progress:
    """The learner's progress, or an empty one when there is no file yet.

    A file that does not validate raises SheetError naming it: it is never overwritten.
    """
    papers.paper(slug)  # ValueError for an unknown paper
    file = progress_file(slug, seed, root)
    if not file.is_file():
        return Progress(paper=slug, seed=seed)
    text = read_limited(file, str(file))
    try:
        progress = Progress.model_validate_json(text)
    except (pydantic.ValidationError, ValueError, RecursionError) as error:
        raise SheetError(str(file), f"not a valid progress file ({error})") from None
    if (progress.paper, progress.seed) != (slug, seed):
        raise SheetError(str(file), f"holds {progress.paper} seed {progress.seed}")
    return progress


def recorded(progress: Progress, report: papers.Report) -> Progress:
    """``progress`` with ``report``'s attempted items recorded (a new object).

    An answer equal to the one recorded last is the same attempt (a reactive app grades it
    again whenever a cell reruns), so it does not count twice.
    """
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = dict(progress.items)
    for result in report.results:
        if not result.attempted or result.ungraded:  # the grader's failure is no attempt
            continue
        answer = report.answers[result.item.id]
        before = items.get(result.item.id)
        if before is not None and before.last_answer == answer:
            continue
        items[result.item.id] = ItemProgress(
            attempts=(before.attempts if before else 0) + 1,
            passed=result.passed,
            ever_passed=result.passed or bool(before and before.ever_passed),
            summary=result.summary,
            lesson=result.item.lesson,
            last_answer=answer,
            updated_utc=now,
        )
    return progress.model_copy(update={"items": items})


def save_progress(progress: Progress, root: pathlib.Path = WORKSPACE) -> pathlib.Path:
    """Write ``progress`` atomically (core.documents: a temporary file, fsync, rename)."""
    file = progress_file(progress.paper, progress.seed, root)
    return documents.write_text_atomic(file, progress.model_dump_json(indent=2))


def latest_progress(slug: str, root: pathlib.Path = WORKSPACE) -> Progress | None:
    """The most recently written valid progress file of paper ``slug``, or None."""
    folder = pathlib.Path(root) / slug
    files = sorted(folder.glob("seed-*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
    for file in files:
        try:
            seed = int(file.stem.removeprefix("seed-"))
            return load_progress(slug, seed, root)
        except (ValueError, SheetError):
            continue  # the home page shows what it can read; the app names a broken file
    return None
