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
