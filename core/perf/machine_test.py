import json

import pytest

from core.perf import machine

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
"""


def test_cpu_model_reads_proc_cpuinfo_text():
    assert machine.cpu_model(CPUINFO) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert machine.cpu_model("no model line") != ""


def test_label_names_the_machine():
    label = machine.machine_label()
    assert label.endswith("(this CPU)") and f"{machine.core_count()} cores" in label


def test_measurements_count_flops_and_bytes():
    matmul = machine.measure_matmul(32, "float32", repeats=2)
    assert matmul["flops"] == 2 * 32**3
    assert matmul["flop_per_s"] == pytest.approx(matmul["flops"] / matmul["seconds"])
    copy = machine.measure_bandwidth(1, repeats=2)
    assert copy["bytes"] == 2 * 250_000 * 4  # 1 MB of float32, read and written
    assert copy["bytes_per_s"] == pytest.approx(copy["bytes"] / copy["seconds"])


def test_load_reads_a_report(tmp_path):
    report = {
        "machine": "m",
        "peak_flop_per_s": 1e9,
        "bytes_per_s": 1e9,
        "matmul_float32": {"kernel": "k", "seconds": 1.0, "flop_per_s": 1e9},
    }
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(report))
    assert machine.load(path) == report
    assert machine.report_rows(report)[0]["sustained"] == "1 GFLOP/s"


def test_load_rejects_missing_or_broken_files(tmp_path):
    assert machine.load(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert machine.load(tmp_path / "bad.json") is None
    (tmp_path / "partial.json").write_text(json.dumps({"peak_flop_per_s": 1.0}))
    assert machine.load(tmp_path / "partial.json") is None


def test_bad_sizes():
    with pytest.raises(ValueError, match="n and repeats"):
        machine.measure_matmul(0)
