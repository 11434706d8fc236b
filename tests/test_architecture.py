"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and they can fail.

`make test` runs `lint-imports` itself; this test also proves the contracts bite: the same
contracts, run over a small tree where core imports a capstone, must report it broken.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

from core import curriculum

LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")


def _lint(cwd: pathlib.Path, config: pathlib.Path, pythonpath: pathlib.Path):
    return subprocess.run(
        [str(LINT_IMPORTS), str(config), "--no-cache"],
        capture_output=True, text=True, cwd=cwd, timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath)},
    )


def test_the_project_keeps_its_contracts():
    root = curriculum.REPO_ROOT
    result = _lint(root, root / "pyproject.toml", root)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout


def test_a_deliberate_violation_is_caught(tmp_path):
    settings = tomllib.loads((curriculum.REPO_ROOT / "pyproject.toml").read_text())
    contracts = settings["tool"]["importlinter"]
    for package in contracts["root_packages"]:
        (tmp_path / package).mkdir()
        if package != "apps":  # apps is a namespace package in the project too
            (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "apps" / "lesson.py").write_text("import core\n")  # a namespace needs a module
    (tmp_path / "capstones" / "trainer.py").write_text("X = 1\n")
    (tmp_path / "core" / "library.py").write_text("from capstones import trainer\n")
    # The external package marimo must be importable for the contracts that name it.
    (tmp_path / "marimo").mkdir()
    (tmp_path / "marimo" / "__init__.py").write_text("")
    lines = ["[importlinter]", "root_packages =\n    " + "\n    ".join(contracts["root_packages"])]
    lines.append("include_external_packages = True")
    for number, contract in enumerate(contracts["contracts"]):
        lines += [f"\n[importlinter:contract:{number}]", f"name = {contract['name']}"]
        lines.append(f"type = {contract['type']}")
        for key in ("source_modules", "forbidden_modules"):
            lines.append(f"{key} =\n    " + "\n    ".join(contract[key]))
    config = tmp_path / ".importlinter"
    config.write_text("\n".join(lines) + "\n")
    result = _lint(tmp_path, config, tmp_path)
    assert result.returncode != 0, result.stdout[-3000:]
    assert "core.library -> capstones.trainer" in result.stdout, result.stdout[-3000:]
