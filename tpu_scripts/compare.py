"""``python -m tpu_scripts compare runs/tpu/<vm>/<date> [--local DIR] [--markdown PATH]``.

Lesson by lesson, the TPU run's bundles (``<slug>/results.json``, process 0's) beside the
local CPU bundles of the same lessons (default ``runs/local/<date>``, made by ``course-run
--local``): the checks with their errors, the key numbers and every table, one value column
per backend headed with the backend and device kind of its receipt (core/lab/comparison.py).
A lesson one side lacks is shown as missing. Exit 2 when the TPU folder holds no bundle.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from core.lab import comparison, results


def lesson_slugs(tpu_dir: pathlib.Path, local_dir: pathlib.Path | None) -> list[str]:
    """The lessons with a bundle in either folder: the TPU run's order (run.json), then the
    rest by name."""
    from tpu_scripts import course_run

    slugs = []
    record = tpu_dir / course_run.RECORD
    if record.is_file():
        try:
            slugs = [lesson["slug"] for lesson in course_run.load_record(record)["lessons"]]
        except ValueError:
            slugs = []
    for folder in (tpu_dir, local_dir):
        if folder is not None and folder.is_dir():
            slugs += sorted(p.parent.name for p in folder.glob("*/results.json"))
    return list(dict.fromkeys(slugs))


def _bundle(folder: pathlib.Path | None, slug: str) -> tuple[dict | None, str]:
    if folder is None:
        return None, "no folder"
    path = folder / slug / "results.json"
    if not path.is_file():
        return None, f"no {path}"
    try:
        return results.load(path), ""
    except ValueError as exc:
        return None, f"{path} is not a valid bundle: {exc}"


def report(tpu_dir: pathlib.Path, local_dir: pathlib.Path | None) -> str:
    """The whole comparison as markdown (one section per lesson)."""
    lines = [
        f"# TPU results beside local CPU results: {tpu_dir}",
        "",
        f"- TPU bundles: `{tpu_dir}`",
        f"- CPU bundles: `{local_dir}`"
        + ("" if local_dir is not None and local_dir.is_dir() else " (none there)"),
        "",
    ]
    for slug in lesson_slugs(tpu_dir, local_dir):
        tpu, tpu_why = _bundle(tpu_dir, slug)
        local, local_why = _bundle(local_dir, slug)
        if tpu is None and local is None:
            lines += [f"## {slug}", "", f"- missing on both sides ({tpu_why}; {local_why})", ""]
            continue
        found = comparison.compare(tpu, local)
        if tpu is not None and (
            note := comparison.run_record_note(tpu_dir / slug / "results.json", slug)
        ):
            found = dataclasses.replace(found, notes=(note, *found.notes))
        lines.append(comparison.markdown(found))
        for side, why in (("TPU", tpu_why), ("CPU", local_why)):
            if why:
                lines.append(f"- {side} side missing: {why}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def default_local_dir(tpu_dir: pathlib.Path) -> pathlib.Path:
    """runs/local/<date> beside runs/tpu/<vm>/<date> (the same date)."""
    return tpu_dir.parent.parent.parent / "local" / tpu_dir.name


def main(tpu_dir: str, local_dir: str | None, markdown_path: str | None) -> int:
    tpu = pathlib.Path(tpu_dir)
    if not tpu.is_dir() or not any(tpu.glob("*/results.json")):
        print(
            f"error: {tpu} holds no lesson bundles (<slug>/results.json); run "
            "`python -m tpu_scripts course-run ...` first",
            file=sys.stderr,
        )
        return 2
    local = pathlib.Path(local_dir) if local_dir else default_local_dir(tpu)
    text = report(tpu, local)
    print(text, end="")
    if markdown_path:
        out = pathlib.Path(markdown_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    return 0


def add_parser(commands) -> None:
    sub = commands.add_parser(
        "compare",
        help="a TPU run's lesson results beside the local CPU results, lesson by lesson",
        description="Lesson by lesson, the TPU run's results (checks, key numbers, tables) "
        "beside the local CPU results of the same lessons: one value column per backend.",
    )
    sub.add_argument("tpu_dir", help="runs/tpu/<vm>/<date> (written by course-run)")
    sub.add_argument("--local", dest="local_dir", help="local bundles (runs/local/<date>)")
    sub.add_argument("--markdown", dest="markdown_path", help="also write the report here")
