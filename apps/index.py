import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="jax-tpu-lab: course home")

with app.setup:
    import html
    import pathlib

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.assessment import sheets, view
    from core.exercises import progress as exercise_progress
    from core.state import artifacts

    PATH_CHOICES = ("All phases",) + tuple(p.title for p in curriculum.LEARNING_PATHS)
    FLAGS = lab.Flags(
        lab.Flag("path", "All phases", "learning path to show", choices=PATH_CHOICES),
        lab.Flag("only_present", False, "list only lessons whose app exists"),
        lab.Flag(
            "progress_dir",
            str(sheets.WORKSPACE),
            "where the exercises and assessments save progress",
        ),
        description="The jax-tpu-lab course home: phases, lessons, capstones and tracks.",
    )
    ARGS = FLAGS.parse()
    # The home's own look, scoped to .course-home: raw HTML gets none of marimo's prose styles.
    # Links look like links, phase titles like headings, and a lesson's state is a text badge
    # (an emoji renders as an empty box where no emoji font is installed).
    HOME_CSS = """<style>
    .course-home h3 { font-size: 1.2rem; font-weight: 600; margin: 1.4rem 0 0.4rem; }
    .course-home h3 .count { font-size: 0.8rem; font-weight: 400; color: var(--slate-11, #5f6b7a); }
    .course-home ul { list-style: disc; padding-left: 1.4rem; margin: 0.2rem 0; }
    .course-home section ul { list-style: none; padding-left: 0.2rem; }
    .course-home li { margin: 0.25rem 0; }
    .course-home a { color: var(--blue-11, #1a5fb4); text-decoration: underline;
                     text-underline-offset: 2px; }
    .course-home a:hover { text-decoration-thickness: 2px; }
    .course-home code { font-size: 0.8rem; color: var(--slate-11, #5f6b7a); }
    .course-home .badge { display: inline-block; min-width: 4.2rem; margin-right: 0.4rem;
                          padding: 0 0.4rem; border: 1px solid; border-radius: 0.6rem;
                          font-size: 0.7rem; font-weight: 600; text-align: center;
                          text-transform: uppercase; letter-spacing: 0.03em; }
    .course-home .badge.built { color: #1b5e20; background: #e8f5e9; border-color: #81c784; }
    .course-home .badge.planned { color: #455a64; background: #eceff1; border-color: #b0bec5; }
    .course-home .exercises { font-size: 0.75rem; margin-left: 0.4rem; color: #5f3dc4; }
    .course-home .exercises[data-done="true"] { color: #1b5e20; font-weight: 600; }
    .course-home .badge.changed { color: #b71c1c; background: #ffebee; border-color: #e57373; }
    .course-home .tpu { display: block; margin-left: 5rem; font-size: 0.75rem;
                        color: var(--slate-11, #5f6b7a); }
    .course-home .tpu[data-tpu="passed"] { color: #1b5e20; }
    </style>"""
    STATUS_WORD = {"present": "built", "missing": "planned"}  # curriculum status -> badge
    # What "start again" moves aside -> whether the assessments' progress goes too
    RESET_SCOPES = {
        "the lesson exercises": False,
        "the lesson exercises and both assessments": True,
    }


@app.cell(hide_code=True)
def _():
    mo.md("""
    # jax-tpu-lab
    **Learn JAX on Cloud TPUs, one reactive lesson at a time.**

    Every lesson is a marimo app with live controls (shapes, precision, mesh size, seed), a
    check against an independent reference, and charts. Open a lesson below; each runs
    in its own process with 8 virtual CPU devices, and the same app runs headless on a TPU VM
    (`python -m tpu_scripts export apps/NAME.py -o NAME_tpu.py`).
    """)
    return


@app.cell
def _():
    path = FLAGS.control("path", ARGS, label="learning path")
    only_present = FLAGS.control("only_present", ARGS, label="only lessons with an app")
    mo.hstack([path, only_present], justify="start")
    return only_present, path


@app.cell
def _():
    course = curriculum.course_map()
    summary = pd.DataFrame(curriculum.summary_rows(), columns=["phase", "present", "lessons"])
    summary["missing"] = summary["lessons"] - summary["present"]
    return course, summary


@app.cell
def _(course, exercise_state, only_present, path):
    def lesson_item(lesson: dict) -> str:
        title = html.escape(lesson["title"])
        word = STATUS_WORD[lesson["status"]]
        badge = f'<span class="badge {word}">{word}</span>'
        if lesson["status"] == "present":
            file_name = lesson["app"].removeprefix("apps/")
            link = (
                f'<a href="/?file={file_name}" target="_blank" data-lesson="{file_name}">'
                f"{title}</a>"
            )
            return (
                f'<li data-status="{word}">{badge}{link} <code>{lesson["app"]}</code>'
                f"{exercise_mark(lesson)}{twins(lesson)}{tpu_line(lesson)}</li>"
            )
        return f'<li data-status="{word}">{badge}{title} <code>{lesson["app"]}</code></li>'

    def exercise_mark(lesson: dict) -> str:
        """' 1 of 2 exercises passed' for a lesson that asks exercises, else nothing."""
        slug = lesson["app"].removeprefix("apps/").removesuffix(".py")
        state = exercise_state.get(slug)
        if state is None:
            return ""
        return (
            f'<span class="exercises" data-exercises="{slug}" data-done="{str(state.done).lower()}"'
            f">{html.escape(state.label())}</span>"
        )

    def tpu_line(lesson: dict) -> str:
        """The lesson's line from the newest TPU course record (or "not yet run on a TPU")."""
        tpu = lesson["tpu"]
        state = tpu["status"] if tpu else "none"
        text = tpu["line"] if tpu else curriculum.tpu_record.NOT_YET
        where = f' title="{html.escape(tpu["record"])}"' if tpu else ""
        return f'<span class="tpu" data-tpu="{state}"{where}>TPU: {html.escape(text)}</span>'

    def twins(lesson: dict) -> str:
        """' · Keras multi-backend track: keras_x' for each built track app mirroring it."""
        slug = lesson["app"].removeprefix("apps/").removesuffix(".py")
        found = [
            f' · {html.escape(_track.title)}: <a href="/?file={_twin}.py" target="_blank" '
            f'data-twin="{_twin}.py">{_twin}</a>'
            for _track, _twin in curriculum.track_twins(slug)
            if curriculum.status(_twin) == "present"
        ]
        return "".join(found)

    shown_titles = (
        [p.title for p in curriculum.PHASES]
        if path.value == "All phases"
        else next(p.phase_titles for p in curriculum.LEARNING_PATHS if p.title == path.value)
    )
    by_title = {entry["phase"]: entry for entry in course}
    phase_number = {p.title: i for i, p in enumerate(curriculum.PHASES, start=1)}
    _blocks = []
    for _title in shown_titles:
        _all = by_title[_title]["lessons"]
        _shown = [les for les in _all if les["status"] == "present" or not only_present.value]
        _count = sum(les["status"] == "present" for les in _all)
        _items = (
            "".join(lesson_item(les) for les in _shown) or "<li><em>no lesson apps yet</em></li>"
        )
        _passed, _asked = exercise_progress.totals(
            exercise_state, exercise_progress.phase_lessons(_title)
        )
        _practice = f" · exercises {_passed} of {_asked} passed" if _asked else ""
        _blocks.append(
            f'<section data-phase="{html.escape(_title)}"><h3>{phase_number[_title]}. '
            f'{html.escape(_title)} <span class="count">{_count} of {len(_all)} built'
            f"{_practice}</span></h3><ul>{_items}</ul></section>"
        )
    _lessons = [les for _title in shown_titles for les in by_title[_title]["lessons"]]
    _built = sum(les["status"] == "present" for les in _lessons)
    # The filter says what it did, also when it hides nothing (every lesson built).
    _filter = (
        f" (only lessons with an app: {_built} of {len(_lessons)}, "
        f"{len(_lessons) - _built} planned hidden)"
        if only_present.value
        else ""
    )
    mo.vstack(
        [
            mo.md(f"## Phases: {html.escape(path.value)}{_filter}"),
            mo.Html(HOME_CSS + f'<div class="course-home">{"".join(_blocks)}</div>'),
        ]
    )
    return (shown_titles,)


@app.cell
def _(path):
    def artifact_item(artifact) -> tuple[str, object]:
        found = artifacts.latest(artifact.name)
        if found is None:
            state = '<span class="badge planned">not yet</span>'
            where = "no copy here yet: run the command"
        elif found.verified:
            state = '<span class="badge built">verified</span>'
            where = (
                f"{html.escape(found.label)}, {html.escape(found.created_utc)}: "
                f"<code>{html.escape(str(found.markdown_path.relative_to(curriculum.REPO_ROOT)))}"
                "</code>"
            )
        else:
            state = '<span class="badge changed">changed</span>'
            where = f"refused: {html.escape(found.problem)}"
        item = (
            f'<li data-artifact="{artifact.name}">{state}<strong>{html.escape(artifact.title)}'
            f"</strong>: {html.escape(artifact.what)}.<br><code>{artifact.command}</code>"
            f"<br>{where}</li>"
        )
        report = found.markdown_path if found is not None and found.verified else None
        return item, report

    shown_paths = [p for p in curriculum.LEARNING_PATHS if path.value in ("All phases", p.title)]
    _blocks, _reports = [], {}
    for _path in shown_paths:
        _items = []
        for _artifact in artifacts.for_path(_path.title):
            _item, _report = artifact_item(_artifact)
            _items.append(_item)
            if _report is not None and _report.is_file():
                _reports[_artifact.title] = mo.md(_report.read_text(encoding="utf-8"))
        _blocks.append(
            f'<section data-path="{html.escape(_path.title)}"><h3>{html.escape(_path.title)}'
            f"</h3><p>{html.escape(_path.audience)}</p><p>Your first artifacts: files you keep, "
            "each a JSON document with its sha256 and a Markdown report, labelled "
            "<em>TPU RESULT</em> only when made on a TPU (otherwise <em>CPU REHEARSAL</em>)."
            f"</p><ul>{''.join(_items)}</ul></section>"
        )
    mo.vstack(
        [
            mo.md("## Learning paths: first artifacts"),
            mo.Html(HOME_CSS + f'<div class="course-home">{"".join(_blocks)}</div>'),
            mo.accordion(_reports) if _reports else mo.md(""),
            mo.md(
                "Check a kept file: `python -m tpu_scripts artifact verify "
                "runs/artifacts/NAME/TIME/NAME.json` (refuses a changed one)."
            ),
        ]
    )
    return (shown_paths,)


@app.cell
def _(exercise_state, path):
    _blocks, guides = [], {}
    for _path in curriculum.LEARNING_PATHS:
        if path.value not in ("All phases", _path.title):
            continue
        _assessment = curriculum.assessment_for(_path.title)
        _capstone = next(c for c in curriculum.CAPSTONES if c.slug == _assessment.capstone)
        _guide_file = _capstone.guide.relative_to(curriculum.REPO_ROOT)
        _app = (
            f'<a href="/?file={_assessment.slug}.py" target="_blank" '
            f'data-assessment="{_assessment.slug}">{html.escape(_assessment.title)}</a>'
            if curriculum.status(_assessment.slug) == "present"
            else f'<span class="badge planned">planned</span>{html.escape(_assessment.title)}'
        )
        _passed, _asked = exercise_progress.totals(
            exercise_state, exercise_progress.path_lessons(_path.title)
        )
        _blocks.append(
            f'<section data-path="{html.escape(_path.title)}"><h3>{html.escape(_path.title)}'
            f'</h3><p data-path-exercises="{_passed}/{_asked}">Lesson exercises on this path: '
            f"<strong>{_passed} of {_asked} passed</strong>.</p>"
            f"<p>1. Read the portfolio project guide of <em>{html.escape(_capstone.title)}"
            f"</em> (below, and in the capstone app): <code>{_guide_file}"
            f"</code>.</p><p>2. Work through the synthesis assessment: {_app} "
            f"<code>{_assessment.app}</code>; graded headless with <code>python -m "
            f"core.assessment grade --path {_assessment.paper} --answers FILE</code>.</p>"
            f"{view.progress_html(_assessment.paper, pathlib.Path(ARGS.progress_dir))}</section>"
        )
        if _capstone.guide.is_file():
            guides[f"Portfolio guide: {_capstone.title}"] = mo.md(
                curriculum.portfolio_guide(_capstone.slug)
            )
    mo.vstack(
        [
            mo.md("## Finish a path: portfolio guide and synthesis assessment"),
            mo.Html(HOME_CSS + f'<div class="course-home">{"".join(_blocks)}</div>'),
            mo.accordion(guides) if guides else mo.md(""),
        ]
    )
    return (guides,)


@app.cell
def _():
    reset_scope = mo.ui.radio(
        options=list(RESET_SCOPES),
        value="the lesson exercises",
        label="start again with",
    )
    reset_confirm = mo.ui.switch(label="I want to start again")
    return reset_confirm, reset_scope


@app.cell
def _(reset_confirm, reset_scope):
    # Rebuilt when either moves: the label names what a press resets, and the button stays
    # disabled until the learner confirms.
    reset_button = mo.ui.run_button(
        label=f"Reset {reset_scope.value}", kind="warn", disabled=not reset_confirm.value
    )
    return (reset_button,)


@app.cell
def _(reset_button, reset_scope):
    _root = pathlib.Path(ARGS.progress_dir)
    reset_note = ""
    if reset_button.value:
        _moved_to, _moved = exercise_progress.reset(
            _root, include_assessments=RESET_SCOPES[reset_scope.value]
        )
        reset_note = (
            f"Moved {len(_moved)} progress folder(s) to `{_moved_to}`: move them back to undo."
            if _moved_to
            else "Nothing to reset: no progress saved yet."
        )
    # Read again after a reset; a served home reads the files when it opens.
    exercise_state = exercise_progress.course_progress(_root)
    return exercise_state, reset_note


@app.cell
def _(exercise_state, reset_button, reset_confirm, reset_note, reset_scope):
    _passed, _asked = exercise_progress.totals(exercise_state, exercise_state)
    _done = sum(state.done for state in exercise_state.values())
    mo.vstack(
        [
            mo.md(
                f"""
    ## Your progress
    Lesson exercises: **{_passed} of {_asked} passed**, {_done} of {len(exercise_state)}
    lessons done (read from `{ARGS.progress_dir}`, where each lesson saves what you commit).
    Starting again moves the saved files into a dated folder beside them; nothing is deleted.
    """
            ),
            mo.hstack([reset_scope, reset_confirm, reset_button], justify="start", wrap=True),
            mo.md(reset_note),
        ]
    )
    return


@app.cell
def _(summary):
    numbered = summary.assign(
        phase=[f"{i}. {title}" for i, title in enumerate(summary["phase"], start=1)],
        built=summary["present"],
        planned=summary["missing"],
    )
    long_form = numbered.melt(
        id_vars="phase", value_vars=["built", "planned"], var_name="status", value_name="count"
    )
    progress_chart = (
        alt.Chart(long_form, title="Lesson apps per phase")
        .mark_bar()
        .encode(
            # labelLimit=0: whole phase titles (Vega cuts labels at 180 px by default).
            y=alt.Y(
                "phase:N", sort=list(numbered["phase"]), title=None, axis=alt.Axis(labelLimit=0)
            ),
            x=alt.X("count:Q", title="lessons", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=["built", "planned"], range=["#2e7d32", "#cfd8dc"]),
            ),
            tooltip=["phase", "status", "count"],
        )
        .properties(width=360)
    )
    totals = (
        f"**{int(summary['present'].sum())} of {int(summary['lessons'].sum())} lessons** "
        "have an app."
    )
    mo.vstack([mo.md(totals), progress_chart])
    return (progress_chart,)


@app.cell
def _():
    _capstones = []
    for _capstone in curriculum.CAPSTONES:
        _link = (
            f'<a href="/?file={_capstone.slug}.py" target="_blank">'
            f"{html.escape(_capstone.title)}</a>"
            if curriculum.status(_capstone.slug) == "present"
            else '<span class="badge planned">planned</span>'
            f"{html.escape(_capstone.title)} <code>{_capstone.app}</code>"
        )
        _points = "".join(f"<li>{html.escape(point)}</li>" for point in _capstone.points)
        _capstones.append(
            f"<h3>{_link}</h3><p>{html.escape(_capstone.summary)}</p><ul>{_points}</ul>"
        )
    _tracks, track_states = [], {}
    _lessons = [lesson.slug for lesson in curriculum.all_lessons()]
    for _track in curriculum.TRACKS:
        _built = [s for s in _track.slugs if curriculum.status(s) == "present"]
        _links = ", ".join(
            f'<a href="/?file={s}.py" target="_blank">{s}</a>'
            + (f" (mirrors <code>{_track.mirrored_lesson(s)}</code>)" * bool(_track.mirrors))
            for s in _built
        )
        if not _track.slugs:  # a track of no apps of its own is the course's lessons above
            _count = sum(curriculum.status(s) == "present" for s in _lessons)
            _state = f"the lessons of the phases above: {_count} of {len(_lessons)} built"
        else:
            _state = _links if _built else '<span class="badge planned">planned</span>'
        track_states[_track.title] = _state
        _tracks.append(
            f"<li><strong>{html.escape(_track.title)}</strong>: "
            f"{html.escape(_track.summary)} {_state}</li>"
        )
    mo.vstack(
        [
            mo.md("## Capstones"),
            mo.Html(HOME_CSS + f'<div class="course-home">{"".join(_capstones)}</div>'),
            mo.md("## Tracks"),
            mo.Html(HOME_CSS + f'<div class="course-home"><ul>{"".join(_tracks)}</ul></div>'),
        ]
    )
    return (track_states,)


@app.cell
def _(summary):
    # Independent reference: walk apps/ on disk and count lesson files directly.
    files_on_disk = {p.stem for p in curriculum.APPS_DIR.glob("*.py")}
    lesson_slugs = [lesson.slug for lesson in curriculum.all_lessons()]
    present_on_disk = sum(slug in files_on_disk for slug in lesson_slugs)
    unnamed = curriculum.unnamed_apps()
    marked_present = int(summary["present"].sum())
    # A count, not a float computation: the error is how many apps the two counts differ by,
    # and none may.
    check = lab.Check(
        f"{present_on_disk} lesson apps on disk = {marked_present} marked present; "
        f"apps the map does not name: {unnamed or 'none'}",
        {
            "lesson apps: on disk vs marked present": numerics.max_abs_error(
                present_on_disk, marked_present
            )
        },
        0.0,
        facts={"the map names every app": not unnamed},
    )
    check
    return (check,)


@app.cell
def test_home_agrees_with_disk(check):
    check.assert_passed()
    return


@app.cell
def test_no_track_reads_planned_while_its_apps_are_built(track_states):
    # the JAX track read "planned" with all 91 lessons built (issue 36)
    for _track in curriculum.TRACKS:
        _apps = _track.slugs or tuple(lesson.slug for lesson in curriculum.all_lessons())
        if any(curriculum.status(s) == "present" for s in _apps):
            assert "planned" not in track_states[_track.title], _track.title
    return


@app.cell
def test_each_lessons_tpu_line_is_its_newest_record_entry(course):
    # Independently of core.curriculum.tpu_record: the kept records read with json alone,
    # oldest first, so each lesson ends at its newest entry.
    import json
    import os

    _root = pathlib.Path(
        os.environ.get("JAX_LAB_RECORDS_DIR") or curriculum.REPO_ROOT / "benchmarks/records"
    )
    _newest = {}
    for _file in sorted((_root / "tpu_course").glob("*.json")):
        _record = json.loads(_file.read_text(encoding="utf-8"))
        for _entry in _record["course"]["lessons"]:
            _newest[_entry["slug"]] = (_entry["status"], _record["date"])
    for _phase in course:
        for _lesson in _phase["lessons"]:
            _slug = _lesson["app"].removeprefix("apps/").removesuffix(".py")
            _shown = _lesson["tpu"] and (_lesson["tpu"]["status"], _lesson["tpu"]["date"])
            assert _shown == _newest.get(_slug), (_slug, _shown, _newest.get(_slug))
    return


@app.cell
def test_every_phase_is_listed_under_all_phases(path, shown_titles):
    if path.value == "All phases":
        assert shown_titles == [p.title for p in curriculum.PHASES]
    assert len(curriculum.PHASES) == 19
    return


@app.cell
def test_every_shown_path_lists_its_first_artifacts(path, shown_paths):
    if path.value == "All phases":
        assert [p.title for p in shown_paths] == [p.title for p in curriculum.LEARNING_PATHS]
    for learning_path in shown_paths:
        assert artifacts.for_path(learning_path.title), learning_path.title
    return


@app.cell
def test_every_shown_path_offers_its_guide(path, guides):
    shown = [p for p in curriculum.LEARNING_PATHS if path.value in ("All phases", p.title)]
    assert len(guides) == len(shown)
    return


@app.cell
def test_progress_chart_shows_whole_phase_titles(progress_chart):
    # Vega cuts axis labels at 180 px unless labelLimit is 0; phase titles run to ~350 px.
    assert progress_chart.to_dict()["encoding"]["y"]["axis"]["labelLimit"] == 0
    return


if __name__ == "__main__":
    app.run()
