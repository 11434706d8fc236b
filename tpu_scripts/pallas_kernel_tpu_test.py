"""tpu_scripts/pallas_kernel_tpu.py on a CPU host: refuses without the flag (exit 3, nothing
written); with --allow-cpu-rehearsal writes a result marked "not a TPU result" (fresh
processes, tiny sizes)."""

import json
import pathlib
import subprocess
import sys

from capstones.byte_transformer import run_manifest
from core import curriculum, runtime

SCRIPT = pathlib.Path(curriculum.REPO_ROOT) / "tpu_scripts" / "pallas_kernel_tpu.py"
TINY = ["--ts", "32", "--heads", "1", "--d", "16", "--blocks", "16,32", "--repeats", "2"]


def run(*argv, timeout=240):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1"),
        timeout=timeout,
    )


def test_result_file_names_agree_with_the_manifest():
    from tpu_scripts import pallas_kernel_tpu

    assert pallas_kernel_tpu.RESULT_FILES == (
        run_manifest.TPU_RESULT_FILE,
        run_manifest.REHEARSAL_RESULT_FILE,
    )


def test_help_documents_the_round_trip():
    from tpu_scripts import pallas_kernel_tpu

    text = pallas_kernel_tpu.build_parser().format_help()
    for step in ("launch create", "launch stage", "launch run", "launch fetch", "launch delete"):
        assert step in text
    assert "--allow-cpu-rehearsal" in text and "pip wheel" in text


def test_bad_arguments_exit_2(tmp_path):
    from tpu_scripts import pallas_kernel_tpu

    out = tmp_path / "bad"
    assert pallas_kernel_tpu.main(["--out", str(out), "--ts", "48", "--blocks", "32"]) == 2
    assert pallas_kernel_tpu.main(["--out", str(out), "--ts", "64", "--blocks", "16,48"]) == 2
    assert pallas_kernel_tpu.main(["--out", str(out), "--ts", "64", "--blocks", "0"]) == 2
    assert pallas_kernel_tpu.main(["--out", str(out), "--ts", "64", "--blocks", "16,16"]) == 2
    assert pallas_kernel_tpu.main(["--out", str(out), "--ts", "x"]) == 2
    assert not out.exists()


def test_refuses_on_cpu_without_the_flag(tmp_path):
    out = tmp_path / "result"
    result = run("--out", str(out), *TINY)
    assert result.returncode == 3
    assert "refused" in result.stderr and "not 'tpu'" in result.stderr
    assert not out.exists()  # nothing written, not even the folder


def test_cpu_rehearsal_is_marked_not_a_tpu_result(tmp_path):
    out = tmp_path / "rehearsal"
    result = run("--out", str(out), *TINY, "--allow-cpu-rehearsal")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (out / run_manifest.TPU_RESULT_FILE).exists()
    document = json.loads((out / run_manifest.REHEARSAL_RESULT_FILE).read_text())
    assert document["kind"] == "cpu rehearsal — not a TPU result"
    assert document["is_tpu_result"] is False and document["backend"] == "cpu"
    assert "interpret mode" in document["kernel_mode"] and document["agree"] is True
    # the block sweep: one row per (T, block), each with its own timings and compile memory
    assert [(row["T"], row["block"]) for row in document["rows"]] == [(32, 16), (32, 32)]
    assert document["settings"]["blocks"] == [16, 32]
    assert [p["block"] for p in document["block_sweep"]["T=32"]] == [16, 32]
    for row in document["rows"]:
        assert set(row["errors vs mha_reference"]) == {"O (forward)", "O", "dQ", "dK", "dV"}
        assert all(e <= row["tolerance"] for e in row["errors vs mha_reference"].values())
        for name, timing in row["programs"].items():
            assert timing["compile_s"] > 0 and len(timing["samples_s"]) == 2
            memory = timing["compiled memory (bytes)"]
            assert memory["argument_size_in_bytes"] > 0, name
        assert "not a TPU" in row["compiled memory from"]
    runtime_record = json.loads((out / run_manifest.RUNTIME_FILE).read_text())
    assert runtime_record["backend"] == "cpu" and not run_manifest.is_tpu_run(runtime_record)
    again = run("--out", str(out), *TINY, "--allow-cpu-rehearsal", timeout=120)
    assert again.returncode == 2 and "already holds" in again.stderr
