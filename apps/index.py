import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="jax-tpu-lab: course home")

with app.setup:
    import html

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab

    PATH_CHOICES = ("All phases",) + tuple(p.title for p in curriculum.LEARNING_PATHS)
    FLAGS = lab.Flags(
        lab.Flag("path", "All phases", "learning path to show", choices=PATH_CHOICES),
        lab.Flag("only_present", False, "list only lessons whose app exists"),
        description="The jax-tpu-lab course home: phases, lessons, capstones and tracks.",
    )
    ARGS = FLAGS.parse()


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
    summary = pd.DataFrame(
        curriculum.summary_rows(), columns=["phase", "present", "lessons"]
    )
    summary["missing"] = summary["lessons"] - summary["present"]
    return course, summary


@app.cell
def _(course, only_present, path):
    def lesson_item(lesson: dict) -> str:
        title = html.escape(lesson["title"])
        if lesson["status"] == "present":
            file_name = lesson["app"].removeprefix("apps/")
            return f'<li>✅ <a href="/?file={file_name}" target="_blank" data-lesson="{file_name}">{title}</a> <code>{lesson["app"]}</code></li>'
        return f"<li>⬜ {title} <code>{lesson['app']}</code> <em>(missing)</em></li>"

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
        _items = "".join(lesson_item(les) for les in _shown) or "<li><em>no lesson apps yet</em></li>"
        _blocks.append(
            f'<section data-phase="{html.escape(_title)}"><h3>{phase_number[_title]}. '
            f"{html.escape(_title)} <small>({_count}/{len(_all)})</small>"
            f"</h3><ul>{_items}</ul></section>"
        )
    mo.vstack([mo.md(f"## Phases: {html.escape(path.value)}"), mo.Html("".join(_blocks))])
    return (shown_titles,)


@app.cell
def _(summary):
    long_form = summary.melt(id_vars="phase", value_vars=["present", "missing"], var_name="status", value_name="count")
    phase_order = list(summary["phase"])
    progress_chart = (
        alt.Chart(long_form, title="Lesson apps per phase")
        .mark_bar()
        .encode(
            y=alt.Y("phase:N", sort=phase_order, title=None),
            x=alt.X("count:Q", title="lessons"),
            color=alt.Color("status:N", scale=alt.Scale(domain=["present", "missing"], range=["#2e7d32", "#cfd8dc"])),
            tooltip=["phase", "status", "count"],
        )
    )
    totals = f"**{int(summary['present'].sum())} of {int(summary['lessons'].sum())} lessons** have an app."
    mo.vstack([mo.md(totals), progress_chart])
    return


@app.cell
def _():
    _capstones = []
    for _capstone in curriculum.CAPSTONES:
        _link = (
            f'<a href="/?file={_capstone.slug}.py" target="_blank">{html.escape(_capstone.title)}</a>'
            if curriculum.status(_capstone.slug) == "present"
            else f"{html.escape(_capstone.title)} <em>(app {_capstone.app} missing)</em>"
        )
        _points = "".join(f"<li>{html.escape(point)}</li>" for point in _capstone.points)
        _capstones.append(f"<h3>{_link}</h3><p>{html.escape(_capstone.summary)}</p><ul>{_points}</ul>")
    _tracks = []
    for _track in curriculum.TRACKS:
        _built = [s for s in _track.slugs if curriculum.status(s) == "present"]
        _links = ", ".join(f'<a href="/?file={s}.py" target="_blank">{s}</a>' for s in _built)
        _state = _links if _built else "<em>not built yet</em>"
        _tracks.append(f"<li><strong>{html.escape(_track.title)}</strong>: {html.escape(_track.summary)} {_state}</li>")
    mo.vstack(
        [
            mo.md("## Capstones"),
            mo.Html("".join(_capstones)),
            mo.md("## Tracks"),
            mo.Html(f"<ul>{''.join(_tracks)}</ul>"),
        ]
    )
    return


@app.cell
def _(summary):
    # Independent reference: walk apps/ on disk and count lesson files directly.
    files_on_disk = {p.stem for p in curriculum.APPS_DIR.glob("*.py")}
    lesson_slugs = [lesson.slug for lesson in curriculum.all_lessons()]
    present_on_disk = sum(slug in files_on_disk for slug in lesson_slugs)
    unnamed = curriculum.unnamed_apps()
    check_passed = present_on_disk == int(summary["present"].sum()) and not unnamed
    lab.check_badge(
        check_passed,
        f"{present_on_disk} lesson apps on disk = {int(summary['present'].sum())} marked present; "
        f"apps the map does not name: {unnamed or 'none'}",
    )
    return (check_passed,)


@app.cell
def test_home_agrees_with_disk(check_passed):
    assert check_passed
    return


@app.cell
def test_every_phase_is_listed_under_all_phases(path, shown_titles):
    if path.value == "All phases":
        assert shown_titles == [p.title for p in curriculum.PHASES]
    assert len(curriculum.PHASES) == 19
    return


if __name__ == "__main__":
    app.run()
