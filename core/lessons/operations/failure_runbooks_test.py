from core.lessons.operations import failure_runbooks as lesson
from core.workload import recovery


def test_every_failure_kind_has_a_complete_runbook():
    assert set(lesson.RUNBOOKS) == set(recovery.KINDS)
    for kind, book in lesson.RUNBOOKS.items():
        assert book["commands"] and all(
            c.split()[0] in ("gcloud", "kubectl", "gsutil") for c in book["commands"]
        ), kind
        fields = [r["field"] for r in lesson.runbook_rows(kind)]
        assert fields[:3] == ["symptom", "detection", "automatic"] and fields[-1] == "lost"


def test_the_reference_runs_once_per_steps_and_save_every(monkeypatch, tmp_path):
    """Moving the failure or its step re-runs the drill, not the uninterrupted reference;
    a new steps or save_every runs a new one (stand-ins for the processes: calls counted)."""
    started = []

    def uninterrupted(run_dir, steps, save_every, cache_dir=None):
        started.append((steps, save_every))
        losses = {s: float(s) for s in range(1, steps + 1)}
        return recovery.Reference(losses, {"save_every": str(save_every)}, [])

    def supervise(run_dir, failure, steps, save_every, cache_dir=None):
        return (failure, steps, save_every)

    monkeypatch.setattr(recovery, "uninterrupted", uninterrupted)
    monkeypatch.setattr(recovery, "supervise", supervise)
    lesson.reference.cache_clear()
    try:
        drills = [
            lesson.drill(tmp_path / str(i), kind, step, steps, save_every)
            for i, (kind, step, steps, save_every) in enumerate(
                [("sigterm", 5, 10, 2), ("sigkill", 5, 10, 2), ("nan", 6, 10, 2),
                 ("nan", 6, 11, 2), ("nan", 6, 11, 3), ("sigterm", 5, 10, 2)]
            )
        ]  # fmt: skip
    finally:
        lesson.reference.cache_clear()  # no stand-in reference outlives this test
    assert started == [(10, 2), (11, 2), (11, 3)]
    for (failure, steps, save_every), reference in drills:
        assert failure.kind in recovery.KINDS and max(reference.losses) == steps
        assert reference.final_digest == {"save_every": str(save_every)}
    assert drills[0][1] is drills[1][1] is drills[5][1]
