"""The item ``tpu_workflows.job_defect`` beyond the generic contract
(core/assessment/items_test.py): each program differs from the fixed one by its defect only, every
defect's evidence holds, and the seeds plant every defect."""

from __future__ import annotations

import pytest

from core.assessment.bank import tpu_workflows

JOB = tpu_workflows.JobDefect()


def test_job_programs_differ_from_the_fixed_one_by_their_defect_only():
    params = JOB.seeded(3)[1]
    fixed = JOB._source(params)
    for defect, (good, bad) in tpu_workflows._JOB_PLANTS.items():
        assert fixed.count(good) == 1, defect
        program = JOB.program(defect, params)
        assert program != fixed and program.replace(bad, good) == fixed
        assert 10 <= len(program.strip().splitlines()) <= 35


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 17, 2026])
@pytest.mark.parametrize("defect", sorted(tpu_workflows.JobDefect.defects))
def test_job_evidence_holds_for_every_defect(defect, seed):
    params = JOB.seeded(seed)[1]
    evidence = JOB.evidence(defect, params)
    assert all(evidence.facts.values()), evidence.facts
    assert "| worker |" in evidence.markdown


def test_job_defect_seeds_plant_every_defect():
    planted = {JOB.seeded(seed)[0] for seed in range(40)}
    assert planted == set(tpu_workflows.JobDefect.defects)
