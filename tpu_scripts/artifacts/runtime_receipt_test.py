"""artifact runtime-receipt: written once at a tiny size, verified, tampered with, refused."""

import json

import pytest

from core.state import artifacts as catalogue
from tpu_scripts import artifacts
from tpu_scripts.artifacts import common, runtime_receipt


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipt")
    rc = artifacts.main(["runtime-receipt", "--out", str(out), "--repeats", "2"])
    return rc, out


def test_the_command_writes_a_verified_cpu_rehearsal(written, capsys):
    rc, out = written
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "runtime-receipt.json",
        "runtime-receipt.json.sha256",
        "runtime-receipt.md",
    ]
    document = json.loads((out / "runtime-receipt.json").read_text())
    assert document["tpu_result"] is False and document["label"] == catalogue.CPU_LABEL
    assert document["receipt"]["device_count"] == 8 == document["expected"]["devices"]
    assert all(c["passed"] for c in document["checks"]) and len(document["checks"]) == 4
    report = (out / "runtime-receipt.md").read_text()
    assert report.startswith("# CPU REHEARSAL (not a TPU result): A verified TPU runtime receipt")
    assert "TPU RESULT" not in report
    assert artifacts.main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    # the same through the project's entry point, python -m tpu_scripts artifact ...
    from tpu_scripts import __main__ as entry

    assert entry.main(["artifact", "verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out


def test_a_tampered_receipt_is_refused(written, tmp_path, capsys):
    _, out = written
    copy = tmp_path / "runtime-receipt.json"
    text = (out / "runtime-receipt.json").read_text()
    copy.write_text(text.replace('"device_count": 8', '"device_count": 9', 1))
    (tmp_path / "runtime-receipt.json.sha256").write_text(
        (out / "runtime-receipt.json.sha256").read_text()
    )
    assert artifacts.main(["verify", str(copy)]) == 1
    assert "changed after it was written" in capsys.readouterr().err
    # the hash recomputed to match, but the schema broken: still refused
    document = json.loads(text)
    del document["receipt"]["collective"]
    copy.write_text(json.dumps(document))
    digest = catalogue.canonical_sha256(document)
    (tmp_path / "runtime-receipt.json.sha256").write_text(digest)
    assert artifacts.main(["verify", str(copy)]) == 1
    assert "receipt.collective" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("accelerator_type", "devices", "local"),
    [("v5litepod-8", 8, 8), ("v5p-8", 4, 4), ("v5litepod-16", 16, 8), ("tpu7x:2x2x1", 8, 8)],
)
def test_expected_tpu_topology_from_the_accelerator_type(accelerator_type, devices, local):
    expected = runtime_receipt.expected_topology("tpu", accelerator_type, 8)
    assert (expected["devices"], expected["local_devices"]) == (devices, local)
    assert expected["kind_prefix"] == "TPU"


def test_an_unknown_topology_fails_the_device_check_instead_of_passing(written):
    _, out = written
    receipt = json.loads((out / "runtime-receipt.json").read_text())["receipt"]
    assert "pass --accelerator-type" in runtime_receipt.expected_topology("tpu", None, 8)
    rows = runtime_receipt.checks(receipt, runtime_receipt.expected_topology("tpu", "v9-8", 8))
    assert [r["passed"] for r in rows if "topology" in r["what"]] == [False]
    wrong = runtime_receipt.expected_topology("cpu", None, 4)  # 8 devices seen, 4 expected
    assert not all(r["passed"] for r in runtime_receipt.checks(receipt, wrong))


def test_only_the_receipts_backend_makes_a_tpu_result(written):
    _, out = written
    receipt = json.loads((out / "runtime-receipt.json").read_text())["receipt"]
    faked = {**receipt, "backend": "tpu"}
    tpu = common.envelope("runtime-receipt", faked, [], [])
    assert tpu["tpu_result"] is True and tpu["label"] == "TPU RESULT"
    cpu = common.envelope("runtime-receipt", receipt, [], [])
    assert cpu["tpu_result"] is False
    common.validate(common.Envelope, tpu)
    with pytest.raises(ValueError, match="only a TPU run is a TPU result"):
        common.validate(common.Envelope, {**cpu, "label": "TPU RESULT", "tpu_result": True})


def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    assert artifacts.main(["runtime-receipt", "--out", str(out), "--repeats", "0"]) == 2
    assert "--repeats must be in 1..1000" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        artifacts.main(["receipt", "--out", str(out)])  # no such artifact
    assert stop.value.code == 2 and "invalid choice: 'receipt'" in capsys.readouterr().err
    assert not out.exists()
