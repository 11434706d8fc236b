"""The headless assessments: print a paper, grade answer sheets, show progress.

    python -m core.assessment paper --path learn-tpus --seed 7 --template answers.json
    python -m core.assessment grade --path learn-tpus --answers answers.json [more.json ...]
    python -m core.assessment grade --path make-it-fast --answers a.json --save-progress
    python -m core.assessment progress

``grade`` prints each item's verdict and, for a failed item, the feedback that teaches (the
derivation, the evidence, the hidden tests) and the lesson to revisit; then the score. Every
sheet is graded whatever another holds: a code answer runs in a process of its own
(core.assessment.sandbox) under ``--time-limit`` and ``--memory-limit``, and how it ended
(an exception, sys.exit, a timeout, memory, a crash) is that item's feedback. At the end a
summary goes to stderr, and the status says what happened: 0 when every answer file was
graded, 2 when one is malformed (the field is named), 3 when the grader could not grade an
answer (its process did not start: grade it again). ``--save-progress`` records a sheet in
the workspace progress (runs/assessments/), which the course home shows.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import textwrap

from core import curriculum, runtime
from core.assessment import WORKSPACE, sandbox

EXIT_MALFORMED = 2
EXIT_UNGRADED = 3


def _paper_names() -> list[str]:
    """The assessments' papers, then each lesson's exercises (``lesson-<slug>``)."""
    from core import exercises  # the items' modules import NumPy, not JAX

    return [a.paper for a in curriculum.ASSESSMENTS] + [
        exercises.paper_slug(lesson) for lesson in exercises.lessons()
    ]


def _lesson_app(slug: str) -> str:
    return f"apps/{slug}.py"


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text.strip(), prefix)


def print_paper(slug: str, seed: int) -> None:
    from core.assessment import paper as papers

    chosen = papers.paper(slug)
    kind = "a lesson's exercises" if chosen.is_lesson else "synthesis assessment"
    print(f"# {chosen.title}: {kind}, learner seed {seed}\n")
    for number, item in enumerate(chosen.items, start=1):
        question = item.question(seed)
        print(f"## {number}. {item.title} ({item.kind}; {item.phase}) [{item.id}]\n")
        print(question.prompt.strip() + "\n")
        if question.program:
            print("```python\n" + question.program.strip() + "\n```\n")
        for choice, text in question.choices:
            print(f"- `{choice}`: {text}")
        if question.choices:
            print()
        if question.stub:
            print("Stub to complete:\n\n```python\n" + question.stub.strip() + "\n```\n")
        answer = f"Answer: {question.answer_hint}"
        if question.tolerance:
            answer += f" (tolerance: {question.tolerance})"
        print(answer + "\n")


def print_report(report, detail: str) -> None:
    from core.assessment import view

    print(f"== {report.paper.title}: learner seed {report.seed}")
    for number, result in enumerate(report.results, start=1):
        item = result.item
        mark = view.result_mark(result)
        print(f"{number:3d}. [{mark}] {item.title} ({item.kind}; {item.phase})")
        print(_indent(result.summary))
        show = detail == "all" or (detail == "failed" and result.attempted and not result.passed)
        if show and result.feedback is not None:
            print(_indent(result.feedback.detail, "        "))
            if result.feedback.solution:
                print(_indent(result.feedback.solution, "        "))
        if result.attempted and not result.passed:
            print(f"      revisit: {_lesson_app(item.lesson)}")
    total = len(report.results)
    print(
        f"score: {report.passed} of {total} items passed ({report.score:.0%}); "
        f"{report.attempted} attempted"
    )


def report_json(report, source: str) -> dict:
    return {
        "sheet": source,
        "paper": report.paper.slug,
        "seed": report.seed,
        "passed": report.passed,
        "attempted": report.attempted,
        "items": len(report.results),
        "score": report.score,
        "results": [
            {
                "item": r.item.id,
                "kind": r.item.kind,
                "phase": r.item.phase,
                "attempted": r.attempted,
                "passed": r.passed,
                "ungraded": r.ungraded or None,
                "summary": r.summary,
                "revisit": _lesson_app(r.item.lesson) if r.attempted and not r.passed else None,
            }
            for r in report.results
        ],
    }


def grade_sheets(args) -> int:
    from core.assessment import paper as papers
    from core.assessment import sheets

    sandbox.use_limits(args.limits)
    reports, malformed, ungraded, unconfined = [], [], [], set()
    for file in args.answers:
        try:
            sheet = sheets.load_sheet(file, expected_path=args.path)
        except sheets.SheetError as error:
            print(f"{file}: malformed answers file: {error}", file=sys.stderr)
            malformed.append(file)
            continue
        report = papers.grade(sheet.path, sheet.seed, sheet.answers)
        for result in report.results:
            if result.ungraded:
                ungraded.append(f"{file}: {result.item.id}: {result.ungraded}")
            if result.feedback is not None and result.feedback.confinement.startswith("unc"):
                unconfined.add(result.feedback.confinement)
        if args.json:
            reports.append(report_json(report, str(file)))
        else:
            who = f" ({sheet.learner})" if sheet.learner else ""
            print(f"# {file}{who}")
            print_report(report, args.detail)
        if args.save_progress:
            progress = sheets.load_progress(sheet.path, sheet.seed, args.progress_dir)
            saved = sheets.save_progress(sheets.recorded(progress, report), args.progress_dir)
            print(f"progress saved: {saved}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(reports, indent=2))
    total = len(args.answers)
    summary = f"graded {total - len(malformed)} of {total} answer files"
    summary += f"; {len(malformed)} malformed" if malformed else ""
    summary += f"; {len(ungraded)} answers not graded (run them again)" if ungraded else ""
    print(summary, file=sys.stderr)
    for line in ungraded:
        print(f"  not graded: {line}", file=sys.stderr)
    for why in sorted(unconfined):
        print(
            f"warning: code answers ran {why}: they could read this user's files", file=sys.stderr
        )
    if malformed:
        return EXIT_MALFORMED
    return EXIT_UNGRADED if ungraded else 0


def print_progress(args) -> int:
    from core.assessment import paper as papers
    from core.assessment import sheets

    for slug in [args.path] if args.path else _paper_names():
        found = sheets.latest_progress(slug, args.progress_dir)
        if found is None and not args.path and papers.paper(slug).is_lesson:
            continue  # a lesson's exercises are listed once the learner answered one
        if found is None:
            print(f"{slug}: no progress yet ({args.progress_dir / slug})")
            continue
        attempted, passed, total = found.counts()
        print(f"{slug} (seed {found.seed}): {attempted} of {total} attempted, {passed} passed")
        for item_id, lesson in found.revisit():
            print(f"    revisit {_lesson_app(lesson)} for {papers.ITEMS[item_id].title}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core.assessment",
        description="The synthesis assessments of the two learning paths, headless.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    default_root = WORKSPACE  # read without importing the items: devices are set later

    show = commands.add_parser("paper", help="print a paper for a learner seed")
    show.add_argument("--path", required=True, choices=_paper_names())
    show.add_argument("--seed", required=True, type=int, help="the learner's seed (0..2^31-1)")
    show.add_argument("--template", type=pathlib.Path, help="also write a blank answers file")
    show.add_argument("--learner", default="", help="a name written into the template")

    grade = commands.add_parser("grade", help="grade answer sheets and print the feedback")
    grade.add_argument("--path", required=True, choices=_paper_names())
    grade.add_argument("--answers", required=True, nargs="+", type=pathlib.Path)
    grade.add_argument(
        "--detail",
        choices=("failed", "all", "none"),
        default="failed",
        help="whose feedback to print in full (default: the failed items')",
    )
    grade.add_argument("--json", action="store_true", help="print the results as JSON")
    grade.add_argument("--save-progress", action="store_true", help="record in the workspace")
    grade.add_argument("--progress-dir", type=pathlib.Path, default=default_root)
    limits = sandbox.DEFAULT_LIMITS
    grade.add_argument(
        "--time-limit",
        type=float,
        default=limits.time_s,
        help=f"seconds one code answer may run, once its process started ({limits.time_s:g})",
    )
    grade.add_argument(
        "--memory-limit",
        type=int,
        default=limits.memory_mib,
        help=f"MiB of address space for one code answer's process ({limits.memory_mib})",
    )

    progress = commands.add_parser("progress", help="show the workspace progress per path")
    progress.add_argument("--path", choices=_paper_names())
    progress.add_argument("--progress-dir", type=pathlib.Path, default=default_root)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 with usage on bad arguments
    if args.command == "grade":
        try:
            args.limits = sandbox.Limits(time_s=args.time_limit, memory_mib=args.memory_limit)
        except ValueError as error:
            parser.error(str(error))
    if args.command == "paper":
        from core.assessment import sheets

        if not 0 <= args.seed <= sheets.MAX_SEED:
            parser.error(f"--seed must be in 0..{sheets.MAX_SEED}, got {args.seed}")
        if args.template is not None and args.template.exists():
            parser.error(f"--template {args.template} exists; it is never overwritten")
    # Items that place arrays on a mesh need the course's virtual CPU devices, set before
    # JAX starts its backend.
    runtime.use_cpu_devices()
    if args.command == "paper":
        print_paper(args.path, args.seed)
        if args.template is not None:
            blank = sheets.template(args.path, args.seed, args.learner)
            args.template.write_text(json.dumps(blank, indent=2) + "\n", encoding="utf-8")
            print(f"wrote {args.template}: fill in the answers, then run grade")
        return 0
    if args.command == "grade":
        return grade_sheets(args)
    return print_progress(args)


if __name__ == "__main__":
    runtime.use_cpu_without_tpu()  # a host without a TPU: the CPU backend, libtpu quiet
    sys.exit(main())
