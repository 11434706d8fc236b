import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Set up your learning workspace")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import text
    from core.lessons.setup import workspace

    CPU_DEVICES = lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("group", "all", "which package group to show", choices=workspace.GROUPS),
        lab.Flag("include_env", True, "include the JAX/XLA environment variables in the receipt"),
        description="Set up your learning workspace: an environment receipt, checked.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Set up your learning workspace
    {lab.phase_line("workspace")}

    Every number in this course was produced by *some* Python, *some* JAX and *some*
    devices. Before you trust a result, or ask someone why theirs differs, write down what
    ran it. In this lesson you will

    - read an **environment receipt**: Python and package versions, JAX's backend and
      devices, the environment variables JAX reads, the host, and the git revision of your
      checkout;
    - compare every package with the version the project pins in `pyproject.toml`, and get
      the exact command that fixes a missing or mismatched one;
    - check the receipt against a **fresh Python process** that asks JAX directly, and
      download the receipt as JSON to keep beside your results.
    """)
    return


@app.cell
def _():
    group = FLAGS.control("group", ARGS, label="package group")
    include_env = FLAGS.control("include_env", ARGS, label="include environment variables")
    mo.hstack([group, include_env], justify="start")
    return group, include_env


@app.cell
def _(include_env):
    receipt = workspace.environment_receipt(include_env=include_env.value)
    receipt_json = workspace.to_json(receipt)
    download = mo.download(
        data=receipt_json.encode("utf-8"),
        filename="environment_receipt.json",
        mimetype="application/json",
        label="Download environment_receipt.json",
    )
    git_state = receipt["git"]
    if git_state["revision"] is None and git_state["dirty"] is None:
        git_note = (
            "this folder is not a git checkout, so the receipt cannot name the code that ran."
        )
    elif git_state["revision"] is None:
        git_note = "the checkout has no commit yet: commit your work so a receipt can name it."
    elif git_state["dirty"]:
        git_note = (
            "the checkout has uncommitted changes: the sha alone does not reproduce this run."
        )
    else:
        git_note = "the checkout is clean: the sha names exactly the code that ran."
    mo.vstack(
        [
            mo.md(
                f"## Your receipt\n"
                f"JAX runs on **{receipt['jax']['backend']}** with "
                f"**{receipt['jax']['device_count']}** devices "
                f"(`{receipt['jax']['device_kind']}`); Python {receipt['python_version']} on "
                f"{receipt['host']['os']} with {receipt['host']['cpu_count']} CPUs. "
                f"Git: {git_note}\n\n"
                "The lab asks JAX for 8 virtual CPU devices (`lab.use_cpu_devices()` sets "
                "`jax_num_cpu_devices` before the backend starts), so the device count can "
                "be 8 even when `JAX_NUM_CPU_DEVICES` is unset. `JAX_PLATFORMS=cpu` stops "
                "JAX from probing for a TPU; `XLA_FLAGS` changes what the compiler does, so "
                "a receipt records all three."
            ),
            mo.ui.table(
                pd.DataFrame(workspace.receipt_rows(receipt)),
                selection=None,
                pagination=False,
                label="environment receipt",
            ),
            download,
        ]
    )
    return receipt, receipt_json


@app.cell
def _(group, receipt):
    # Pins come from the checkout's pyproject.toml; an installed copy of the lab has none.
    pins = workspace.pinned_versions() if workspace.PYPROJECT.exists() else {}
    package_rows = workspace.package_table(receipt, pins)
    shown_rows = [row for row in package_rows if group.value in ("all", row["group"])]
    fix_lines = workspace.fixes(package_rows)
    if fix_lines:
        fix_output = mo.vstack(
            [
                mo.callout(
                    mo.md(
                        f"**{len(fix_lines)}** "
                        f"{'package needs' if len(fix_lines) == 1 else 'packages need'} attention. "
                        "Run from the repository root:"
                    ),
                    kind="warn",
                ),
                text.code_block("\n".join(fix_lines), "bash", "fix commands"),
            ]
        )
    else:
        fix_output = mo.callout(mo.md("Every package matches the project's pins."), kind="success")
    mo.vstack(
        [
            mo.md(
                "## Installed vs pinned\n"
                "`pyproject.toml` pins the known-good stack (`name==version`) in its "
                "dependencies and its `frameworks` extra. **ok**: installed and matching "
                "(a local label such as `+cpu` counts as matching, as in pip); **mismatch**: "
                "another version; **missing**: not installed; **optional**: libtpu, which "
                "only a TPU VM needs."
                + (
                    ""
                    if pins
                    else "\n\n*No pyproject.toml beside the lab: nothing to compare with.*"
                )
            ),
            mo.ui.table(
                pd.DataFrame(shown_rows), selection=None, pagination=False, label="packages"
            ),
            fix_output,
            mo.md(
                "### What to do when a piece is missing\n"
                "- The whole pinned stack at once: `make lab`, or "
                f"`{workspace.REINSTALL_ALL}` in an existing `.venv`.\n"
                "- **torch**: always `pip install torch==2.13.0` (the pinned CPU wheel). An "
                "unpinned `pip install torch` pulls a multi-GB CUDA build.\n"
                "- **tensorflow**: the lab pins `tensorflow-cpu`; a full `tensorflow` also works.\n"
                "- **libtpu**: only on a TPU VM, through the `tpu` extra "
                "(`.venv/bin/pip install -e '.[tpu]'`). On a CPU host you do not need it.\n"
                "- After installing, restart the app: a running process keeps the versions it "
                "imported."
            ),
        ]
    )
    return fix_lines, package_rows, shown_rows


@app.cell
def _():
    # Independent reference: a new interpreter asks JAX itself, with the device count this
    # process asked for. It does not depend on the controls, so it runs once.
    probe = workspace.probe_fresh_process(CPU_DEVICES)
    return (probe,)


@app.cell
def _(probe, receipt):
    comparison = workspace.compare_with_probe(receipt, probe)
    mismatched = [row["field"] for row in comparison if not row["match"]]
    # The receipt is checked field by field, not measured: the error is the number of fields
    # that differ from the fresh process, and none may.
    check = lab.Check(
        f"receipt vs a fresh Python process with JAX_NUM_CPU_DEVICES={CPU_DEVICES} "
        f"({len(comparison) - len(mismatched)}/{len(comparison)} fields agree"
        + (f"; differ: {', '.join(mismatched)}" if mismatched else "")
        + (f"; {probe['error']}" if "error" in probe else "")
        + ")",
        {"fields that differ": float(len(mismatched))},
        0.0,
        facts={"the fresh process answered": "error" not in probe},
    )
    mo.vstack(
        [
            mo.md(
                "## Check: does a fresh process agree?\n"
                "The receipt reads versions from package metadata and devices from this "
                "process. A brand-new Python process imports jax and reports "
                "`jax.__version__`, `jaxlib.__version__`, `sys.version` and "
                "`jax.device_count()` itself."
            ),
            mo.ui.table(
                pd.DataFrame(comparison),
                selection=None,
                pagination=False,
                label="receipt vs subprocess",
            ),
            check,
        ]
    )
    return (check,)


@app.cell
def _(shown_rows):
    status_colors = alt.Scale(
        domain=list(workspace.STATUSES), range=["#2e7d32", "#ef6c00", "#c62828", "#9e9e9e"]
    )
    status_chart = (
        alt.Chart(pd.DataFrame(shown_rows).fillna("-"), title="packages by status")
        .mark_bar()
        .encode(
            y=alt.Y("status:N", sort=list(workspace.STATUSES), title=None),
            x=alt.X("count():Q", title="packages"),
            color=alt.Color("status:N", scale=status_colors, legend=None),
            tooltip=["status", "count()"],
        )
    )
    package_chart = (
        alt.Chart(pd.DataFrame(shown_rows).fillna("-"), title="each package")
        .mark_square(size=300)
        .encode(
            x=alt.X("package:N", sort=None, title=None),
            y=alt.Y("group:N", title=None),
            color=alt.Color("status:N", scale=status_colors),
            tooltip=["package", "distribution", "installed", "pinned", "status"],
        )
    )
    mo.hstack([status_chart, package_chart])
    return


@app.cell
def _():
    uploaded = mo.ui.file(filetypes=[".json"], label="a receipt from another machine")
    mo.vstack(
        [
            mo.md(
                "## Compare a receipt from another machine\n"
                "A receipt is checked before it is read: a file that is not an environment "
                "receipt (or a newer schema) is refused with the reason."
            ),
            uploaded,
        ]
    )
    return (uploaded,)


@app.cell
def _(receipt, uploaded):
    if not uploaded.value:
        other_output = mo.md("*Upload an `environment_receipt.json` to compare it with this one.*")
    else:
        try:
            other = workspace.from_json(uploaded.contents())
        except ValueError as error:
            other_output = mo.callout(mo.md(f"Not loaded: {error}"), kind="warn")
        else:
            versions = [
                {
                    "package": name,
                    "this machine": receipt["packages"].get(name, {}).get("version"),
                    "other machine": entry["version"],
                }
                for name, entry in other["packages"].items()
            ]
            other_output = mo.vstack(
                [
                    mo.md(
                        f"Receipt from **{other['host']['hostname']}** "
                        f"({other['created_utc']}): JAX on {other['jax']['backend']} "
                        f"with {other['jax']['device_count']} devices."
                    ),
                    mo.ui.table(pd.DataFrame(versions), selection=None, pagination=False),
                ]
            )
    other_output
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("workspace")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_download_is_a_valid_receipt(receipt, receipt_json):
    assert workspace.from_json(receipt_json) == receipt
    assert receipt["jax"]["device_count"] == jax.device_count()
    return


@app.cell
def test_every_bad_package_gets_a_fix(fix_lines, package_rows):
    bad = [row["package"] for row in package_rows if row["status"] in ("missing", "mismatch")]
    assert [line.split(":")[0] for line in fix_lines] == bad
    return


@app.cell
def test_group_filter(group, package_rows, shown_rows):
    expected = [row for row in package_rows if group.value in ("all", row["group"])]
    assert shown_rows == expected and shown_rows
    return


if __name__ == "__main__":
    app.run()
