"""The item ``data_checkpoints.resume_defect`` beyond the generic contract
(core/assessment/items_test.py): every defect breaks resumption (not only the planted one), and the
programs differ in the checkpoint line only."""

from __future__ import annotations

import pytest

from core.assessment.bank import data_checkpoints


@pytest.mark.parametrize("seed", [0, 17])
def test_resume_evidence_holds_for_every_defect(seed):
    """Not only the planted one: each defect breaks resumption, the fixed program does not,
    and restoring changes exactly the field the defect leaves out."""
    item = data_checkpoints.ResumeDefect()
    params = item.seeded(seed)[1]
    for defect in item.defects:
        facts = item.evidence(defect, params).facts
        assert all(facts.values()), (defect, facts)


def test_resume_program_differs_only_in_the_checkpoint_line():
    item = data_checkpoints.ResumeDefect()
    params = item.seeded(3)[1]
    fixed = item.program("fixed", params).splitlines()
    for defect in item.defects:
        shown = item.program(defect, params).splitlines()
        changed = [i for i, (a, b) in enumerate(zip(fixed, shown, strict=True)) if a != b]
        assert len(changed) == 1 and shown[changed[0]].startswith("ckpt = "), defect
        assert len(shown) <= 30
