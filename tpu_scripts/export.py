"""Export a lesson app as a headless script for a TPU VM.

A marimo app is already a Python program: ``python app.py --flag value`` runs every cell
without a browser, with flags that mirror its controls (core.lab.Flags). The export keeps
the app's code byte for byte (so the script computes exactly what the lesson showed) and
adds a header: where it came from, the source hash, the versions it was exported with, and
its flags. It refuses files that are not marimo apps.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import os
import pathlib
import subprocess
import sys

from core import documents, runtime


class NotAMarimoApp(ValueError):
    """The file given to export is not a marimo app (with the reason)."""


def marimo_app_problem(source: str) -> str | None:
    """Why ``source`` is not a runnable marimo app, or None when it is one."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"it is not valid Python ({exc.msg}, line {exc.lineno})"
    imports_marimo = any(
        isinstance(node, ast.Import) and any(alias.name == "marimo" for alias in node.names)
        for node in tree.body
    )
    if not imports_marimo:
        return "it does not `import marimo` at module level"
    defines_app = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "app" for t in node.targets)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) in ("marimo.App", "mo.App")
        for node in tree.body
    )
    if not defines_app:
        return "it has no `app = marimo.App(...)`"
    has_cells = any(
        isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d).startswith("app.cell") for d in node.decorator_list)
        for node in tree.body
    )
    if not has_cells:
        return "it has no `@app.cell` functions"
    runs_as_script = any(
        isinstance(node, ast.If)
        and "__main__" in ast.unparse(node.test)
        and "app.run()" in ast.unparse(node)
        for node in tree.body
    )
    if not runs_as_script:
        return 'it lacks `if __name__ == "__main__": app.run()`, so `python` would not run it'
    return None


# Run before the app's own code: on a multi-host job every process must join it before JAX
# starts. The rehearsal's variables (tpu_scripts/rehearse.py: N local CPU processes) or
# JAX_TPU_LAB_MULTIHOST=1 (course-run on a multi-host TPU slice, where
# jax.distributed.initialize() finds the workers itself) ask for it; without them it does nothing.
MULTIHOST_ENV = "JAX_TPU_LAB_MULTIHOST"
JOIN_PRELUDE = f"""\
import os as _os

if "REHEARSE_COORDINATOR" in _os.environ:
    from tpu_scripts import rehearse as _rehearse

    _rehearse.initialize_from_env()
elif _os.environ.get("{MULTIHOST_ENV}") == "1":
    import jax as _jax

    _jax.distributed.initialize()
"""


def _flags_help(app_path: pathlib.Path, timeout_s: float = 120) -> str:
    """The app's own --help (its flags), from running it: the flags cannot be out of date."""
    result = subprocess.run(
        [sys.executable, str(app_path), "--help"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=runtime.child_env(JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
    )
    if result.returncode != 0:
        raise RuntimeError(f"`python {app_path} --help` failed:\n{result.stderr[-2000:]}")
    return result.stdout.strip()


def _versions() -> str:
    from importlib import metadata

    found = []
    for name in ("marimo", "jax", "jaxlib"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def export_app(app_path: str | os.PathLike, out_path: str | os.PathLike) -> pathlib.Path:
    """Write the headless script for ``app_path`` to ``out_path`` (atomically) and return it."""
    app_path = pathlib.Path(app_path)
    out_path = pathlib.Path(out_path)
    if not app_path.is_file():
        raise FileNotFoundError(f"no such app: {app_path}")
    if out_path.resolve() == app_path.resolve():
        raise ValueError("the output path is the app itself; choose another -o path")
    source = app_path.read_text(encoding="utf-8")
    if problem := marimo_app_problem(source):
        raise NotAMarimoApp(f"{app_path} is not a marimo app: {problem}")
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    help_text = _flags_help(app_path)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = [
        f"# Headless script exported from {app_path.as_posix()} by `python -m tpu_scripts export`.",
        f"# source sha256: {digest}",
        f"# exported {stamp} with {_versions()}",
        f"# Run: python {out_path.name} [flags]   "
        "(needs the project installed: pip install 'jax-tpu-lab[tpu]')",
        "# Flags mirror the app's controls:",
        *[f"#   {line}" if line else "#" for line in help_text.splitlines()],
        "# A multi-host run joins its job first (tpu_scripts/export.py, JOIN_PRELUDE):",
        JOIN_PRELUDE,
    ]
    # Written beside the target and renamed: a crash never leaves a half-written script.
    documents.write_text_atomic(out_path, "\n".join(header) + "\n" + source)
    return out_path


def source_digest(script_path: str | os.PathLike) -> str | None:
    """The sha256 recorded in an exported script's header, or None."""
    for line in pathlib.Path(script_path).read_text(encoding="utf-8").splitlines()[:5]:
        if line.startswith("# source sha256: "):
            return line.removeprefix("# source sha256: ").strip()
    return None
