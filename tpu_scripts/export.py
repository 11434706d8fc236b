"""Export a lesson app as a headless script for a TPU VM.

A marimo app is already a Python program: ``python app.py --flag value`` runs every cell
without a browser, with flags that mirror its controls (core.lab.Flags). The export keeps
the app's code byte for byte (so the script computes exactly what the lesson showed) and
adds a header: where it came from, the source hash, the versions it was exported with, and
its flags. It refuses files that are not marimo apps.
"""

from __future__ import annotations

import ast
import builtins
import concurrent.futures
import datetime
import functools
import hashlib
import os
import pathlib
import subprocess
import sys
import threading
import time
import types

from core import documents, flags, runtime

# CPython 3.11 raises "SystemError: AST constructor recursion depth mismatch" when threads
# parse at the same time (export_many reads apps on several threads): one parse at a time.
_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(source)


class NotAMarimoApp(ValueError):
    """The file given to export is not a marimo app (with the reason)."""


def app_cells(tree: ast.Module) -> list[ast.FunctionDef]:
    """The ``@app.cell`` functions of a marimo app's parsed source, in source order."""
    return [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d).startswith("app.cell") for d in node.decorator_list)
    ]


def marimo_app_problem(source: str) -> str | None:
    """Why ``source`` is not a runnable marimo app, or None when it is one."""
    try:
        tree = parse(source)
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
    if not app_cells(tree):
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


# --- an app's flags, for the header -------------------------------------------------------
#
# `python app.py --help` imports what the app's setup imports (JAX, its lesson modules) before
# it prints: seconds per app, minutes for a course, on a host whose time is paid by the hour.
# Most apps declare their flags with constants, so their help is built here from the setup
# block's own text with core.flags' classes (no JAX, no marimo, no lesson module); the rest (a
# default such as min(8, jax.device_count())) run --help, several at a time, and keep its
# answer in a cache keyed by the app's and the library's sources.

HELP_COLUMNS = 80  # the terminal width --help is formatted for (a child without a terminal's)
# The builtins a flag's constant may call; anything else (jax, a function of a lesson module)
# means --help.
_SAFE_BUILTINS = ("min", "max", "len", "range", "tuple", "list", "sorted", "str", "int", "float")
_SAFE_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Tuple, ast.List, ast.Dict, ast.Set,
    ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Call, ast.keyword, ast.Attribute,
    ast.JoinedStr, ast.FormattedValue, ast.IfExp, ast.Compare, ast.cmpop, ast.BoolOp, ast.boolop,
)  # fmt: skip
_FIRST_PARTY = ("core", "interop", "capstones")
_LAB = "core.lab"


def _constant(node: ast.expr, known: dict) -> bool:
    """Whether ``node`` computes from constants, the values ``known`` (a module's constants are
    read as ``module.NAME``), lab.Flag/lab.Flags and _SAFE_BUILTINS only: nothing that could
    import JAX or change this process."""
    for part in ast.walk(ast.Expression(node)):
        if not isinstance(part, _SAFE_NODES):
            return False
        if isinstance(part, ast.Attribute):
            owner = part.value.id if isinstance(part.value, ast.Name) else None
            if not isinstance(known.get(owner), types.SimpleNamespace) and not (
                known.get(owner) == _LAB and part.attr in ("Flag", "Flags")
            ):
                return False
        if isinstance(part, ast.Name) and part.id not in (*known, *_SAFE_BUILTINS):
            return False
        if isinstance(part, ast.Call) and not (
            isinstance(part.func, ast.Attribute)
            or (isinstance(part.func, ast.Name) and part.func.id in _SAFE_BUILTINS)
        ):
            return False
    return True


def _module_file(dotted: str) -> pathlib.Path | None:
    """The source of first-party module ``dotted`` (found on disk, never imported)."""
    root = pathlib.Path(runtime.__file__).resolve().parents[1]
    path = root.joinpath(*dotted.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _module_constants(dotted: str) -> types.SimpleNamespace:
    """The top-level constants of first-party module ``dotted`` as its source assigns them
    (``DTYPES = ("float32", ...)``); what it computes otherwise is left out."""
    path = _module_file(dotted)
    tree = parse(path.read_text(encoding="utf-8")) if path is not None else ast.Module([])
    return types.SimpleNamespace(**_constants(tree.body, {}, dotted))


def _constants(body: list[ast.stmt], known: dict, package: str = "") -> dict:
    """``known`` plus what the statements of ``body`` bind to constants: first-party modules
    (as their constants), names imported from them, and assignments ``_constant`` accepts.
    A name bound to anything else is dropped: a flag reading it sends its app to --help."""
    scope = {"__builtins__": {name: getattr(builtins, name) for name in _SAFE_BUILTINS}}
    for node in body:
        bound: dict = {}
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                name = alias.asname or alias.name
                if dotted == _LAB:
                    bound[name] = _LAB
                elif dotted.split(".")[0] in _FIRST_PARTY and dotted != package:
                    if _module_file(dotted) is not None:
                        bound[name] = _module_constants(dotted)
                    elif hasattr(constants := _module_constants(node.module), alias.name):
                        bound[name] = getattr(constants, alias.name)
                    else:
                        known.pop(name, None)
                else:
                    known.pop(name, None)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                known.pop((alias.asname or alias.name).split(".")[0], None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            known.pop(node.name, None)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                continue
            name = targets[0].id
            values = {k: (lab_module() if v == _LAB else v) for k, v in known.items()}
            try:
                if not _constant(node.value, known):
                    raise ValueError(name)
                with _PARSE_LOCK:  # compiling an AST meets the same 3.11 bug
                    code = compile(ast.Expression(node.value), "<source>", "eval")
                bound[name] = eval(code, {**scope, **values})  # only what _constant allowed
            except Exception:  # computed from something else, or a flag its app would refuse
                known.pop(name, None)
        known.update(bound)
    return known


def lab_module() -> types.SimpleNamespace:
    """What ``lab.Flag`` and ``lab.Flags`` mean in a static reading: core.flags' marimo-free
    definitions (core.lab.Flags is a FlagSet with the parsing of a run and the controls)."""
    return types.SimpleNamespace(Flag=flags.Flag, Flags=flags.FlagSet)


def static_flags(source: str):
    """The app's ``FLAGS = lab.Flags(...)`` built from the text of its setup block and of the
    library modules it imports, never run: the call, the plain constants it reads (``N = 64``,
    ``arrays_devices.DTYPES``), core.lab and a few builtins. None when the flags read
    anything else (JAX, a lesson module's computed value): --help decides then."""
    for node in parse(source).body:
        if isinstance(node, ast.With) and any(
            ast.unparse(item.context_expr) == "app.setup" for item in node.items
        ):
            found = _constants(node.body, {}).get("FLAGS")
            return found if isinstance(found, flags.FlagSet) else None
    return None


def help_of(flag_set, prog: str) -> str:
    """What `python PROG --help` prints for ``flag_set`` (core.flags.FlagSet.script_parser, which
    core.lab.Flags parses a script run with), at HELP_COLUMNS, without its trailing newline."""
    import argparse

    parser = flag_set.script_parser(prog)
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=HELP_COLUMNS - 2)
    return parser.format_help().strip()


def _help_env() -> dict[str, str]:
    # COLUMNS: the width argparse formats for, whatever terminal this runs in
    return runtime.child_env(
        JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"), COLUMNS=str(HELP_COLUMNS)
    )


def run_help(app_path: pathlib.Path, timeout_s: float = 120) -> str:
    """The app's own --help (its flags), from running it: the flags cannot be out of date."""
    result = subprocess.run(
        [sys.executable, str(app_path), "--help"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=_help_env(),
    )
    if result.returncode != 0:
        raise RuntimeError(f"`python {app_path} --help` failed:\n{result.stderr[-2000:]}")
    return result.stdout.strip()


def default_cache_dir() -> pathlib.Path:
    """Where --help answers are kept between runs: $XDG_CACHE_HOME (or ~/.cache)/jax-tpu-lab."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "jax-tpu-lab" / "flags-help"


@functools.lru_cache(maxsize=1)
def _library_digest() -> str:
    """sha256 over the library's sources (core/): a flag's default may come from there."""
    digest = hashlib.sha256()
    core_dir = pathlib.Path(runtime.__file__).resolve().parent
    for path in sorted(core_dir.rglob("*.py")):
        digest.update(str(path.relative_to(core_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def help_cache_key(app_path: pathlib.Path) -> str:
    """What an app's --help depends on: its source, the library's, this interpreter and
    versions, and the environment variables that set the device count it sees."""
    env = _help_env()
    parts = [
        app_path.name,
        hashlib.sha256(app_path.read_bytes()).hexdigest(),
        _library_digest(),
        sys.executable,
        _versions(),
        *(f"{name}={env.get(name, '')}" for name in ("JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def flags_help(app_path, cache_dir: pathlib.Path | None = None) -> tuple[str, str]:
    """(the app's --help text, how it was read: "source", "cache" or "--help").

    From the source where its flags are constants (``static_flags``); else the answer kept in
    ``cache_dir`` (default ``default_cache_dir()``) for this key (``help_cache_key``); else by
    running the app's --help, kept there for the next run."""
    app_path = pathlib.Path(app_path)
    flags = static_flags(app_path.read_text(encoding="utf-8"))
    if flags is not None:
        return help_of(flags, app_path.name), "source"
    cache_dir = default_cache_dir() if cache_dir is None else pathlib.Path(cache_dir)
    kept = cache_dir / f"{help_cache_key(app_path)}.txt"
    if kept.is_file():
        return kept.read_text(encoding="utf-8"), "cache"
    text = run_help(app_path)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        documents.write_text_atomic(kept, text)
    except OSError:
        pass  # a read-only home: the next run asks --help again
    return text, "--help"


def _versions() -> str:
    from importlib import metadata

    found = []
    for name in ("marimo", "jax", "jaxlib"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def export_app(
    app_path: str | os.PathLike,
    out_path: str | os.PathLike,
    cache_dir: pathlib.Path | None = None,
) -> pathlib.Path:
    """Write the headless script for ``app_path`` to ``out_path`` (atomically) and return it
    (its flags: ``flags_help``, with ``cache_dir``)."""
    return _export(app_path, out_path, cache_dir)[0]


def _export(app_path, out_path, cache_dir=None) -> tuple[pathlib.Path, str]:
    """(the script written, how its flags were read)."""
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
    help_text, how = flags_help(app_path, cache_dir)
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
    return out_path, how


def say(line: str) -> None:
    """Print a progress line now (flushed: through a pipe too)."""
    print(line, flush=True)


def export_many(
    pairs,
    cache_dir: pathlib.Path | None = None,
    workers: int | None = None,
    say=say,
    clock=time.monotonic,
) -> list[pathlib.Path]:
    """Export each (app, script) of ``pairs``; ``workers`` apps at a time (default: the CPU
    count), since an app whose flags are not constants runs its --help. ``say`` gets one line
    per app: its count, how its flags were read, and the time the rest should take."""
    pairs = [(pathlib.Path(a), pathlib.Path(s)) for a, s in pairs]
    workers = max(1, min(workers or os.cpu_count() or 1, len(pairs) or 1))
    start, done = clock(), 0
    written = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        jobs = {pool.submit(_export, app, script, cache_dir): app for app, script in pairs}
        for job in concurrent.futures.as_completed(jobs):
            script, how = job.result()
            written[jobs[job]] = script
            done += 1
            elapsed = clock() - start
            left = len(pairs) - done
            eta = f", about {elapsed / done * left:.0f} s left" if left else ""
            say(f"# exported {done}/{len(pairs)} {jobs[job].name} (flags from {how}; "
                f"{elapsed:.1f} s{eta})")  # fmt: skip
    return [written[app] for app, _ in pairs]


def source_digest(script_path: str | os.PathLike) -> str | None:
    """The sha256 recorded in an exported script's header, or None."""
    for line in pathlib.Path(script_path).read_text(encoding="utf-8").splitlines()[:5]:
        if line.startswith("# source sha256: "):
            return line.removeprefix("# source sha256: ").strip()
    return None
