import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Synthesis assessment: Make it fast. Make it scale.")

with app.setup:
    import pathlib

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab
    from core.assessment import paper, sheets, view

    ASSESSMENT = curriculum.assessment_for("Make it fast. Make it scale.")
    PAPER = paper.paper(ASSESSMENT.paper)
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "your learner seed: it draws this paper's numbers", lo=0, hi=2**31 - 1),
        lab.Flag("answers", "", "an answers file to grade (python -m core.assessment paper ...)"),
        lab.Flag("progress_dir", str(sheets.WORKSPACE), "where your progress is saved"),
        description=f"{ASSESSMENT.title}: one item per phase, graded by code.",
    )
    ARGS = FLAGS.parse()
    lab.use_cpu_devices()  # items that place arrays on a mesh need the course's 8 CPU devices


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # {ASSESSMENT.title}
    *Synthesis assessment · {len(PAPER.item_ids)} items over the
    {len(PAPER.path.phase_titles)} phases of the path, in path order*

    Prove what the path taught. Each item draws its numbers from **your learner seed**, so
    two learners get different numbers and a copied answer fails. Three kinds of item:

    - **predict, then check**: commit a number; only then does the app compute it live with
      the course's library and show the derivation (the tolerance is stated beside it);
    - **diagnose**: a short program with a defect planted from the course; name it, then see
      the evidence (the program and its fixed version, run);
    - **code exercise**: complete the stub; hidden tests from `core/` grade it; the reference
      solution appears only after your attempt.

    Progress is saved in your workspace (`{view.shown_path(pathlib.Path(ARGS.progress_dir))}/`)
    and shown on the course home with the lesson to revisit for each miss. Before this,
    read the portfolio guide of the capstone (`docs/portfolio/{ASSESSMENT.capstone}.md`).
    Grade a sheet headless: `python -m core.assessment grade --path {PAPER.slug} --answers FILE`.
    """)
    return


@app.cell
def _():
    seed_control = mo.ui.number(
        start=0, stop=2**31 - 1, step=1, value=int(ARGS.seed), label="learner seed"
    )
    seed_control
    return (seed_control,)


@app.cell
def _(seed_control):
    seed = int(seed_control.value)
    progress_root = pathlib.Path(ARGS.progress_dir)
    sheet, sheet_problem = None, None
    if ARGS.answers:
        try:
            sheet = sheets.load_sheet(pathlib.Path(ARGS.answers), expected_path=PAPER.slug)
            seed = sheet.seed  # the sheet says whose paper it answers
        except sheets.SheetError as error:
            sheet_problem = f"answers file {ARGS.answers}: {error}"
    try:
        progress_before = sheets.load_progress(PAPER.slug, seed, progress_root)
        progress_problem = None
    except sheets.SheetError as error:
        progress_before = sheets.Progress(paper=PAPER.slug, seed=seed)
        progress_problem = f"{error}. Move it aside; it is never overwritten."
    lab.guard(sheet_problem or progress_problem, headline="The assessment cannot use a file.")
    questions = {item.id: item.question(seed) for item in PAPER.items}
    return progress_before, progress_root, questions, seed, sheet


@app.cell
def _(progress_before, questions):
    def entry(number, item):
        question = questions[item.id]
        last = progress_before.items.get(item.id)
        last_answer = last.last_answer if last is not None else None
        if item.kind == "code":
            element = mo.ui.code_editor(
                value=last_answer if isinstance(last_answer, str) else question.stub,
                language="python",
                min_height=200,
            )
        elif item.kind == "diagnose":
            element = mo.ui.radio(options={text: choice for choice, text in question.choices})
        else:
            element = mo.ui.text(
                placeholder=f"item {number}: {question.answer_hint}", full_width=True
            )
        return element.form(submit_button_label="Commit answer", bordered=False)

    forms = mo.ui.dictionary(
        {item.id: entry(number, item) for number, item in enumerate(PAPER.items, start=1)}
    )
    return (forms,)


@app.cell
def _(forms, progress_before, seed, sheet):
    # What is graded: the sheet's answers headless (or a served app given --answers), else
    # the forms' committed values. Nothing is computed for an item before its answer.
    if sheet is not None:
        entered = dict(sheet.answers)
        entry_problems = {}
    else:
        entered, entry_problems = {}, {}
        for item in PAPER.items:
            answer, problem = view.parse_entry(item, forms.value.get(item.id))
            entered[item.id] = answer
            if problem:
                entry_problems[item.id] = problem
    report = paper.grade(PAPER.slug, seed, entered)
    progress = sheets.recorded(progress_before, report)
    return entry_problems, progress, report


@app.cell
def _(progress, progress_before, progress_root):
    saved_to = None
    if progress.items != progress_before.items:  # a new answer: record it atomically
        saved_to = sheets.save_progress(progress, progress_root)
    return (saved_to,)


@app.cell
def _(entry_problems, forms, questions, report):
    _sections = []
    for _number, _result in enumerate(report.results, start=1):
        _item = _result.item
        _parts = [mo.md(view.question_markdown(_number, _item, questions[_item.id]))]
        _parts.append(forms[_item.id])
        if _item.id in entry_problems:
            _parts.append(mo.callout(mo.md(entry_problems[_item.id]), kind="warn"))
        if _result.attempted:
            _parts.append(
                mo.callout(
                    mo.md(view.feedback_markdown(_result)),
                    kind="success" if _result.passed else "danger",
                )
            )
        _sections.append(mo.vstack(_parts))
    mo.vstack(_sections, gap=2)
    return


@app.cell
def _(progress, report, saved_to):
    attempts = {i: r.attempts for i, r in progress.items.items()}
    rows = view.score_rows(report, attempts)
    score_frame = pd.DataFrame(rows)
    score_chart = (
        alt.Chart(score_frame, title="Items per phase, by verdict")
        .mark_bar()
        .encode(
            y=alt.Y(
                "phase:N",
                sort=list(PAPER.path.phase_titles),
                title=None,
                axis=alt.Axis(labelLimit=0),
            ),
            x=alt.X("count():Q", title="items", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color(
                "verdict:N",
                scale=alt.Scale(
                    domain=["passed", "failed", "not yet"], range=["#2e7d32", "#c62828", "#cfd8dc"]
                ),
            ),
            tooltip=["phase", "item", "verdict", "attempts"],
        )
        .properties(width=360)
    )
    lab.report("score (passed / items)", report.score)
    if lab.mode() == "script":  # headless: the grader's score line, for scripts that read it
        print(view.score_line(report))
    _where = f"Progress saved: `{saved_to}`." if saved_to else "No new answer to save."
    mo.vstack(
        [
            mo.md(f"## Your score\n\n**{view.score_line(report)}**. {_where}"),
            lab.table(rows),
            score_chart,
        ]
    )
    return (score_chart,)


@app.cell
def _(seed):
    # The paper's own check at this seed: every expected answer the library computes live
    # agrees with its independent closed-form derivation, every planted defect changes what
    # its program computes, and every code exercise's reference passes its hidden tests while
    # the stub fails them.
    _errors, _facts = {}, {}
    for _item in PAPER.items:
        _own = _item.self_check(seed)
        _errors |= _own.errors
        _facts |= _own.facts
    check = lab.Check(
        f"seed {seed}: live answers = their derivations; defects show; references pass",
        _errors,
        1e-6,
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def test_paper_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_one_item_per_phase_in_path_order(report):
    phases = [r.item.phase for r in report.results]
    assert set(PAPER.path.phase_titles) <= set(phases)
    order = [PAPER.path.phase_titles.index(p) for p in phases]
    assert order == sorted(order)
    return


@app.cell
def test_nothing_graded_without_an_answer(report, sheet):
    if sheet is None and not lab.interactive():
        assert report.attempted == 0 and all(r.feedback is None for r in report.results)
    return


@app.cell
def test_chart_shows_whole_phase_titles(score_chart):
    assert score_chart.to_dict()["encoding"]["y"]["axis"]["labelLimit"] == 0
    return


if __name__ == "__main__":
    app.run()
