"""The capstone's document models: the committed JSON Schemas are current, a bad document is
refused with the file and the first bad field named, and nothing invalid is written."""

import json
import re

import pytest

from capstones.byte_transformer import args, bench_documents, documents

EVAL = {
    "loss": 5.04,
    "bits_per_byte": 7.27,
    "tokens": 248,
    "step": 6,
    "heldout_files": 3,
    "heldout_sha256": "52" * 32,
    "train_files": 3,
    "overlap_files": [],
    "uniform_bits_per_byte": 8.0,
}
RECORD = {
    "step": 3,
    "loss": 5.57,
    "tokens": 62,
    "step_time_s": 0.034,
    "grad_norm": 1.9,
    "tokens_per_s": 1823.5,
    "elapsed_s": 9.96,
    "heldout_loss": 5.53,
    "heldout_bpb": 7.98,
}


def _with(document, **changes):
    return json.loads(json.dumps(document)) | changes


def _without(document, key):
    return {k: v for k, v in document.items() if k != key}


@pytest.mark.parametrize("name", sorted(documents.SCHEMAS))
def test_the_committed_json_schemas_are_current(name):
    path = documents.SCHEMA_DIR / f"{name}.schema.json"
    assert path.is_file(), f"{path} is missing: run python -m capstones.byte_transformer.documents"
    assert path.read_text(encoding="utf-8") == documents.schema_text(documents.SCHEMAS[name]), (
        f"{path} is stale: run python -m capstones.byte_transformer.documents"
    )


def test_no_schema_file_without_a_model():
    files = {p.name for p in documents.SCHEMA_DIR.glob("*.schema.json")}
    assert files == {f"{name}.schema.json" for name in documents.SCHEMAS}


def test_a_good_document_is_accepted_with_unknown_fields_kept():
    assert documents.problem(documents.EvalResult, EVAL) is None
    assert documents.problem(documents.EvalResult, _with(EVAL, added_later=[1])) is None
    record = {k: v for k, v in RECORD.items() if not k.startswith("heldout")}
    assert documents.problem(documents.MetricsRecord, record) is None  # not an eval step


@pytest.mark.parametrize(
    "model, document, message",
    [
        (documents.EvalResult, _without(EVAL, "loss"), "eval.json lacks 'loss'"),
        (documents.EvalResult, _with(EVAL, tokens=True), "tokens: .*integer, got True"),
        (documents.EvalResult, _with(EVAL, tokens="248"), "tokens: .*integer, got '248'"),
        (documents.EvalResult, _with(EVAL, overlap_files=[3]), r"overlap_files\[0\]: .*string"),
        (documents.MetricsRecord, _with(RECORD, heldout_loss="x"), "heldout_loss: .*number"),
        (documents.EvalResult, [EVAL], "eval.json must be a JSON object, got list"),
        (
            documents.CacheReport,
            {"format": "byte_transformer bench", "version": 1},
            "format: Input should be 'byte_transformer cache report'",
        ),
    ],
)
def test_the_first_bad_field_is_named(model, document, message):
    found = documents.problem(model, document)
    assert found is not None and re.search(message, found), found


def test_load_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(_with(EVAL, step=6.5)))
    with pytest.raises(documents.DocumentError, match=rf"{path}: step: .*integer, got 6.5"):
        documents.load(path, documents.EvalResult)
    assert issubclass(documents.DocumentError, args.UsageError)  # exit 2 through the CLI
    path.write_text("{not json")
    with pytest.raises(documents.DocumentError, match=f"{path} is not JSON"):
        documents.load(path, documents.EvalResult)
    path.write_text(json.dumps(EVAL))
    assert documents.load(path, documents.EvalResult) == EVAL
    assert documents.load_optional(tmp_path / "none.json", documents.EvalResult) is None
    with pytest.raises(FileNotFoundError):
        documents.load(tmp_path / "none.json", documents.EvalResult)


def test_an_invalid_document_is_never_written(tmp_path):
    path = tmp_path / "eval.json"
    with pytest.raises(ValueError, match="refusing to write .*eval.json: eval.json lacks 'step'"):
        documents.write(path, documents.EvalResult, _without(EVAL, "step"))
    assert not path.exists()
    documents.write(path, documents.EvalResult, EVAL)
    assert json.loads(path.read_text()) == EVAL
    line = documents.json_line(documents.MetricsRecord, RECORD)
    assert line.endswith("\n") and json.loads(line) == RECORD
    with pytest.raises(ValueError, match="metrics record: loss: .*number"):
        documents.json_line(documents.MetricsRecord, _with(RECORD, loss=None))


def test_aliased_fields_keep_their_json_names():
    target = {"value": 1.2, "target": 1.15, "op": ">=", "pass": True}
    assert documents.problem(bench_documents.Target, target) is None
    assert documents.problem(bench_documents.Target, _with(target, op="=")) is not None
    schema = json.loads(documents.schema_text(documents.BenchResult))
    assert "pass" in schema["$defs"]["Target"]["properties"]
    assert "schema" in json.loads(documents.schema_text(documents.Plan))["properties"]
