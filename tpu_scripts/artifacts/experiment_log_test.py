"""artifact experiment-log: a 4-step run killed after step 3, resumed from 2, compared bitwise."""

import json

import pytest

from core.state import artifacts as catalogue
from tpu_scripts import artifacts
from tpu_scripts.artifacts import experiment_log


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("log")
    argv = ["experiment-log", "--out", str(out), "--steps", "4", "--checkpoint-every", "2"]
    return artifacts.main(argv), out


def test_the_resumed_run_equals_the_uninterrupted_one(written):
    rc, out = written
    doc = json.loads((out / "experiment-log.json").read_text())
    assert rc == 0, [c for c in doc["checks"] if not c["passed"]]
    assert catalogue.load_verified(out / "experiment-log.json")
    run = doc["run"]
    assert (run["killed_after_step"], run["resumed_from_step"], run["lost_steps"]) == (3, 2, [3])
    assert run["max_abs_loss_difference"] == 0.0 and run["comparison"] == "bitwise"
    assert [r["run"] for r in doc["losses"]] == ["interrupted"] * 2 + ["resumed"] * 2
    assert [r["replayed"] for r in doc["losses"]] == [False, False, True, False]
    assert len(doc["checks"]) == 6
    assert all(r["loss"] == r["reference loss"] for r in doc["losses"])
    log = [json.loads(line) for line in (out / "experiment-log.jsonl").read_text().splitlines()]
    killed = [e for e in log if e["event"] == "killed"]
    assert killed == [{"run": "interrupted", "event": "killed", "signal": "SIGKILL", "rc": -9}]
    assert {e["run"] for e in log} == {"interrupted", "resumed", "reference"}
    resumed_steps = [e["step"] for e in log if e["run"] == "resumed" and e["event"] == "step"]
    assert resumed_steps == [3, 4]
    killed_steps = [e["step"] for e in log if e["run"] == "interrupted" and e["event"] == "step"]
    assert killed_steps == [1, 2, 3]
    text = (out / "experiment-log.jsonl").read_text()
    assert doc["log_sha256"] == catalogue.canonical_sha256({"text": text})


def test_verify_refuses_a_changed_event_log(written, tmp_path, capsys):
    import shutil

    _, out = written
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("checkpoints"))
    assert artifacts.main(["verify", str(copy)]) == 0
    log = copy / "experiment-log.jsonl"
    log.write_text(log.read_text().replace('"loss": ', '"loss": 1', 1))
    assert artifacts.main(["verify", str(copy)]) == 1
    assert "event log experiment-log.jsonl was changed" in capsys.readouterr().err


def _log(out):
    return [json.loads(line) for line in (out / "experiment-log.jsonl").read_text().splitlines()]


def _failed(log):
    checks, _, _ = experiment_log.compare(log, 4, 2, 3)
    return [c["what"] for c in checks if not c["passed"]]


def test_the_checks_catch_a_changed_loss_a_wrong_resume_and_a_different_state(written):
    _, out = written
    log = _log(out)
    assert _failed(log) == []
    nudged = [
        {**e, "loss": e["loss"] + 1e-7}
        if (e["run"], e["event"], e.get("step")) == ("resumed", "step", 4)
        else e
        for e in log
    ]
    assert _failed(nudged) == ["losses equal the uninterrupted reference bit for bit"]
    replay = [
        {**e, "loss": e["loss"] * 2}
        if (e["run"], e["event"], e.get("step")) == ("interrupted", "step", 3)
        else e
        for e in log
    ]
    assert _failed(replay) == ["the replayed steps 3..3 repeat the killed run's losses"]
    fresh = [e for e in log if e["event"] != "resumed"]
    assert "a fresh process resumed from the newest checkpoint, step 2" in _failed(fresh)
    other = [
        {**e, "digest": {**e["digest"], "adam_mu": "0" * 16}} if e["event"] == "resumed" else e
        for e in log
    ]
    assert _failed(other) == ["the restored state is the uninterrupted run's state at that step"]
    survived = [{**e, "rc": 0} if e["event"] == "killed" else e for e in log]
    assert _failed(survived) == ["the first run was killed (SIGKILL) after step 3, before its save"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "1"], "--steps must be in 2..10000"),
        (["--steps", "6", "--checkpoint-every", "6"], "--checkpoint-every must be in 1..5"),
        (["--steps", "6", "--checkpoint-every", "2", "--kill-at", "1"], "nothing to resume"),
        (["--steps", "6", "--checkpoint-every", "2", "--kill-at", "6"], "before the last step"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    assert artifacts.main(["experiment-log", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_non_number_is_refused_by_argparse(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        artifacts.main(["experiment-log", "--out", str(tmp_path / "n"), "--steps", "ten"])
    assert stop.value.code == 2 and "invalid int value" in capsys.readouterr().err


def test_default_kill_point_is_the_checkpoint_nearest_the_middle():
    assert experiment_log.default_kill_at(20, 5) == 13
    assert experiment_log.default_kill_at(4, 2) == 3
    assert experiment_log.default_kill_at(3, 2) == 2
