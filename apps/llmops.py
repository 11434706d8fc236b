import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="LLMOps: version prompts, evaluate behavior and trace requests",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims, text
    from core.lessons.operations import llmops as lesson

    lab.use_cpu_devices()
    # candidate templates: the training format, near misses, and one too long for the model
    CANDIDATES = ("rep: {pattern}", "rep:{pattern}", "Rep: {pattern}", "{pattern}",
                  "continue the pattern: {pattern}")  # fmt: skip
    FLAGS = lab.Flags(
        lab.Flag("candidate", "rep: {pattern}", "candidate prompt template",
                 choices=CANDIDATES),
        lab.Flag("train_steps", 150, "training steps of the byte LM", lo=20, hi=600),
        lab.Flag("cases", 16, "evaluation cases per prompt version", lo=4, hi=64),
        lab.Flag("requests", 3, "traced requests to the model service", lo=1, hi=16),
        lab.Flag("max_new_tokens", 4, "new tokens per traced request", lo=1, hi=16),
        lab.Flag("min_exact_match", 0.9, "promotion: least exact-match share", lo=0.0, hi=1.0,
                 step=0.05),
        lab.Flag("seed", 0, "seed (weights, data, cases)", lo=0, hi=99),
        description="A prompt registry, an evaluation suite per version, request traces.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    PROMPT = "pattern"  # the registry's prompt name
    BARE = "{pattern}"  # version 1: the task without the training format


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # LLMOps: version prompts, evaluate behavior and trace requests
    {lab.phase_line("llmops")}

    A prompt is part of the model's interface: changing it changes behaviour, so it gets the
    same treatment as code and weights. In this lesson you will

    - keep prompts in a **registry**: every version content-hashed (sha256), stored as a
      validated JSON document written atomically, with aliases (*production*, *candidate*)
      and a diff between any two versions;
    - run an **evaluation suite** per version on the course's byte LM (trained here in a few
      seconds on a "repeat the pattern" language): the held-out loss of the filled prompts
      and a behavioural task, continuing a pattern shown twice; a version is promoted only
      if it passes;
    - **trace requests** through the model service (`core.serving.byte_lm` on 127.0.0.1) with
      OpenTelemetry spans, request -> tokenize -> prefill -> decode ... -> detokenize, each
      trace's id returned in `X-Trace-ID` beside the request id, shown as a timeline and
      checked against the server's own access log.
    """)
    return


@app.cell
def _():
    candidate = FLAGS.control("candidate", ARGS)
    train_steps = FLAGS.control("train_steps", ARGS)
    cases = FLAGS.control("cases", ARGS)
    requests = FLAGS.control("requests", ARGS)
    max_new_tokens = FLAGS.control("max_new_tokens", ARGS)
    min_exact_match = FLAGS.control("min_exact_match", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack([
        mo.hstack([candidate, min_exact_match], justify="start", wrap=True),
        mo.hstack([train_steps, cases, seed], justify="start", wrap=True),
        mo.hstack([requests, max_new_tokens], justify="start", wrap=True),
    ])  # fmt: skip
    return candidate, cases, max_new_tokens, min_exact_match, requests, seed, train_steps


@app.cell
def _(candidate):
    _problem = None
    try:
        lesson.check_template(candidate.value)
    except ValueError as _exc:
        _problem = f"{_exc}."
    lab.guard(_problem, headline="This prompt template cannot be registered.")
    registry_dir = tempfile.TemporaryDirectory(prefix="llmops-prompts-")
    registry = lesson.Registry(registry_dir.name)
    v_bare = registry.register(PROMPT, BARE, "the task alone")
    registry.set_alias(PROMPT, "production", v_bare.version)
    v_candidate = registry.register(PROMPT, candidate.value, "the candidate")
    registry.set_alias(PROMPT, "candidate", v_candidate.version)
    _aliases = registry.aliases(PROMPT)
    mo.vstack([
        lab.table(
            [{"version": v.version, "template": v.template, "sha256": v.sha256[:16] + "...",
              "aliases": ", ".join(a for a, n in _aliases.items() if n == v.version) or "-",
              "note": v.note} for v in registry.versions(PROMPT)],
            f"Prompt registry: {PROMPT} (one JSON document per version)",
        ),
        text.code_block(
            registry.diff(PROMPT, "production", "candidate") or "(same)", "diff", "prompt.diff"
        ),
    ])  # fmt: skip
    return registry, registry_dir, v_bare, v_candidate


@app.cell
def _(seed, train_steps):
    with mo.status.spinner(f"Training the byte LM ({train_steps.value} steps)"):
        model, history = lesson.train(train_steps.value, seed.value)
    lab.report("final training loss", history[-1]["train loss"], "nats/byte")
    return history, model


@app.cell
def _(cases, min_exact_match, model, seed, v_bare, v_candidate):
    evals = {
        v.version: lesson.evaluate(model, v.template, v.version, cases.value, seed.value)
        for v in (v_bare, v_candidate)
    }
    promote = evals[v_candidate.version].exact_match >= min_exact_match.value
    lab.report("candidate exact match", evals[v_candidate.version].exact_match)
    lab.report("promote the candidate", promote)
    mo.vstack([
        lab.table(
            [{"version": n, "template": t, "held-out loss (nats/byte)": e.heldout_loss,
              "exact match": e.exact_match}
             for n, t, e in ((v.version, v.template, evals[v.version])
                             for v in (v_bare, v_candidate))],
            f"Evaluation suite: {cases.value} held-out patterns per version",
        ),
        lab.table(evals[v_candidate.version].samples[:6],
                  "The candidate's completions (first 6 cases)"),
        mo.md(f"**Promotion gate**: the candidate's exact match "
              f"{evals[v_candidate.version].exact_match:.0%} against at least "
              f"{min_exact_match.value:.0%}: "
              + ("**promote** it to production." if promote else "**keep** the production "
                 "version.")),
    ])  # fmt: skip
    return evals, promote


@app.cell
def _(max_new_tokens, model, requests, seed, v_candidate):
    lab.require(
        "opentelemetry.sdk",
        sockets=True,
        why="the model is served on 127.0.0.1 and its requests traced (OpenTelemetry's SDK)",
    )
    _patterns = lesson.patterns(requests.value, 7 + seed.value)
    traced = lesson.serve_and_trace(
        model, [v_candidate.template.replace(lesson.SLOT, p * 2) for p in _patterns],
        max_new_tokens.value,
    )  # fmt: skip
    trace_check = lesson.trace_problems(traced, max_new_tokens.value)
    lab.table(
        [{**r, "access log (ms)": next((a["ms"] for a in traced.access_log
                                        if a["id"] == r["request_id"]), None)}
         for r in traced.responses],
        "Requests to the model service (127.0.0.1, stopped after the last)",
    )  # fmt: skip
    return trace_check, traced


@app.cell
def _(evals, trace_check):
    check = lab.Check(
        "held-out loss per prompt version (float32, jit) equals a NumPy float64 cross-entropy "
        "of the model's logits; every trace's spans nest inside its request and agree with the "
        "access log",
        {
            **{
                f"held-out loss v{n}": numerics.scaled_max_error(
                    e.heldout_loss, lesson.numpy_loss(e.heldout_logits, e.heldout_batch)
                )
                for n, e in evals.items()
            },
            "access log beyond the request span (ms)": trace_check["log_excess_ms"],
        },
        {**{f"held-out loss v{n}": numerics.tolerance("float32") for n in evals},
         "access log beyond the request span (ms)": 0.0},
        facts={"trace structure: " + (p or "ok"): False for p in trace_check["problems"]}
        or {"every trace: request -> tokenize, prefill, decode x (n-1), detokenize": True},
    )  # fmt: skip
    check
    return (check,)


@app.cell
def _(traced):
    _rows = pd.DataFrame(lesson.timeline(traced.spans))
    alt.Chart(_rows).mark_bar().encode(
        x=alt.X("start_ms:Q", title="ms since the first span"),
        x2="end_ms:Q",
        y=alt.Y("request:N", title="request id"),
        color=alt.Color("span:N", title="span"),
        tooltip=["request", "span", alt.Tooltip("ms:Q", format=".2f")],
    ).properties(title="Request traces (OpenTelemetry spans)", width=600, height=140)
    return


@app.cell
def _(history):
    alt.Chart(pd.DataFrame(history)).mark_line().encode(
        x="step:Q", y=alt.Y("train loss:Q", title="training loss (nats/byte)")
    ).properties(title="Training the byte LM", width=600, height=160)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("llmops")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()


@app.cell
def test_candidate_is_promoted_at_defaults(
    cases, candidate, max_new_tokens, min_exact_match, promote, requests, seed, train_steps
):  # fmt: skip
    _values = {
        "candidate": candidate.value, "train_steps": train_steps.value, "cases": cases.value,
        "requests": requests.value, "max_new_tokens": max_new_tokens.value,
        "min_exact_match": min_exact_match.value, "seed": seed.value,
    }  # fmt: skip
    if claims.at_defaults(FLAGS, _values):
        assert promote


if __name__ == "__main__":
    app.run()
