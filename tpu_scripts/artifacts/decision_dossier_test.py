"""artifact decision-dossier: memory (compiled for v5e:2x2), precision and XProf decisions."""

import json

import pytest

from core import numerics
from core.state import artifacts as catalogue
from core.tpu import topology_compile
from tpu_scripts import artifacts


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("dossier")
    argv = ["decision-dossier", "--out", str(out), "--batch", "4", "--seq", "16"]
    return artifacts.main(argv), out


def test_three_sections_each_end_in_a_decision(written):
    rc, out = written
    doc = json.loads((out / "decision-dossier.json").read_text())
    assert rc == 0, [c for c in doc["checks"] if not c["passed"]]
    assert catalogue.load_verified(out / "decision-dossier.json")
    assert [d["topic"] for d in doc["decisions"]] == ["memory", "precision", "xprof"]
    assert doc["label"] == catalogue.CPU_LABEL and not doc["tpu_result"]
    formats = {r["format"]: r for r in doc["precision"]}
    assert formats["float32"]["relative error vs float64"] < numerics.tolerance("float32")
    assert (
        formats["float32"]["relative error vs float64"]
        < formats["bfloat16"]["relative error vs float64"]
        < formats["fp8 e4m3"]["relative error vs float64"]
    )
    assert doc["decisions"][1]["decision"].startswith("bfloat16 for the matmuls")
    assert doc["xprof"]["top_ops"] and (out / "trace").is_dir()
    report = (out / "decision-dossier.md").read_text()
    assert "compiled for v5e:2x2" in report.replace("Memory: ", "compiled for ")


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="needs libtpu")
def test_memory_is_compiled_for_the_topology_and_labelled_so(written):
    _, out = written
    memory = json.loads((out / "decision-dossier.json").read_text())["memory"]
    assert memory["compiled"] and "nothing ran on a TPU" in memory["compiled_for"]
    assert 0 < memory["peak_bytes_per_device"] < memory["capacity_bytes_per_device"]
    assert memory["headroom"] == pytest.approx(
        1 - memory["peak_bytes_per_device"] / memory["capacity_bytes_per_device"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topology", "v5litepod-8"], "expected GEN:AxB"),
        pytest.param(
            ["--topology", "v5e:1x1"],
            "libtpu refused topology",
            marks=pytest.mark.skipif(
                topology_compile.libtpu_problem() is not None, reason="needs libtpu"
            ),
        ),
        (["--batch", "0"], "--batch must be in 1..4096"),
        (["--error-budget", "2"], "--error-budget must be in (0, 1)"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    assert artifacts.main(["decision-dossier", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
