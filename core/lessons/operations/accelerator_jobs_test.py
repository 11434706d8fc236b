import pytest

from core.lessons.operations import accelerator_jobs as aj
from core.workload import runner


def test_every_state_named_is_in_the_documented_enums():
    assert aj.map_problems() == []
    assert [row["runner state"] for row in aj.state_rows()] == list(runner.STATES)


def test_a_planted_wrong_state_is_caught(monkeypatch):
    planted = {k: dict(v) for k, v in aj.STATE_MAP.items()}
    planted["running"]["tpu-vm"] = "RUNNING"  # a Compute Engine word, not a Node.State
    monkeypatch.setattr(aj, "STATE_MAP", planted)
    assert aj.map_problems() == ["running/tpu-vm: RUNNING is not a tpu-vm state"]


def test_tpu7x_is_not_on_the_cloud_tpu_api():
    rows = {r["generation"]: r for r in aj.path_rows()}
    assert rows["tpu7x"]["Cloud TPU API (tpu-vm, queued)"] == "no"
    assert rows["v6e"]["Cloud TPU API (tpu-vm, queued)"] == "yes"


@pytest.mark.parametrize(
    "generation,topology",
    [(g, t) for g, topologies in aj.JOB_TOPOLOGIES.items() for t in topologies],
)
def test_every_offered_slice_renders_a_valid_jobset(generation, topology):
    m = aj.jobset_manifest("train", "img:1", generation, topology, 40)
    assert aj.validate_jobset(m) == []
    chips, hosts = aj.slice_hosts(generation, topology)
    spec = m["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["completions"] == spec["parallelism"] == hosts == chips // 4


def test_the_schema_and_the_rules_bite():
    m = aj.jobset_manifest("train", "img:1", "v5e", "4x4", 40)
    spec = m["spec"]["replicatedJobs"][0]["template"]["spec"]
    spec["completions"] = 3
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] = "8"
    spec["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # a typo'd field
    problems = aj.validate_jobset(m)
    assert any("imagePullPolcy" in p for p in problems)  # kubernetes-validate, strict
    assert any("completions 3" in p for p in problems)
    assert any("requested and limited equally" in p for p in problems)


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="topology"):
        aj.slice_hosts("v5e", "2x2x2")
    with pytest.raises(ValueError, match="generation"):
        aj.slice_hosts("v4", "2x2x2")
    with pytest.raises(ValueError, match="DNS"):
        aj.jobset_manifest("Bad_Name", "img:1", "v5e", "4x4", 4)
