"""A host's inventory: its package index and wheel folders read, what PYTHONPATH puts first."""

import json
import os
import pathlib
import subprocess
import sys

from tpu_scripts.wheelhouse import fake_wheels, inventory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _index(root, *wheels, fragment=True):
    for wheel in wheels:
        files = root / "files"
        files.mkdir(parents=True, exist_ok=True)
        (files / wheel.name).write_bytes(wheel.read_bytes())
        page = root / "simple" / wheel.name.split("-")[0]
        page.mkdir(parents=True, exist_ok=True)
        tail = f"#sha256={fake_wheels.sha256(wheel)}" if fragment else ""
        page.joinpath("index.html").write_text(
            f'<html><a href="../../files/{wheel.name}{tail}">{wheel.name}</a>'
            '<a href="../../files/old.tar.gz">sdist</a></html>'
        )
    return root / "simple"


def test_the_index_s_wheels_and_hashes_are_read_with_or_without_fragments(tmp_path):
    one = fake_wheels.make_wheel(tmp_path / "w", "one")
    two = fake_wheels.make_wheel(tmp_path / "w", "two_part")
    _index(tmp_path / "pypi", one)
    simple = _index(tmp_path / "pypi", two, fragment=False)
    files = inventory.index_files(f"file://{simple}")
    assert files == {
        "one": [{"file": one.name, "sha256": fake_wheels.sha256(one)}],
        "two-part": [{"file": two.name, "sha256": fake_wheels.sha256(two)}],
    }
    links = inventory.folder_files(str(tmp_path / "w"))
    assert set(links) == {"one", "two-part"}


def test_the_cli_writes_an_inventory_the_build_reads(tmp_path):
    simple = _index(tmp_path / "pypi", fake_wheels.make_wheel(tmp_path / "i", "one"))
    fake_wheels.make_wheel(tmp_path / "w", "two")
    out = tmp_path / "host.json"
    ran = subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "wheelhouse", "inventory", "-o", str(out),
         "--index", f"file://{simple}", "--find-links", str(tmp_path / "w")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    doc = inventory.load(out)
    assert doc["python"].startswith("3.") and doc["index"] == f"file://{simple}"
    assert set(inventory.held_files(doc).values()) == {"index", "find_links"}
    assert "pip" in doc["installed"]


def test_what_pythonpath_puts_first_is_marked_first(tmp_path):
    first = tmp_path / "first"
    info = first / "firstdist-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: firstdist\nVersion: 1.0\n")
    code = "import json; from tpu_scripts.wheelhouse import inventory as i; " \
           "print(json.dumps(i.installed()))"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{first}{os.pathsep}{ROOT}"}
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    found = json.loads(ran.stdout)
    assert found["firstdist"] == {"version": "1.0", "first": True}
    assert found["pip"]["first"] is False
