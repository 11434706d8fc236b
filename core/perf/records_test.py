import json
import pathlib

import jax
import pytest

from core import documents, runtime
from core.perf import records

FIGURES = {"decode_ratio": 21.5, "rows": [1, 2.5, "dense"], "kind": "interleaved"}


def _reading(wall_s, busy_s, own_s, load_average=(0.1, 0.1, 0.1)):
    """An injected load reading (tests never depend on the machine's real load)."""
    return {
        "load_average": list(load_average),
        "machine_busy_s": busy_s,
        "own_s": own_s,
        "wall_s": wall_s,
    }


def _load(others_cores, own_cores=1.0, seconds=600.0, cpus=2, start_load=(0.1, 0.1, 0.1)):
    start = _reading(0.0, 1000.0, 10.0, start_load)
    busy = 1000.0 + (others_cores + own_cores) * seconds
    end = _reading(seconds, busy, 10.0 + own_cores * seconds, (9.66, 10.26, 8.96))
    return records.measure_load(start, end, cpus=cpus)


def _quiet():
    return _load(others_cores=0.0)


def _record(root, folder, date, slug="amd-epyc-2core-cpu", **changes):
    document = records.make_record(folder, "python -m bench", {"x": 1.0}, notes="n", load=_quiet())
    document.update(date=date, **changes)
    path = pathlib.Path(root) / folder / f"{date}_{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_written_record_reads_back_with_machine_versions_and_load(tmp_path):
    path = records.write_record(
        "demo_bench", "python -m demo --fast", FIGURES, "notes", tmp_path, _quiet()
    )
    assert path.parent == tmp_path / "demo_bench"
    record = records.latest("demo_bench", root=tmp_path)
    assert path.name == f"{record.date}_{records.machine_slug(record.machine.model_dump())}.json"
    assert record.figures == FIGURES and record.command == "python -m demo --fast"
    assert record.notes == "notes" and record.schema_version == 1
    assert {"python", "jax", "jaxlib"} <= set(record.versions)
    # the backend this test computes on: the CPU in CI, the TPU in chip mode
    assert record.machine.cores >= 1 and record.machine.platform == jax.default_backend()
    assert record.load_average is None or len(record.load_average) == 3
    assert json.loads(path.read_text()) == record.model_dump(exclude_unset=True)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(records.ROOT_ENV, str(tmp_path))
    path = records.write_record("demo_bench", "cmd", {"x": 1}, load=_quiet())
    assert path.is_relative_to(tmp_path)
    assert records.cite("demo_bench").startswith(str(path))


@pytest.mark.skipif(
    not runtime.has_module("torch"),
    reason=str(runtime.host_lacks(("torch",), why="the torch version's record")),
)
def test_torch_version_is_kept_when_torch_is_imported():
    import torch  # noqa: F401

    assert "torch" in records.make_record("demo", "cmd", {"x": 1})["versions"]


@pytest.mark.parametrize(
    "name, command, figures, message",
    [
        ("Demo-Bench", "cmd", {"x": 1}, "snake_case"),
        ("demo", "", {"x": 1}, "exact command"),
        ("demo", "cmd", {}, "figures"),
        ("demo", "cmd", {"x": True}, r"'figures\.x'"),
        ("demo", "cmd", {"x": {"nested": 1}}, r"'figures\.x'"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, name, command, figures, message):
    with pytest.raises(ValueError, match=message):
        records.write_record(name, command, figures, root=tmp_path, load=_quiet())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "damage, field",
    [
        (lambda d: d["machine"].pop("cores"), "machine.cores"),
        (lambda d: d.update(date="2026-13-40"), "date"),
        (lambda d: d["figures"].update(x=None), "figures.x"),
        (lambda d: d.update(load_average=[1.0]), "load_average"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d.update(schema_version=2), "schema_version"),
    ],
)
def test_a_damaged_record_is_refused_naming_file_and_field(tmp_path, damage, field):
    path = records.write_record("demo_bench", "cmd", {"x": 1.0}, root=tmp_path, load=_quiet())
    document = json.loads(path.read_text())
    damage(document)
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError) as error:
        records.latest("demo_bench", root=tmp_path)
    assert str(path) in str(error.value) and repr(field) in str(error.value)


def test_not_json_and_a_misfiled_record_are_refused(tmp_path):
    path = _record(tmp_path, "demo_bench", "2026-01-02")
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"{path}: not JSON"):
        records.latest("demo_bench", root=tmp_path)
    path.unlink()
    _record(tmp_path, "demo_bench", "2026-01-02", name="other_bench")
    with pytest.raises(ValueError, match="'name'"):
        records.latest("demo_bench", root=tmp_path)


def test_a_missing_record_says_which(tmp_path):
    with pytest.raises(FileNotFoundError, match="no benchmark record 'absent'"):
        records.latest("absent", root=tmp_path)


def test_latest_picks_the_newest_date_not_the_last_written(tmp_path):
    _record(tmp_path, "demo_bench", "2026-03-01", slug="zz-machine")
    newest = _record(tmp_path, "demo_bench", "2026-11-30", slug="aa-machine")
    _record(tmp_path, "demo_bench", "2025-12-31", slug="zzz-machine")
    assert records.latest("demo_bench", root=tmp_path).date == "2026-11-30"
    assert records.latest_path("demo_bench", root=tmp_path) == newest
    assert records.cite("demo_bench", root=tmp_path).startswith(f"{newest} (2026-11-30, ")


def test_cite_is_repo_relative_for_the_repo_records():
    name = next(p.name for p in sorted(records.RECORDS_DIR.iterdir()) if p.is_dir())
    citation = records.cite(name)
    assert citation.startswith(f"benchmarks/records/{name}/")
    assert citation.endswith(f", {records.latest(name).machine.label})")


def _repo_records():
    return sorted(records.RECORDS_DIR.glob("*/*.json"))


@pytest.mark.parametrize("path", _repo_records(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_record_in_the_repo_is_valid(path):
    record = records.load(path)
    assert path.name == f"{record.date}_{records.machine_slug(record.machine.model_dump())}.json"


def test_the_repo_keeps_records_and_git_ignores_only_results():
    assert _repo_records(), "benchmarks/records/ holds the kept records"
    ignore = (records.REPO / ".gitignore").read_text().split()
    assert "benchmarks/results/" in ignore and not any("records" in line for line in ignore)


def test_the_record_model_is_strict_and_closed():
    schema = documents.json_schema(documents.BenchmarkRecord)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) >= {"schema_version", "name", "date", "machine", "figures"}


# -- load: a record taken on a busy machine measures the load, not the machine --------------


def test_a_busy_machine_is_refused_and_nothing_is_written(tmp_path):
    busy = _load(others_cores=1.58)  # the byte Transformer bench's run of 2026-12-02
    with pytest.raises(records.BusyMachine) as refused:
        records.write_record("demo_bench", "python -m demo", FIGURES, root=tmp_path, load=busy)
    message = str(refused.value)
    assert "1.58 of 2 cores" in message and "limit" in message and "python -m demo" in message
    assert list(tmp_path.iterdir()) == []


def test_a_quiet_run_keeps_its_measured_load(tmp_path):
    quiet = _load(others_cores=0.1, own_cores=1.9, seconds=120.0)
    path = records.write_record("demo_bench", "cmd", FIGURES, root=tmp_path, load=quiet)
    record = records.load(path)
    assert record.load.other_processes_cores == pytest.approx(0.1)
    assert record.load.own_cores == pytest.approx(1.9)
    assert record.load.seconds == pytest.approx(120.0)
    assert record.load.limit_cores == pytest.approx(records.LOAD_LIMIT * 2)
    assert record.under_load == "" and records.cite("demo_bench", root=tmp_path)


def test_the_load_is_what_others_used_not_this_process(tmp_path):
    # this process kept both cores busy: a load average near 2 says nothing about others
    ours = _load(others_cores=0.0, own_cores=2.0, start_load=(2.4, 2.0, 1.0))
    assert ours["other_processes_cores"] == 0.0
    assert records.write_record("demo_bench", "cmd", {"x": 1}, root=tmp_path, load=ours)


def test_without_proc_stat_the_load_average_before_the_run_decides(tmp_path):
    start = _reading(0.0, None, 0.0, (1.5, 1.2, 0.9))
    end = _reading(60.0, None, 60.0, (2.5, 1.5, 1.0))
    measured = records.measure_load(start, end, cpus=2)
    assert measured["other_processes_cores"] == 1.5
    with pytest.raises(records.BusyMachine, match="1.50 of 2 cores"):
        records.write_record("demo_bench", "cmd", {"x": 1}, root=tmp_path, load=measured)


def test_the_default_reading_spans_the_process_and_counts_its_children():
    reading = records.read_load()
    assert set(reading) == {"load_average", "machine_busy_s", "own_s", "wall_s"}
    assert records.PROCESS_START["wall_s"] <= reading["wall_s"]
    assert records.PROCESS_START["own_s"] <= reading["own_s"]


def _write_marked(root, date, reason, slug="amd-epyc-2core-cpu"):
    document = records.make_record("demo_bench", "python -m demo --slow", {"x": 1.0})
    document.update(date=date, under_load=reason)
    path = pathlib.Path(root) / "demo_bench" / f"{date}_{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_record_marked_under_load_is_never_cited(tmp_path):
    marked = _write_marked(tmp_path, "2026-12-02", "others kept 1.58 of 2 cores busy")
    with pytest.raises(records.NoCitableRecord) as none:
        records.cite("demo_bench", root=tmp_path)
    message = str(none.value)
    assert str(marked) in message and "1.58 of 2 cores" in message
    assert "python -m demo --slow" in message  # how to re-record it
    assert isinstance(none.value, FileNotFoundError)
    assert records.load(marked).under_load  # still readable, for whoever inspects it
    quiet = _record(tmp_path, "demo_bench", "2026-01-01", slug="quiet-machine")
    assert records.latest_path("demo_bench", root=tmp_path) == quiet  # older, but quiet
    assert records.cite("demo_bench", root=tmp_path).startswith(f"{quiet} (2026-01-01, ")


LOADED = ("bench", "bf16", "block_sweep", "decode_ab")


@pytest.mark.parametrize("part", LOADED)
def test_the_byte_transformer_records_taken_under_load_are_not_cited(part):
    name = f"byte_transformer_{part}"
    loaded = [p for p in records.paths(name) if "2026-12-02_amd-epyc" in p.name]
    assert loaded and all("1.58 of 2 cores" in records.load(p).under_load for p in loaded)
    try:
        cited = records.latest_path(name)
    except records.NoCitableRecord:
        return
    assert cited not in loaded


def test_every_repo_record_measured_over_the_limit_is_marked():
    for path in _repo_records():
        record = records.load(path)
        if record.load is not None and record.load.other_processes_cores is not None:
            over = record.load.other_processes_cores > record.load.limit_cores
            assert not over or record.under_load, path


# -- figures keep their significant digits ---------------------------------------------------


def test_a_record_keeps_small_non_zero_floats_non_zero(tmp_path):
    figures = {
        "error": 2.2e-07,  # LiteRT float vs JAX: rounding to 5 decimals made it 0.0
        "mean": 3.14159265,
        "peak": 438312777603.0,
        "rows": [1.23456789e-9, 7, "dense"],
        "count": 26076,
    }
    path = records.write_record("demo_bench", "cmd", figures, root=tmp_path, load=_quiet())
    kept = records.load(path).figures
    assert kept["error"] == 2.2e-07 and kept["mean"] == 3.1416
    assert kept["peak"] == 4.3831e11 and kept["rows"] == [1.2346e-9, 7, "dense"]
    assert kept["count"] == 26076 and isinstance(kept["count"], int)


def _rounded_figures(path):
    """``round(x, n)`` calls inside the statement that builds a record's figures."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        if not any(isinstance(t, ast.Name) and "figures" in t.id for t in targets if t):
            continue
        for call in ast.walk(node.value):
            is_round = isinstance(call, ast.Call) and getattr(call.func, "id", "") == "round"
            if is_round and len(call.args) + len(call.keywords) > 1:
                found.append(f"{path.name}:{call.lineno}")
    return found


def test_no_record_writer_rounds_figures_to_decimal_places():
    writers = sorted((records.REPO / "benchmarks").glob("*.py"))
    writers.append(records.REPO / "capstones" / "byte_transformer" / "bench" / "record.py")
    assert not [hit for path in writers for hit in _rounded_figures(path)]


def test_a_record_taken_on_a_tpu_names_the_chip_in_its_machine_and_file(tmp_path, monkeypatch):
    """The TPU host's CPU reads "unknown, 13 cores": the chip must name the machine."""
    import jax

    class Chip:
        device_kind = "TPU v5 lite"

    monkeypatch.setattr(jax, "devices", lambda: [Chip()])
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    path = records.write_record("demo_bench", "python -m demo", {"x": 1.0}, "", tmp_path, _quiet())
    record = records.load(path)
    assert (
        record.machine.accelerator.kind == "TPU v5 lite" and record.machine.accelerator.count == 1
    )
    assert record.machine.label.startswith("1 x TPU v5 lite; host CPU: ")
    assert path.name.startswith(f"{record.date}_tpu-v5-lite-x1-") and path.name.endswith(
        "-tpu.json"
    )


def test_a_cpu_record_keeps_its_machine_slug_and_has_no_accelerator():
    machine = {"label": "x", "cpu": "AMD EPYC", "cores": 2, "platform": "cpu"}
    assert records.machine_slug(machine) == "amd-epyc-2core-cpu"
    assert records.accelerator("cpu", ["cpu"], 8) is None
    assert records.accelerator("tpu", ["TPU v5 lite"], 4) == {"kind": "TPU v5 lite", "count": 4}
