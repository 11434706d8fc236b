"""The spot drill on the capstone's trainer: three SIGTERM notices at different steps of one
run (each honoured by a real process, each resume a fresh one) lose no step, and the run ends
bit for bit equal to a fresh uninterrupted process (5 trainer processes: 1 reference + 4)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from capstones.byte_transformer import documents, spot_drill

NOTICES = [2, 3, 4]  # steps each process trains before its SIGTERM: three different steps


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("jax-cache")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache):
    return spot_drill.uninterrupted(tmp_path_factory.mktemp("ref") / "run", cache_dir=cache)


@pytest.fixture(scope="module")
def drilled(tmp_path_factory, reference, cache):
    base = tmp_path_factory.mktemp("drill")
    return base, spot_drill.drill(base, NOTICES, reference=reference, cache_dir=cache)


def test_three_notices_lose_no_step_and_end_bitwise_equal(drilled):
    base, result = drilled
    notices = result.preemptions
    assert len(notices) == len(NOTICES) == 3
    steps = [p.sigterm_after_step for p in notices]
    assert steps == sorted(set(steps))  # three different SIGTERM steps
    for p in notices:
        assert p.exit_status == 0  # the capstone exits cleanly after its save
        assert p.saved_step == p.last_finished_step >= p.sigterm_after_step
        assert p.resumed_from == p.saved_step
        assert p.steps_lost == 0
    assert result.steps_lost == 0
    assert result.final_exit_status == 0
    assert result.losses_equal_reference and result.mismatched_steps == []
    assert result.final_state_equal_reference
    assert result.processes == 4  # the reference was given, not rerun
    on_disk = documents.load(base / spot_drill.RESULT_FILE, spot_drill.SpotDrill)
    assert spot_drill.SpotDrill.model_validate(on_disk) == result
    assert len(spot_drill.rows(result)) == 3


def test_compare_sees_one_ulp_and_another_final_state(drilled, reference):
    base, _ = drilled
    losses = dict(reference.losses)
    losses[7] = math.nextafter(losses[7], math.inf)
    nudged = dataclasses.replace(reference, losses=losses)
    assert spot_drill.compare(base / "victim", nudged) == ([7], True)
    digest = dict(reference.final_digest, adam_nu="0" * 16)
    other = dataclasses.replace(reference, final_digest=digest)
    assert spot_drill.compare(base / "victim", other) == ([], False)


@pytest.mark.parametrize(
    "after, steps, message",
    [
        ([], 30, "at least one notice"),
        ([0], 30, "at least 1 step"),
        ([10, 10], 30, "need more than"),
    ],
)
def test_bad_notices_are_refused_before_anything_runs(tmp_path, after, steps, message):
    with pytest.raises(ValueError, match=message):
        spot_drill.drill(tmp_path / "d", after, steps)
    assert not (tmp_path / "d").exists()


def test_an_existing_victim_is_refused(tmp_path):
    (tmp_path / "victim").mkdir()
    with pytest.raises(ValueError, match="exists"):
        spot_drill.drill(tmp_path, [2], 30)
    assert list(tmp_path.iterdir()) == [tmp_path / "victim"]


def test_the_command_line_refuses_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        spot_drill.main([str(tmp_path / "d"), "--after", "0"])
    assert exit_info.value.code == 2
    assert "at least 1 step" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
