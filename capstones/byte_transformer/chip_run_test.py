"""chip_run's bookkeeping (no chip, no JAX run): the resume check and the CPU-vs-TPU verdicts
on planted parts, and the record's figures written and read back as chart rows."""

import numpy as np
import pytest

from capstones.byte_transformer import chip_run, chip_run_record, loss_agreement

SPEC = {"resume_step": 10, "compare_steps": 4}
CPU = [5.0, 4.0, 3.5, 3.0]
# the emulated runs: the CPU's losses moved by the MXU's rounding (relative 2e-4 and 1e-7)
EMULATED = {"DEFAULT": [v * (1 + 2e-4) for v in CPU], "HIGHEST": [v * (1 + 1e-7) for v in CPU]}


def _parts(chip_default=None, resumed_loss=2.5, decode_identical=True):
    greedy = {"identical": decode_identical, "tokens": 8}
    if not decode_identical:
        greedy |= {"first_difference_index": 3, "cached_margin": 0.01, "recompute_margin": 0.02}
    return {
        "train": {
            "device_kind": "TPU v5 lite",
            "steps": 20,
            "final_loss": 2.0,
            "losses": chip_default or [v * (1 - 3e-4) for v in CPU],
            "after_resume_step": {"step": 11, "loss": 2.5, "grad_norm": 0.75},
            "curve": [[1, 5.0], [10, 3.0], [20, 2.0]],
            "heldout": [{"step": 10, "loss": 2.8, "bits_per_byte": 4.04}],
            "median_step_s": 0.005,
            "first_step_s": 2.0,
        },
        "resume": {"start_step": 10, "step": 11, "loss": resumed_loss, "grad_norm": 0.75},
        "highest": {"losses": [v * (1 + 2e-6) for v in CPU]},
        "cpu": {
            "losses": CPU,
            "emulated_default_losses": EMULATED["DEFAULT"],
            "emulated_highest_losses": EMULATED["HIGHEST"],
        },
        "decode": {
            "contexts": [
                {
                    "prompt_len": 512,
                    "new_tokens": 8,
                    "cached": {"tokens_per_s": 800.0},
                    "recompute": {"tokens_per_s": 100.0},
                    "speedup": 8.0,
                    "greedy": greedy,
                }
            ]
        },
    }


def test_a_clean_run_passes_every_check():
    found = chip_run.summary(_parts(), SPEC)
    assert found["resume"]["identical"] and found["resume"]["abs_loss_difference"] == 0.0
    for name in ("default", "highest"):
        line = found["cpu_vs_tpu"][name]
        assert line["agrees"], line
        assert line["steps"] == 4 and line["max_relative_difference"] > 0
    assert found["cpu_vs_tpu"]["default"]["max_relative_difference"] == pytest.approx(3e-4)
    assert any("identical True" in line for line in chip_run.summary_lines(found))


def test_planted_faults_fail_their_checks():
    one_ulp = float(np.nextafter(np.float32(2.5), np.float32(3.0)))
    wrong_rate = [CPU[0]] + [v * 1.02 for v in CPU[1:]]  # a learning rate off: 2% from step 2
    found = chip_run.summary(_parts(chip_default=wrong_rate, resumed_loss=one_ulp), SPEC)
    assert not found["resume"]["identical"] and found["resume"]["abs_loss_difference"] > 0
    default = found["cpu_vs_tpu"]["default"]
    assert not default["agrees"] and default["max_relative_difference"] == pytest.approx(0.02)
    assert default["first_step_relative_difference"] == 0.0
    assert found["cpu_vs_tpu"]["highest"]["agrees"]  # the other precision is judged apart


def test_a_missing_part_is_an_error_line_not_a_crash():
    parts = _parts()
    del parts["resume"], parts["highest"]
    parts["cpu"].pop("emulated_highest_losses")
    found = chip_run.summary(parts, SPEC)
    assert "error" in found["resume"]
    assert "error" in found["cpu_vs_tpu"]["highest"] and found["cpu_vs_tpu"]["default"]["agrees"]
    figures = chip_run_record.figures({"summary": found, "parts": parts})
    assert "resume_error" in figures and "cpu_vs_tpu_highest_error" in figures
    assert figures["cpu_vs_tpu_default_agrees"] == "yes"


def test_the_record_is_written_and_read_back_as_chart_rows(tmp_path):
    parts = _parts(decode_identical=False)
    result = {"summary": chip_run.summary(parts, SPEC), "parts": parts}
    from core.perf import records

    # a quiet run, measured by the driver: other processes used none of the CPU time
    start = {"load_average": None, "machine_busy_s": 10.0, "own_s": 5.0, "wall_s": 0.0}
    end = {"load_average": None, "machine_busy_s": 12.0, "own_s": 7.0, "wall_s": 9.0}
    load = records.measure_load(start, end, cpus=4)
    spec = {**SPEC, "record": "chip_run_test", "command": ["python", "x.py"], "load": load}
    path = chip_run.write_record(spec, result, tmp_path)
    record = chip_run_record.latest("chip_run_test", root=tmp_path)
    assert str(tmp_path) in path and record.figures["resume_identical"] == "yes"
    assert record.figures["decode_ctx512_greedy_identical"] == "no"
    assert record.figures["decode_ctx512_first_difference_index"] == 3
    assert chip_run_record.loss_curve_rows(record)[-1] == {"step": 20, "loss": 2.0}
    assert chip_run_record.heldout_rows(record) == [{"step": 10, "bits_per_byte": 4.04}]
    assert chip_run_record.decode_rows(record) == [
        {"context": 512, "path": "cached", "tokens_per_s": 800.0},
        {"context": 512, "path": "recompute", "tokens_per_s": 100.0},
    ]
    rows = chip_run_record.first_losses_rows(record)
    assert {row["machine"] for row in rows} == {"CPU float32", "TPU DEFAULT", "TPU HIGHEST"}
    assert len(rows) == 3 * len(CPU)


def test_downsample_keeps_the_ends_and_at_most_count_points():
    points = list(range(1001))
    kept = chip_run.downsample(points, 50)
    assert kept[0] == 0 and kept[-1] == 1000 and len(kept) == 50 and kept == sorted(kept)
    assert chip_run.downsample(points[:10], 50) == points[:10]


def test_the_tolerance_reason_names_the_emulation_and_the_record():
    found = chip_run.summary(_parts(), SPEC)
    reason = found["cpu_vs_tpu"]["default"]["tolerance_reason"]
    assert "emulated" in reason and loss_agreement.ELEMENTWISE_RECORD in reason


def _finished_run(tmp_path, is_tpu=True, kind="TPU v5 lite"):
    """A run folder as the chip's host leaves it (spec.json, tpu_result.json), and a record
    that host wrote itself: (run_dir, host record path)."""
    import json

    from core.perf import records

    parts = _parts()
    parts["train"] |= {"device_kind": kind, "versions": {"jax": "0.10.2", "libtpu": "0.0.42"}}
    result = {
        "is_tpu_result": is_tpu,
        "created_utc": "2026-12-06T08:18:09+00:00",
        "summary": chip_run.summary(parts, SPEC),
        "parts": parts,
    }
    load = {"seconds": 9.0, "cpus": 13, "own_cores": 2.0, "other_processes_cores": 0.0,
            "limit_cores": 1.625, "load_average_start": [0.0, 0.0, 0.0],
            "load_average_end": [0.0, 0.0, 0.0]}  # fmt: skip
    spec = {**SPEC, "record": "chip_run_test", "command": ["python", "x.py"], "load": load}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(json.dumps(spec))
    (run_dir / "tpu_result.json").write_text(json.dumps(result))
    host_machine = {"label": "1 x TPU v5 lite; host CPU: unknown, 13 cores", "cpu": "unknown",
                    "cores": 13, "platform": "tpu",
                    "accelerator": {"kind": "TPU v5 lite", "count": 1}}  # fmt: skip
    host = records.record_of(
        "host_course", "python -m x", {"passed": 1}, host_machine, {"jax": "0.10.2"},
        "2026-12-06", load,
    )  # fmt: skip
    return run_dir, records.write_document(host, tmp_path / "host")


def test_a_finished_runs_record_takes_the_hosts_machine_never_this_ones(tmp_path):
    run_dir, host = _finished_run(tmp_path)
    path = chip_run.record_from_result(run_dir, host, tmp_path / "records")
    record = chip_run_record.latest("chip_run_test", root=tmp_path / "records")
    assert path.endswith("2026-12-06_tpu-v5-lite-x1-unknown-13core-tpu.json")
    assert record.machine.platform == "tpu" and record.machine.cores == 13
    assert record.versions["libtpu"] == "0.0.42" and record.command == "python x.py"
    assert record.figures["resume_identical"] == "yes" and "--record-from" in record.notes


@pytest.mark.parametrize(
    ("is_tpu", "kind", "why"),
    [(False, "TPU v5 lite", "not a TPU result"), (True, "TPU v6 lite", "accelerator")],
)
def test_a_finished_run_is_refused_when_it_is_not_that_hosts_tpu_result(
    tmp_path, is_tpu, kind, why
):
    run_dir, host = _finished_run(tmp_path, is_tpu=is_tpu, kind=kind)
    with pytest.raises(ValueError, match=why):
        chip_run.record_from_result(run_dir, host, tmp_path / "records")
    assert not (tmp_path / "records").exists()
