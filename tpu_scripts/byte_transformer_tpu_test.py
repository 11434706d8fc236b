"""tpu_scripts/byte_transformer_tpu.py on a CPU host: refuses without the flag; with
--allow-cpu-rehearsal writes a result marked "not a TPU result" (fresh processes)."""

import json
import pathlib
import subprocess
import sys

import pytest

from capstones.byte_transformer import run_manifest
from core import curriculum, runtime

SCRIPT = pathlib.Path(curriculum.REPO_ROOT) / "tpu_scripts" / "byte_transformer_tpu.py"
TINY = [
    "d_model=32",
    "num_layers=2",
    "num_heads=2",
    "seq_len=32",
    "batch_size=2",
    "max_files=4",
    "max_bytes=2048",
    "max_len=64",
]


def run(*argv, timeout=240):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"),
        timeout=timeout,
    )


def test_result_file_names_agree_with_the_manifest():
    from tpu_scripts import byte_transformer_tpu

    assert byte_transformer_tpu.RESULT_FILES == tuple(run_manifest.RESULT_FILES)


def test_help_documents_the_gcloud_flow():
    result = run("--help", timeout=60)
    assert result.returncode == 0
    for step in ("launch create", "launch stage", "launch run", "launch fetch", "launch delete"):
        assert step in result.stdout
    assert "NOT_FOUND" in result.stdout and "run-manifest" in result.stdout


def test_refuses_on_cpu_without_the_flag(tmp_path):
    out = tmp_path / "result"
    result = run("--out", str(out), "--steps", "2", *TINY)
    assert result.returncode == 3
    assert "refused" in result.stderr and "not 'tpu'" in result.stderr
    assert not out.exists()  # nothing written, not even the folder


def test_cpu_rehearsal_is_marked_not_a_tpu_result(tmp_path):
    out = tmp_path / "rehearsal"
    result = run(
        "--out", str(out), "--steps", "3", "--repeats", "2", "--allow-cpu-rehearsal", *TINY
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (out / run_manifest.TPU_RESULT_FILE).exists()
    document = json.loads((out / run_manifest.REHEARSAL_RESULT_FILE).read_text())
    assert document["kind"] == "cpu rehearsal — not a TPU result"
    assert document["is_tpu_result"] is False and document["backend"] == "cpu"
    single = document["train_step"]["single_device"]
    assert single["step"]["median_s"] > 0 and single["compile_s"] > 0
    assert len(single["step"]["samples_s"]) == 2
    assert single["tokens_per_step"] == 2 * 32
    parallel = document["train_step"]["data_parallel"]
    assert parallel["devices"] == 2 and parallel["step"]["median_s"] > 0  # 2 CPU devices
    assert document["train_step"]["peak_fraction"] is None
    assert document["training"]["last_step"] == 3
    metrics = [
        json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert document["training"]["last_loss"] == metrics[-1]["loss"]
    manifest = json.loads((out / run_manifest.MANIFEST_FILE).read_text())
    assert manifest["is_tpu_run"] is False and manifest["verdict"].startswith("not a TPU run")
    assert manifest["runtime_source"] == "recorded: runtime.json"
    assert manifest["teardown"]["proof"] == "not applicable (CPU)"
    assert all(step["verified"] for step in manifest["checkpoints"]["steps"])
    assert manifest["checkpoints"]["steps"], "the short run saved checkpoints"
    log = (out / "job.log").read_text()
    assert "backend: cpu" in log and manifest["backend_events"]["counts"]["platform"] >= 1
    # a second run into the same folder is refused rather than mixing results
    again = run("--out", str(out), "--steps", "3", "--allow-cpu-rehearsal", *TINY, timeout=120)
    assert again.returncode == 2 and "already holds" in again.stderr


def test_peak_fraction_uses_one_chip_s_bf16_peak():
    from core.tpu import specs
    from tpu_scripts import byte_transformer_tpu

    measurement = {"model_flops_per_step": 3.94e11, "step": {"median_s": 1.0}, "devices": 2}
    fraction = byte_transformer_tpu.peak_fraction(measurement, "TPU v5 lite")
    assert fraction["generation"] == "v5e"
    assert fraction["mfu_vs_bf16_peak"] == 3.94e11 / (2 * specs.chip("v5e").bf16_flops.value)
    assert byte_transformer_tpu.peak_fraction(measurement, "cpu") is None


def documented_commands() -> list[list[str]]:
    """The shell commands of the docstring's TPU flow (backslash continuations joined)."""
    import shlex

    from tpu_scripts import byte_transformer_tpu

    text = byte_transformer_tpu.__doc__.replace("\\\n", " ")
    return [
        shlex.split(line.split(">", 1)[0])
        for line in text.splitlines()
        if line.strip().startswith(("python -m", "gcloud"))
    ]


def test_documented_launch_steps_are_accepted_by_launch(tmp_path):
    commands = documented_commands()
    verbs = [c[4] for c in commands if c[:4] == ["python", "-m", "tpu_scripts", "launch"]]
    assert verbs == ["create", "stage", "run", "fetch", "delete"]
    assert any(c[:2] == ["gcloud", "compute"] and "describe" in c for c in commands)
    from capstones.byte_transformer import args, cli

    (manifest,) = [c for c in commands if c[2:4] == ["capstones.byte_transformer", "run-manifest"]]
    spec = cli.command("run-manifest")
    parsed = args.parse(manifest[4:], spec.options, spec.config_overrides)  # all options known
    assert parsed["claim_tpu"] is True and parsed["teardown_log"] == "results/teardown.log"
    wheel = tmp_path / "dist" / "jax_tpu_lab-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")  # stage checks that the files exist
    for command in commands:
        if command[:4] != ["python", "-m", "tpu_scripts", "launch"]:
            continue
        argv = [str(wheel) if a.startswith("dist/") else a for a in command[3:]]
        argv = [str(SCRIPT) if a == "tpu_scripts/byte_transformer_tpu.py" else a for a in argv]
        if "--" in argv:
            at = argv.index("--")
            argv = [*argv[:at], "--dry-run", *argv[at:]]
        else:
            argv.append("--dry-run")
        result = subprocess.run(
            [sys.executable, "-m", "tpu_scripts", *argv],
            capture_output=True,
            text=True,
            cwd=curriculum.REPO_ROOT,
            env=runtime.child_env(),
            timeout=60,
        )
        assert result.returncode == 0, (argv, result.stderr)
        assert "gcloud compute tpus tpu-vm" in result.stdout
        if argv[1] == "run":
            assert "byte_transformer_tpu.py --out bt_tpu --steps 50" in result.stdout


def test_mfu_comparison_keeps_going_past_a_failed_config(monkeypatch, tmp_path):
    """A config that fails (out of memory on the chip) is recorded with its error; the next
    one is still timed; MFU = causal model FLOPs / median step / the v5e's bf16 peak."""
    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import model_math
    from tpu_scripts import byte_transformer_tpu

    small = config_lib.Config(d_model=32, num_layers=1, seq_len=64, batch_size=2)
    big = config_lib.preset("tpu-v5e")

    def fake_time(config, repeats):
        if config is big:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        step = {"median_s": 0.5}
        return {
            "step": step,
            "repeats": repeats,
            "compile_s": 1.0,
            "tokens_per_s": 256.0,
            "xla_flops_per_device_per_step": 1.0,
        }

    monkeypatch.setattr(byte_transformer_tpu, "time_train_step", fake_time)
    table, measured = byte_transformer_tpu.mfu_comparison(
        {"tpu-v5e": big, "default": small}, 20, "TPU v5 lite", on_tpu=True
    )
    assert table["tpu-v5e"]["error"].startswith("RuntimeError: RESOURCE_EXHAUSTED")
    flops = 6 * (4 * 32 * 32 + 2 * 32 * 128 + 32 * 256) * 2 * 64 + 6 * 1 * 2 * 64 * 64 * 32
    assert table["default"]["model_flops_per_step"] == flops
    assert table["default"]["mfu"] == flops / 0.5 / 197e12
    assert measured["repeats"] == 20
    assert model_math.CAUSAL_FLOP_FORMULA in table["default"]["flop_formula"]
    quiet = {
        "seconds": 9.0,
        "cpus": 13,
        "own_cores": 1.0,
        "other_processes_cores": 0.0,
        "limit_cores": 1.625,
        "load_average_start": None,
        "load_average_end": None,
    }
    path = byte_transformer_tpu.record_mfu(
        "byte_transformer_mfu", tmp_path, ["python"], table, load=quiet
    )
    from core.perf import records

    record = records.load(path)
    assert record.figures["default_mfu"] == float(f"{flops / 0.5 / 197e12:.4e}")
    assert record.figures["tpu_v5e_error"].startswith("RuntimeError")


def test_the_record_counts_attention_both_ways_and_reads_the_profile_by_category():
    """MFU over the full T x T against its closed form (the halved count plus the attention
    FLOPs once more); the profile's figures are its categories' own columns."""
    from tpu_scripts import byte_transformer_tpu

    table = {
        "tpu-v5e": {
            "mfu": 0.5,
            "median_step_s": 0.25,
            "tokens_per_s": 1000.0,
            "model_flops_per_step": 300.0,
            "attention_flops_per_step": 60.0,
        },
        "big": {"error": "RESOURCE_EXHAUSTED"},
    }
    profile = {
        "categories": [
            {"category": "convolution fusion", "share": 0.7, "fraction_of_peak": 0.8,
             "ms_per_step": 7.0},
            {"category": "custom-call", "share": 0.2, "fraction_of_peak": 0.25,
             "ms_per_step": 2.0},
            {"category": "loop fusion", "share": 0.1, "fraction_of_peak": 0.0,
             "ms_per_step": 1.0},
        ]
    }  # fmt: skip
    figures = byte_transformer_tpu.mfu_record_figures(table, profile)
    assert figures["tpu_v5e_mfu_attention_not_halved"] == pytest.approx(0.5 * 360 / 300)
    assert figures["tpu_v5e_step_ms"] == 250.0
    assert figures["profile_busy_ms_per_step"] == pytest.approx(10.0)
    assert figures["profile_attention_ms_per_step"] == 2.0
    assert figures["profile_matmul_fraction_of_peak"] == 0.8
    assert figures["profile_data_formatting_share"] == 0.0  # not in this profile
    assert figures["big_error"] == "RESOURCE_EXHAUSTED" and "big_mfu" not in figures
    assert not any(k.startswith("profile_") for k in byte_transformer_tpu.mfu_record_figures(
        table, {"error": "no trace"}))  # fmt: skip
