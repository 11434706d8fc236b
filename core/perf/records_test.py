import json
import pathlib

import pytest

from core import documents
from core.perf import records

FIGURES = {"decode_ratio": 21.5, "rows": [1, 2.5, "dense"], "kind": "interleaved"}


def _record(root, folder, date, slug="amd-epyc-2core-cpu", **changes):
    document = records.make_record(folder, "python -m bench", {"x": 1.0}, notes="n")
    document.update(date=date, **changes)
    path = pathlib.Path(root) / folder / f"{date}_{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_written_record_reads_back_with_machine_versions_and_load(tmp_path):
    path = records.write_record("demo_bench", "python -m demo --fast", FIGURES, "notes", tmp_path)
    assert path.parent == tmp_path / "demo_bench"
    record = records.latest("demo_bench", root=tmp_path)
    assert path.name == f"{record.date}_{records.machine_slug(record.machine.model_dump())}.json"
    assert record.figures == FIGURES and record.command == "python -m demo --fast"
    assert record.notes == "notes" and record.schema_version == 1
    assert {"python", "jax", "jaxlib"} <= set(record.versions)
    assert record.machine.cores >= 1 and record.machine.platform == "cpu"
    assert record.load_average is None or len(record.load_average) == 3
    assert json.loads(path.read_text()) == record.model_dump()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(records.ROOT_ENV, str(tmp_path))
    path = records.write_record("demo_bench", "cmd", {"x": 1})
    assert path.is_relative_to(tmp_path)
    assert records.cite("demo_bench").startswith(str(path))


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
        records.write_record(name, command, figures, root=tmp_path)
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
    path = records.write_record("demo_bench", "cmd", {"x": 1.0}, root=tmp_path)
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
