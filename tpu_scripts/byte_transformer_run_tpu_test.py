"""tpu_scripts/byte_transformer_run_tpu.py on a CPU host: refusals and argument checks in
this process (the parent starts no JAX), and one tiny CPU rehearsal of every part in fresh
processes (bookkeeping, never speed)."""

import json
import pathlib
import subprocess
import sys

import pytest

from core import curriculum, runtime
from tpu_scripts import byte_transformer_run_tpu as script

SCRIPT = pathlib.Path(curriculum.REPO_ROOT) / "tpu_scripts" / "byte_transformer_run_tpu.py"
TINY = [
    "--steps", "6", "--eval-every", "3", "--ckpt-every", "2", "--compare-steps", "3",
    "--contexts", "12,20", "--new-tokens", "4", "--repeats", "1", "--budget-s", "600",
    "d_model=16", "num_layers=1", "num_heads=2", "seq_len=16", "batch_size=2", "max_files=4",
    "max_bytes=1024", "min_piece=4",
]  # fmt: skip


def test_refuses_on_a_host_without_a_tpu_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert script.main(["--out", str(out), *TINY]) == script.EXIT_REFUSED
    assert "refused" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--compare-steps", "9"], "exceeds --steps"),
        (["--resume-step", "3"], "checkpoint step"),
        (["--repeats", "0"], "--repeats"),
        (["dmodel=8"], "unknown config key"),
    ],
)
def test_bad_arguments_exit_2_before_anything_is_written(tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert script.main(["--out", str(out), "--allow-cpu-rehearsal", *TINY, *extra]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_the_resume_step_and_the_position_table_follow_the_run():
    assert script.resume_step(4000, 1000) == 3000 and script.resume_step(4001, 1000) == 4000
    assert script.resume_step(10, 2, asked=4) == 4
    with pytest.raises(ValueError, match="checkpoint step"):
        script.resume_step(10, 10)
    args = script.build_parser().parse_args(["--out", "x"])
    args.argv = []
    spec = script.make_spec(args)
    # the longest prompt and its new bytes need positions: 2048 + 128
    assert spec["config"]["max_len"] == 2176 and spec["config"]["d_model"] == 256
    assert spec["resume_step"] == 3000 and spec["config"]["max_to_keep"] >= 5


def test_a_cpu_rehearsal_runs_every_part_and_keeps_the_bookkeeping(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--allow-cpu-rehearsal", *TINY,
         "--record", "chip_run_rehearsal"],
        capture_output=True, text=True, cwd=curriculum.REPO_ROOT, timeout=300,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads((out / "cpu_rehearsal_result.json").read_text())
    assert document["is_tpu_result"] is False and document["kind"].startswith("cpu rehearsal")
    assert document["parent_started_jax"] is False  # a plain driver: the chip stays free
    assert not (out / script.PARTIAL_FILE).exists()
    summary = document["summary"]
    assert summary["training"]["steps"] == 6 and len(summary["training"]["heldout"]) == 2
    assert summary["resume"]["identical"] and summary["resume"]["step"] == 5  # C = 4
    for name in ("default", "highest"):
        # both "chips" are this CPU: the same program gives the same losses
        line = summary["cpu_vs_tpu"][name]
        assert line["agrees"] and line["steps"] == 3, line
    assert summary["cpu_vs_tpu"]["default"]["max_relative_difference"] == 0.0
    contexts = summary["decode"]["contexts"]
    assert [c["prompt_len"] for c in contexts] == [12, 20]
    assert all(c["greedy"]["identical"] for c in contexts)
    metrics = (out / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == list(range(1, 7))
    assert not (out / "run" / "checkpoints").exists()  # deleted without --keep-checkpoints
    for part in ("train", "resume", "highest", "cpu", "decode", "record"):
        assert (out / "logs" / f"{part}.log").exists()
    for part in ("train", "resume", "highest", "cpu", "decode"):
        assert document["parts"][part]["exit_status"] == 0, document["parts"][part]
    # the record part writes, or refuses a machine other processes kept busy (not under test)
    record = document["parts"]["record"]
    assert (record["exit_status"] == 0 and "path" in record) or (
        record["exit_status"] == 1 and "BusyMachine" in record.get("error", "")
    ), record
    assert "[parent] resume: step 5" in result.stdout
