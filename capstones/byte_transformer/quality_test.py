"""The model worth keeping: the learning-rate schedule, the quality-v5e preset against the chip
run it was chosen by, the kept records against the host's files, the compressors' lines, and
the sweep script's command line."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from capstones.byte_transformer import args, compressors, quality_record, torch_twin, training
from capstones.byte_transformer import config as config_lib
from core.lm import corpus as corpus_lib
from core.perf import records

REPO = pathlib.Path(__file__).resolve().parents[2]
HOST_FILES = REPO / "tests" / "fixtures" / "tpu_v5e" / "byte_transformer_quality"
SWEEPS = [HOST_FILES / "sweep_first.json", HOST_FILES / "sweep_long.json"]


def cosine_reference(step: int, peak: float, warmup: int, total: int, fraction: float) -> float:
    """The schedule written from its definition (float64): linear warmup from 0, then
    end + (peak - end) (1 + cos(pi progress)) / 2, held at the end after ``total``."""
    if step < warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    end = peak * fraction
    return end + (peak - end) * (1 + math.cos(math.pi * progress)) / 2


def test_the_cosine_schedule_follows_its_definition():
    config = config_lib.Config(
        lr_schedule="cosine",
        learning_rate=1e-3,
        warmup_steps=100,
        schedule_steps=1000,
        final_lr_fraction=0.1,
    )
    schedule = training.learning_rate_schedule(config)
    for step in (0, 1, 50, 99, 100, 101, 550, 999, 1000, 5000):
        expected = cosine_reference(step, 1e-3, 100, 1000, 0.1)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-12), step


def test_constant_without_warmup_is_a_plain_rate_and_with_warmup_ramps():
    assert training.learning_rate_schedule(config_lib.Config(learning_rate=2e-3)) == 2e-3
    ramp = training.learning_rate_schedule(config_lib.Config(learning_rate=2e-3, warmup_steps=10))
    assert [float(ramp(s)) for s in (0, 5, 10, 500)] == pytest.approx([0.0, 1e-3, 2e-3, 2e-3])


def test_a_new_cosine_run_fixes_its_schedule_length_and_a_resume_keeps_it(tmp_path):
    config = training.run_config(tmp_path, {"lr_schedule": "cosine", "steps": 40})
    assert config.schedule_steps == 40
    tmp_path.joinpath(training.CONFIG_FILE).write_text(json.dumps(config.to_dict()))
    longer = training.run_config(tmp_path, {"steps": 80})
    assert (longer.steps, longer.schedule_steps) == (80, 40)
    with pytest.raises(args.UsageError, match="schedule_steps: 40 vs 80"):
        training.run_config(tmp_path, {"schedule_steps": 80})


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"lr_schedule": "linear"}, "lr_schedule must be one of"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        ({"lr_schedule": "cosine", "warmup_steps": 50, "schedule_steps": 50}, "must exceed"),
        ({"final_lr_fraction": 1.5}, "final_lr_fraction must be in"),
        ({"adam_b2": 1.0}, "adam_b2 must be in"),
        ({"adam_b2": math.nan}, "adam_b2 must be"),
    ],
)
def test_schedule_fields_refuse(overrides, words):
    with pytest.raises(ValueError, match=words):
        config_lib.Config(**overrides)


def test_the_torch_twin_refuses_a_schedule_it_does_not_follow():
    with pytest.raises(ValueError, match="constant learning rate"):
        torch_twin.make_optimizer(config_lib.Config(lr_schedule="cosine"), model=None)


def test_the_quality_preset_is_the_configuration_the_chip_run_trained(tmp_path):
    """A new run of ``train preset=quality-v5e`` has the recorded run's config (its
    config.json, written by the training loop on the host) in every field."""
    ran = config_lib.Config.load(HOST_FILES / "config.json")
    preset = training.run_config(tmp_path, config_lib.PRESETS["quality-v5e"])
    differing = {
        name: (getattr(preset, name), getattr(ran, name))
        for name in config_lib.field_types()
        if getattr(preset, name) != getattr(ran, name)
    }
    assert differing == {"log_every": (250, 750)}  # how often it prints, nothing more


def test_the_kept_records_are_the_host_files_figures():
    """The records quoted by the capstone are rebuilt here from the files the host sent back
    (the compressors' lines are checked against this machine's corpus on their own below)."""
    from core.tpu import specs

    quality = records.latest(quality_record.QUALITY_RECORD)
    run = quality_record.run_figures(HOST_FILES, specs.chip("v5e").bf16_flops.value)
    for name, value in run["figures"].items():
        assert quality.figures[name] == records.significant(value), name
    sweeps = [json.loads(path.read_text()) for path in SWEEPS]
    sweep = records.latest(quality_record.SWEEP_RECORD)
    assert sweep.figures == records.significant(quality_record.sweep_figures(sweeps))
    # what the preset's comment and the goal rest on
    assert quality.figures["final_heldout_bpb"] < 1.5
    assert quality.figures["command_wall_s"] < 600
    assert quality.figures["final_heldout_bpb"] < min(quality.figures["compressor_bpb"])


def test_the_records_refuse_host_files_of_two_sessions():
    other = json.loads(SWEEPS[0].read_text()) | {"date_utc": "2026-01-01T00:00:00+00:00"}
    with pytest.raises(ValueError, match="not of one host session"):
        quality_record.host_facts([json.loads(SWEEPS[1].read_text()), other])


def _document(name: str, content: bytes) -> corpus_lib.Document:
    return corpus_lib.Document(name, content)


def test_compressors_on_noise_repetition_and_a_file_already_seen():
    noise = np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    rates = compressors.compressor_rates([_document("noise", noise)])
    assert all(7.9 < rate < 8.2 for rate in rates.values()), rates  # nothing to find in noise
    line = b"def f(x):\n    return x + 1\n"
    repeated = compressors.compressor_rates([_document("r", line * 2000)])
    assert all(rate < 0.25 for rate in repeated.values()), repeated  # 54 bytes, 2000 times
    # a held-out file identical to a training file costs xz almost nothing after it
    text = noise[:50_000]
    seen = compressors.compressor_rates([_document("a", text)], seen=[_document("b", text)])
    # (xz codes a match in pieces of at most 273 bytes: ~0.12 bits a byte for 50 kB)
    assert seen["xz -9e after training files"] < 0.2 < 7.9 < seen["xz -9e per file"]


def test_the_compressors_lines_are_of_this_machines_files():
    """The kept lines, recomputed on the files the run held out (skipped where this Python's
    standard library is not the run's)."""
    quality = records.latest(quality_record.QUALITY_RECORD)
    identity = json.loads((HOST_FILES / "corpus.json").read_text())
    try:
        found = quality_record.compressor_figures(config_lib.Config(), identity)
    except ValueError as exc:
        pytest.skip(str(exc))
    for name, value in found.items():
        assert quality.figures[name] == records.significant(value), name


def test_the_sweep_refuses_without_a_tpu_and_writes_nothing(tmp_path, capsys):
    from tpu_scripts import byte_transformer_sweep as sweep

    assert sweep.main(["--out", str(tmp_path / "s"), "--grid", "first"]) == sweep.EXIT_REFUSED
    assert not (tmp_path / "s").exists()
    assert "--allow-cpu-rehearsal" in capsys.readouterr().err
    assert sweep.main(["--out", str(tmp_path / "s"), "--config", "d_modle=3"]) == 2
    assert "did you mean d_model" in capsys.readouterr().err


def test_the_sweep_rehearses_on_a_cpu(tmp_path):
    from tpu_scripts import byte_transformer_sweep as sweep

    tiny = (
        "d_model=16 num_layers=1 num_heads=1 seq_len=32 batch_size=2 max_files=4 "
        "max_bytes=512 warmup_steps=1"
    )
    argv = [
        "--out",
        str(tmp_path),
        "--allow-cpu-rehearsal",
        "--steps",
        "4",
        "--evals",
        "1",
        "--config",
        tiny,
        "--config",
        "d_model=16 num_heads=3",
    ]
    assert sweep.main(argv) == 0
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert result["kind"] == "cpu rehearsal — not a TPU result"
    finished, failed = result["runs"]
    assert finished["steps"] == 4 and [p["step"] for p in finished["curve"]] == [2, 4]
    assert finished["overrides"]["schedule_steps"] == 4
    assert all(math.isfinite(p["heldout_bpb"]) for p in finished["curve"])
    assert "num_heads=3 must divide d_model=16" in failed["error"]
