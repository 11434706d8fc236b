"""artifact experiment-log: a 4-step run killed after step 2, resumed, compared bit for bit."""

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
    assert run["killed_after_save_of_step"] == run["resumed_from_step"] == 2
    assert run["max_abs_loss_difference"] == 0.0 and run["comparison"] == "bitwise"
    assert [r["run"] for r in doc["losses"]] == ["interrupted"] * 2 + ["resumed"] * 2
    assert all(r["loss"] == r["reference loss"] for r in doc["losses"])
    log = [json.loads(line) for line in (out / "experiment-log.jsonl").read_text().splitlines()]
    killed = [e for e in log if e["event"] == "killed"]
    assert killed == [{"run": "interrupted", "event": "killed", "signal": "SIGKILL", "rc": -9}]
    assert {e["run"] for e in log} == {"interrupted", "resumed", "reference"}
    resumed_steps = [e["step"] for e in log if e["run"] == "resumed" and e["event"] == "step"]
    assert resumed_steps == [3, 4]
    text = (out / "experiment-log.jsonl").read_text()
    assert doc["log_sha256"] == catalogue.canonical_sha256({"text": text})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "1"], "--steps must be in 2..10000"),
        (["--steps", "6", "--checkpoint-every", "6"], "--checkpoint-every must be in 1..5"),
        (["--steps", "6", "--checkpoint-every", "2", "--kill-at", "3"], "must be a checkpoint"),
        (["--steps", "6", "--checkpoint-every", "2", "--kill-at", "6"], "below --steps 6"),
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
    assert experiment_log.default_kill_at(20, 5) == 10
    assert experiment_log.default_kill_at(4, 2) == 2
    assert experiment_log.default_kill_at(3, 2) == 2
