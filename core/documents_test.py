import json
import re

import pydantic
import pytest

from core import documents


class _Inner(documents.Document):
    count: int
    ratio: float


class _Outer(documents.Document):
    created_utc: str
    items: list[_Inner]
    label: str | None

    _iso = pydantic.field_validator("created_utc")(documents.iso_time)


GOOD = {"created_utc": "2026-12-01T10:00:00+00:00", "items": [{"count": 2, "ratio": 0.5}],
        "label": None}


def _with(**changes):
    document = json.loads(json.dumps(GOOD))
    document.update(changes)
    return document


def test_a_good_document_comes_back_as_given_with_unknown_fields_kept():
    document = _with(added_later={"x": 1})
    assert documents.validate(_Outer, document, "test document") is document


@pytest.mark.parametrize(
    "document, message",
    [
        (_with(items=[{"count": True, "ratio": 0.5}]), r"'items\[0\]\.count'.*got True"),
        (_with(items=[{"count": "2", "ratio": 0.5}]), r"'items\[0\]\.count'"),
        (_with(items=[{"ratio": 0.5}]), r"required field 'items\[0\]\.count' is missing"),
        (_with(label=3), r"'label'"),
        (_with(created_utc="yesterday"), r"'created_utc': is not an ISO time"),
        ({"items": []}, r"required field 'created_utc' is missing"),
        ([1, 2], "is a JSON object, got list"),
    ],
)
def test_a_bad_document_names_its_first_bad_field(document, message):
    with pytest.raises(ValueError, match=message):
        documents.validate(_Outer, document, "test document")


def test_write_text_atomic_replaces_whole_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import os

    path = tmp_path / "new" / "doc.json"
    assert documents.write_text_atomic(path, "first") == path
    documents.write_text_atomic(path, "second")
    assert path.read_text(encoding="utf-8") == "second"

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        documents.write_text_atomic(path, "third")
    assert path.read_text(encoding="utf-8") == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["doc.json"]


def test_write_bytes_atomic_writes_the_bytes_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    import os

    path = tmp_path / "new" / "weights.npz"
    data = bytes(range(256)) * 3 + b"\r\n\x00"  # no text translation, no encoding
    assert documents.write_bytes_atomic(path, data) == path
    assert path.read_bytes() == data
    text = "d\u00e9j\u00e0 vu\n"
    documents.write_text_atomic(path, text)
    assert path.read_bytes() == text.encode("utf-8")

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        documents.write_bytes_atomic(path, b"half")
    assert path.read_bytes() == text.encode("utf-8")
    assert sorted(p.name for p in path.parent.iterdir()) == ["weights.npz"]


def test_load_reads_validates_and_names_a_file_that_is_not_json(tmp_path):
    class Tiny(documents.Document):
        n: int

    good, broken, wrong = tmp_path / "good.json", tmp_path / "broken.json", tmp_path / "w.json"
    good.write_text('{"n": 3}', encoding="utf-8")
    broken.write_text('{"n": ', encoding="utf-8")
    wrong.write_text('{"n": "three"}', encoding="utf-8")
    assert documents.load(good, Tiny, "tiny document") == {"n": 3}
    with pytest.raises(ValueError, match=rf"^{re.escape(str(broken))} is not JSON: "):
        documents.read_json(broken)
    with pytest.raises(ValueError, match="tiny document field 'n'"):
        documents.load(wrong, Tiny, "tiny document")
