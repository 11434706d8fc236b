"""The third-party modules a lesson can import: read from the source, never guessed.

From an app file, follow every import of the project's own packages (at module level or
inside a function: either can stop a lesson with ModuleNotFoundError) to the modules they
name, and collect the top-level names of everything else that is not the standard library.
An import inside ``try: ... except ImportError`` (or ModuleNotFoundError) is the code's own
fallback and is not counted; neither is one under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRST_PARTY = ("apps", "core", "interop", "capstones", "tpu_scripts", "benchmarks")
_FALLBACK_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _guarded(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in _FALLBACK_ERRORS for n in names):
            return True
    return False


class _Imports(ast.NodeVisitor):
    def __init__(self, package: str):
        self.package = package  # the importing module's package, for relative imports
        self.names: set[str] = set()  # dotted module names, and "module.attr" candidates

    def visit_Try(self, node: ast.Try):
        if not _guarded(node.handlers):
            for child in node.body:
                self.visit(child)
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    def visit_If(self, node: ast.If):
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import):
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        self.names.add(module)
        self.names.update(f"{module}.{alias.name}" for alias in node.names)


def module_file(module: str, root: pathlib.Path = ROOT) -> pathlib.Path | None:
    """The file of a first-party module (a package's __init__.py), or None."""
    path = root.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


@functools.cache
def _direct(path: pathlib.Path, package: str) -> frozenset[str]:
    visitor = _Imports(package)
    visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return frozenset(visitor.names)


def third_party(path: pathlib.Path, root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """{dotted name: the first-party files that import it} for everything ``path`` can reach
    through the project's own imports. A ``from m import x`` gives ``m`` and ``m.x`` (x may
    be a submodule or a name: ``profiles.provider_module`` tells them apart)."""
    seen: set[pathlib.Path] = set()
    found: dict[str, set[str]] = {}
    todo = [(pathlib.Path(path), _package_of(pathlib.Path(path), root))]
    while todo:
        current, package = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in _direct(current, package):
            top = name.split(".")[0]
            if not top or top in sys.stdlib_module_names or top == "__future__":
                continue
            if top not in FIRST_PARTY:
                found.setdefault(name, set()).add(_relative(current, root))
                continue
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
                module = ".".join(parts[:i])
                file = module_file(module, root)
                if file is not None:
                    todo.append((file, module if file.name == "__init__.py" else
                                 module.rpartition(".")[0]))  # fmt: skip
    return found


def _package_of(path: pathlib.Path, root: pathlib.Path) -> str:
    rel = path.resolve().relative_to(root.resolve()).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])


def _relative(path: pathlib.Path, root: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def app_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every lesson, capstone, track and assessment app (and the course home)."""
    return sorted((root / "apps").glob("*.py"))


def direct_third_party(paths, root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """{dotted name: files} of the third-party imports written in ``paths`` themselves."""
    found: dict[str, set[str]] = {}
    for path in paths:
        path = pathlib.Path(path)
        for name in _direct(path, _package_of(path, root)):
            top = name.split(".")[0]
            if (
                top
                and top not in sys.stdlib_module_names
                and top not in (*FIRST_PARTY, "__future__")
            ):
                found.setdefault(name, set()).add(_relative(path, root))
    return found


def library_files(root: pathlib.Path = ROOT, tests: bool = False) -> list[pathlib.Path]:
    """The modules of the packages the wheel ships (its tests with ``tests``, alone)."""
    out = []
    for package in ("core", "interop", "capstones", "tpu_scripts"):
        for path in sorted((root / package).rglob("*.py")):
            is_test = path.stem.endswith("_test") or path.stem == "conftest"
            if "__marimo__" not in path.parts and is_test == tests:
                out.append(path)
    return out
