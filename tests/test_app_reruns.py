"""What moving one control re-runs: heavy work that a control does not feed stays put.

A marimo cell runs again when a name it reads is defined again, and so does every cell below
it. A heavy call in a cell that reads a control it does not need (a guard's second operand,
a label) therefore runs again on every move of that control: in a learner's session and in
the browser tour, which moves each control once. Each case names an app, a control and the
heavy calls that moving it must not reach. The cell graph is read from the app's source: a
cell reads its parameters and defines the names it returns.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from tpu_scripts import export

APPS = pathlib.Path(__file__).resolve().parent.parent / "apps"

# (app stem, control, calls that moving the control must not run again)
CASES = [
    # the budget judges the load runs; it neither makes the versions nor loads the service
    (
        "inference_capacity",
        "p95_budget_ms",
        [
            "lesson.write_champion(",
            "lesson.write_candidates(",
            "lesson.batched_vs_unbatched(",
            "lesson.load_runs(",
        ],
    ),
    # the noise makes one candidate: the champion, its batching and its load run stay
    (
        "inference_capacity",
        "canary_noise",
        ["lesson.write_champion(", "lesson.batched_vs_unbatched(", "lesson.load_runs("],
    ),
    # the window's wait is the batcher's and the service's: the artifacts and rollouts stay
    (
        "inference_capacity",
        "max_wait_ms",
        ["lesson.write_champion(", "lesson.write_candidates(", "lesson.gate_rollouts("],
    ),
    # the longer T is the TPU compile's: the kernel's forward, backward and checks stay
    (
        "kernel_iteration",
        "long_t",
        ["flash_attention.forward_and_grads(", "flash_attention.attention_numpy("],
    ),
    # the LoRA rank is the adapters': the pretrained model and the shifted task stay
    (
        "adapt_pretrained",
        "rank",
        ["lesson.pretrain(", "lesson.shifted_task(", "lesson.base_accuracy("],
    ),
    # DPO's hyperparameters are DPO's: the RLHF comparison (a PPO run) reads the seed alone
    *[("dpo", control, ["rlhf.rlhf_policy("]) for control in ("beta", "steps", "learning_rate")],
    # the dtype is the kernel's: the train step's profile, the sharding and the TPU compiles stay
    (
        "capstone_pallas_kernel",
        "dtype",
        ["profile.measure(", "partition.sharded_check(", "partition.tpu_memory_rows("],
    ),
]


def cells(source: str) -> list[tuple[set[str], set[str], str]]:
    """(names read, names defined, source) of each ``@app.cell`` function."""
    found = []
    for node in export.app_cells(ast.parse(source)):
        reads = {a.arg for a in node.args.args}
        defines = set()
        for statement in ast.walk(node):
            if isinstance(statement, ast.Return) and statement.value is not None:
                values = statement.value
                items = values.elts if isinstance(values, ast.Tuple) else [values]
                defines |= {item.id for item in items if isinstance(item, ast.Name)}
        found.append((reads, defines, ast.unparse(node)))
    return found


def rerun_by(source: str, control: str) -> list[str]:
    """The sources of the cells that run again when ``control`` moves (transitively)."""
    graph = cells(source)
    changed, rerun = {control}, []
    grew = True
    while grew:
        grew = False
        for reads, defines, text in graph:
            if text not in rerun and reads & changed:
                rerun.append(text)
                changed |= defines
                grew = True
    return rerun


@pytest.mark.parametrize("stem,control,calls", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_control_does_not_rerun_work_it_does_not_feed(stem, control, calls):
    source = (APPS / f"{stem}.py").read_text(encoding="utf-8")
    for call in calls:
        assert sum(call in text for _, _, text in cells(source)) == 1, f"{call} not in one cell"
    rerun = rerun_by(source, control)
    assert rerun, f"{control} re-runs no cell: not a control of {stem}?"
    reached = [call for call in calls if any(call in text for text in rerun)]
    assert not reached, f"moving {control} in {stem} runs again: {reached}"


def test_the_rerun_graph_follows_names_through_cells():
    source = (
        "@app.cell\ndef _():\n    a = 1\n    b = 2\n    return a, b\n\n"
        "@app.cell\ndef _(a):\n    c = heavy(a)\n    return (c,)\n\n"
        "@app.cell\ndef _(c):\n    show(c)\n    return\n\n"
        "@app.cell\ndef _(b):\n    other(b)\n    return\n"
    )
    rerun = rerun_by(source, "a")
    assert [text.splitlines()[2].strip() for text in rerun] == ["c = heavy(a)", "show(c)"]
    assert not any("other(b)" in text for text in rerun)
