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
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath)},
    )


def test_the_project_keeps_its_contracts():
    root = curriculum.REPO_ROOT
    result = _lint(root, root / "pyproject.toml", root)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout


def _module_tree(root: pathlib.Path, contracts: dict) -> None:
    """Empty packages for every module the contracts name (import-linter needs them)."""
    names = set(contracts["root_packages"])
    for contract in contracts["contracts"]:
        names |= set(contract["source_modules"]) | set(contract["forbidden_modules"])
    for name in sorted(names - {"marimo"}):
        folder = root.joinpath(*name.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        if name != "apps":  # apps is a namespace package in the project too
            (folder / "__init__.py").write_text("")
    (root / "apps" / "lesson.py").write_text("import core\n")  # a namespace needs a module
    # The external package marimo must be importable for the contracts that name it.
    (root / "marimo").mkdir()
    (root / "marimo" / "__init__.py").write_text("")


def _ini(contracts: dict) -> str:
    """The contracts of pyproject.toml as an .importlinter file."""
    lines = ["[importlinter]", "root_packages =\n    " + "\n    ".join(contracts["root_packages"])]
    lines.append("include_external_packages = True")
    for number, contract in enumerate(contracts["contracts"]):
        lines += [f"\n[importlinter:contract:{number}]", f"name = {contract['name']}"]
        lines.append(f"type = {contract['type']}")
        for key in ("source_modules", "forbidden_modules"):
            lines.append(f"{key} =\n    " + "\n    ".join(contract[key]))
    return "\n".join(lines) + "\n"


def test_deliberate_violations_are_caught(tmp_path):
    contracts = tomllib.loads((curriculum.REPO_ROOT / "pyproject.toml").read_text())
    contracts = contracts["tool"]["importlinter"]
    _module_tree(tmp_path, contracts)
    (tmp_path / "capstones" / "trainer.py").write_text("X = 1\n")
    (tmp_path / "core" / "library.py").write_text("from capstones import trainer\n")
    (tmp_path / "core" / "lessons" / "a_lesson.py").write_text("X = 1\n")
    (tmp_path / "core" / "lm" / "model.py").write_text("from core.lessons import a_lesson\n")
    config = tmp_path / ".importlinter"
    config.write_text(_ini(contracts))
    result = _lint(tmp_path, config, tmp_path)
    assert result.returncode != 0, result.stdout[-3000:]
    assert "core.library -> capstones.trainer" in result.stdout, result.stdout[-3000:]
    assert "core.lm.model -> core.lessons.a_lesson" in result.stdout, result.stdout[-3000:]


def test_every_domain_package_of_core_is_kept_off_lesson_code():
    """A new package or module in core/ must join the 'lesson code is a leaf' contract."""
    contracts = tomllib.loads((curriculum.REPO_ROOT / "pyproject.toml").read_text())
    leaf = next(
        c
        for c in contracts["tool"]["importlinter"]["contracts"]
        if c["forbidden_modules"] == ["core.lessons"]
    )
    core_dir = curriculum.REPO_ROOT / "core"
    members = {
        f"core.{p.stem}"
        for p in core_dir.glob("*.py")
        if p.stem != "__init__" and not p.stem.endswith("_test")
    } | {f"core.{p.parent.name}" for p in core_dir.glob("*/__init__.py")}
    missing = members - {"core.lessons"} - set(leaf["source_modules"])
    assert not missing, f"add {sorted(missing)} to the contract in pyproject.toml"
