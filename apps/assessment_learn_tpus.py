import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Synthesis assessment: Learn TPUs and Google Cloud")

with app.setup:
    import pathlib

    import marimo as mo

    from core import curriculum, lab
    from core.assessment import paper, sheets, view
    from core.lab import assessment

    lab.use_cpu_devices()  # items that place arrays on a mesh need the course's 8 CPU devices
    ASSESSMENT = curriculum.assessment_for("Learn TPUs and Google Cloud")
    PAPER = paper.paper(ASSESSMENT.paper)
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "your learner seed: it draws this paper's numbers", lo=0, hi=2**31 - 1),
        lab.Flag("answers", "", "an answers file to grade (python -m core.assessment paper ...)"),
        lab.Flag("progress_dir", str(sheets.WORKSPACE), "where your progress is saved"),
        description=f"{ASSESSMENT.title}: one item per phase or more, graded by code.",
    )
    ARGS = FLAGS.parse()


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
    opened = assessment.open_paper(
        PAPER, int(seed_control.value), ARGS.answers, ARGS.progress_dir,
        seed_chosen=int(seed_control.value) != FLAGS.flags["seed"].default,
    )  # fmt: skip
    lab.guard(opened.problem, headline="The assessment cannot use a file.")
    lab.report("graded seed", opened.seed)  # a sheet's seed may differ from --seed's default
    mo.callout(mo.md(opened.seed_note), kind="info") if opened.sheet is not None else None
    return (opened,)


@app.cell
def _(opened):
    forms = assessment.answer_forms(PAPER, opened)
    return (forms,)


@app.cell
def _(forms, opened):
    report, entry_problems, progress, changed = assessment.grade_committed(
        PAPER, opened, forms.value
    )
    return changed, entry_problems, progress, report


@app.cell
def _(changed, opened, progress):
    saved_to = None
    if changed:  # a new answer: record it atomically
        saved_to = sheets.save_progress(progress, opened.progress_dir)
    return (saved_to,)


@app.cell
def _(entry_problems, forms, opened, report):
    assessment.paper_view(report, forms, opened.questions, entry_problems)
    return


@app.cell
def _(progress, report, saved_to):
    rows = view.score_rows(report, {i: r.attempts for i, r in progress.items.items()})
    score_chart = assessment.score_chart(rows, PAPER.path.phase_titles)
    lab.report("score (passed / items)", report.score)
    if lab.mode() == "script":  # headless: the grader's score line, for scripts that read it
        print(view.score_line(report))
    _saved = f"Progress saved: `{saved_to}`." if saved_to else "No new answer to save."
    mo.vstack(
        [
            mo.md(f"## Your score\n\n**{view.score_line(report)}**. {_saved}"),
            lab.table(rows),
            score_chart,
        ]
    )
    return (score_chart,)


@app.cell
def _(opened):
    _errors, _facts = assessment.paper_self_check(PAPER, opened.seed)
    check = lab.Check(assessment.self_check_what(opened.seed), _errors, 1e-6, facts=_facts)
    mo.vstack([mo.md(f"## {assessment.SELF_CHECK_HEADING}"), check])
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
def test_nothing_graded_without_an_answer(opened, report):
    if opened.sheet is None and not lab.interactive():
        assert report.attempted == 0 and all(r.feedback is None for r in report.results)
    return


@app.cell
def test_chart_shows_whole_phase_titles(score_chart):
    assert score_chart.to_dict()["encoding"]["y"]["axis"]["labelLimit"] == 0
    return


if __name__ == "__main__":
    app.run()
