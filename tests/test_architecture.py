"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and they can fail.

`make test` runs `lint-imports` itself; this test also proves the contracts bite: the same
contracts, run over a small tree where core imports a capstone, must report it broken. The house
rules lint-imports does not state are here too: no import cycle among the library's modules, and
no library module over the line limit of CONTRIBUTING.md; each is shown to bite.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib

import grimp

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
    # core.exercises may import lesson code (a lesson's practice; pyproject.toml says why)
    missing = members - {"core.lessons", "core.exercises"} - set(leaf["source_modules"])
    assert not missing, f"add {sorted(missing)} to the contract in pyproject.toml"


# The library's packages: an import cycle among their modules, or a module past the line limit,
# fails here (tests are exempt from the limit, not from the cycles).
LIBRARY = ("core", "interop", "capstones", "tpu_scripts")


def import_cycles(*packages: str) -> list[tuple[str, ...]]:
    """Each import cycle among the modules of ``packages`` (imports inside functions count), as
    its shortest chain ``(a, b, ..., a)``, once per set of modules."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    cycles: dict[frozenset, tuple[str, ...]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain is not None:
                cycles.setdefault(frozenset(chain), (module, *chain))
    return sorted(cycles.values())


def test_no_import_cycles_in_the_library():
    cycles = import_cycles(*LIBRARY)
    assert not cycles, "import cycles (split out the shared piece): " + "; ".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_an_import_cycle_is_caught(tmp_path, monkeypatch):
    """The shape of the circle interop/ once had: a model module that imports its converter inside
    a function, and the converter that imports the model at the top."""
    package = tmp_path / "circle_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("def seeded():\n    from circle_pkg import convert\n")
    (package / "convert.py").write_text("from circle_pkg import model\n")
    (package / "leaf.py").write_text("from circle_pkg import model\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("circle_pkg") == [
        ("circle_pkg.convert", "circle_pkg.model", "circle_pkg.convert")
    ]


def line_limit() -> int:
    """The most lines a library module may have, as CONTRIBUTING.md states it."""
    text = (curriculum.REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    match = re.search(r"A module of core/.* has at most (\d+) lines", text)
    assert match, "CONTRIBUTING.md no longer states the module line limit"
    return int(match.group(1))


def modules_over(limit: int, root: pathlib.Path) -> list[str]:
    """The library modules under ``root`` (tests excepted) longer than ``limit`` lines."""
    over = []
    for package in LIBRARY:
        for path in sorted((root / package).rglob("*.py")):
            if path.stem.endswith("_test") or path.stem == "conftest":
                continue
            count = len(path.read_text(encoding="utf-8").splitlines())
            if count > limit:
                over.append(f"{path.relative_to(root)} ({count} lines)")
    return over


def test_no_library_module_is_over_the_line_limit():
    limit = line_limit()
    over = modules_over(limit, curriculum.REPO_ROOT)
    assert not over, f"split these along a seam (CONTRIBUTING.md, at most {limit} lines): {over}"


def test_the_line_limit_bites(tmp_path):
    for package in LIBRARY:
        (tmp_path / package).mkdir()
    (tmp_path / "core" / "big.py").write_text("x = 1\n" * 11)
    (tmp_path / "core" / "big_test.py").write_text("x = 1\n" * 50)
    (tmp_path / "interop" / "fits.py").write_text("x = 1\n" * 10)
    assert modules_over(10, tmp_path) == ["core/big.py (11 lines)"]
