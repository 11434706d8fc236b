import json
import math

from core.workload import events


def test_events_round_trip_and_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "run" / "events.jsonl"
    with events.EventLog(path, job="j1") as log:
        log.emit("running")
        log.emit("step", step=1, loss=float("nan"))
    with open(path, "a") as file:
        file.write('{"ts": 1.0, "job": "j1", "event": "st')  # killed mid-write
    read = events.read_events(path)
    assert [r["event"] for r in read] == ["running", "step"]
    assert read[1]["loss"] == "nan" and read[1]["job"] == "j1"
    assert math.isnan(float(read[1]["loss"]))
    assert events.parse_line(json.dumps({"event": "x"})) is None  # no ts / job


def test_tail_returns_only_new_complete_events(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = events.Tail(path)
    assert tail.new_events() == []
    log = events.EventLog(path, job="j")
    log.emit("queued")
    assert [r["event"] for r in tail.new_events()] == ["queued"]
    with open(path, "a") as file:
        file.write('{"ts": 2.0, "job": "j", "event": "running"')
    assert tail.new_events() == []
    with open(path, "a") as file:
        file.write("}\n")
    assert [r["event"] for r in tail.new_events()] == ["running"]
    log.close()


def test_a_log_reopened_after_a_kill_mid_write_keeps_the_next_event(tmp_path):
    """A job resumed after a kill opens its log again: the first event it writes must not be
    glued to the line the kill cut short (that line is lost, the new one is not)."""
    path = tmp_path / "events.jsonl"
    with events.EventLog(path, job="j") as log:
        log.emit("running")
    with open(path, "a") as file:
        file.write('{"ts": 1.0, "job": "j", "event": "st')  # killed mid-write
    with events.EventLog(path, job="j") as log:
        log.emit("resumed", step=3)
    assert [r["event"] for r in events.read_events(path)] == ["running", "resumed"]
