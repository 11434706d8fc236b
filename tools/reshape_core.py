"""One-time reshape of core/ into domain packages and core/lessons/<phase>/<slug>.py (issue 13).

Run once from the repo root on a clean, green tree, then delete this file in the same commit:

    python tools/reshape_core.py --dry-run    # print the moves
    python tools/reshape_core.py              # git mv + rewrite imports, usages and paths
    ruff check --fix --select I . && ruff check .   # import order; fix the few F821 it reports
    python -m core.curriculum --write-readme && lint-imports && make test

It moves with git mv, rewrites imports (`from core import x`, `from core.pkg import x`,
`import core.x`), renames module usages when a lesson module takes its app's name
(jnp_basics -> numpy_to_jnp), rewrites path mentions in text, and turns core/data.py and
core/distributed.py into packages whose __init__ re-exports the old public names. Tried on a
worktree of 7ec0bf0: 1914 tests collected; one leftover (a bare module name passed to
monkeypatch.setattr in masked_image_test.py) for ruff's F821 to point at. Lines printed as
CHECK are places where the renamed module name also appears in prose; read them.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path.cwd()
DRY = "--dry-run" in sys.argv
sys.path.insert(0, str(ROOT))
from core import curriculum  # noqa: E402

LIBRARY = {
    # language models
    "core.attention": "core.lm.attention",
    "core.transformer": "core.lm.transformer",
    "core.tokenizer": "core.lm.tokenizer",
    "core.corpus": "core.lm.corpus",
    "core.generate": "core.lm.generate",
    "core.ssl_masking": "core.lm.ssl_masking",
    # neural networks and their training
    "core.mlp": "core.nn.mlp",
    "core.nnx_models": "core.nn.nnx_models",
    "core.training": "core.nn.training",
    # data
    "core.digits": "core.data.digits",
    # state: checkpoints, tracking, the resumable trainer
    "core.checkpoint": "core.state.checkpoint",
    "core.tracking": "core.state.tracking",
    "core.recovery_demo": "core.state.recovery_demo",
    # distributed
    "core.sharding": "core.distributed.sharding",
    # performance
    "core.compilation": "core.perf.compilation",
    # what lesson apps share (core/lab.py itself becomes core/lab/__init__.py)
    "core.charts": "core.lab.charts",
    "core.text": "core.lab.text",
    "core.claims": "core.lab.claims",
    # TPU and Cloud TPU
    "core.cloud_tpu": "core.tpu.cloud_tpu",
    "core.slice_planner": "core.tpu.slice_planner",
}
# Modules that become a package of the same name: the code moves into a submodule and the
# package __init__ re-exports its public names, so `from core import data; data.batches` stays.
PACKAGED = {"core.data": "core.data.pipeline", "core.distributed": "core.distributed.collectives"}

LESSONS = {  # module -> lesson slug (the app's name)
    "core.arrays": "arrays_devices",
    "core.environment": "workspace",
    "core.jnp_basics": "numpy_to_jnp",
    "core.broadcasting": "shapes_broadcasting",
    "core.purity": "pure_functions",
    "core.indexing": "immutable_updates",
    "core.autodiff": "first_gradient",
    "core.losses": "losses_value_and_grad",
    "core.batching": "vmap",
    "core.pytrees": "pytrees",
    "core.randomness": "random_keys",
    "core.loops": "lax_scan",
    "core.branches": "lax_cond",
    "core.stability": "debug_unstable",
    "core.ssl_image": "masked_image",
    "core.contrastive": "contrastive",
    "core.perf.quantization": "precision_xprof",
    "core.perf.recompile": "recompilation_host_sync",
}
MOVES = dict(LIBRARY)
MOVES.update({old: curriculum.lesson_module(slug) for old, slug in LESSONS.items()})

PACKAGE_DOCS = {
    "core.data": "Input data: the classification pipeline and Grain datasets, the digits set.",
    "core.lm": "Language models: attention, the byte Transformer with its KV cache, tokenizer, "
    "corpus, generation, masked-LM data.",
    "core.nn": "Neural networks and their training: MLPs, Flax NNX models, train/eval steps.",
    "core.state": "Training state that outlives a process: checkpoints, experiment tracking, "
    "the resumable trainer of the recovery lessons.",
    "core.distributed": "Meshes, shardings and collectives on virtual CPU devices and TPU slices.",
    "core.lessons": "Lesson-only code: core/lessons/<phase>/<lesson slug>.py, named like its "
    "app apps/<lesson slug>.py, tests beside it. A module that gains a second user is "
    "promoted into a domain package.",
}


def sources() -> list[pathlib.Path]:
    return [
        p
        for p in ROOT.rglob("*.py")
        if not any(part in {".venv", "__marimo__", ".git", "runs", "build"} for part in p.parts)
        and p.resolve() != pathlib.Path(__file__).resolve()
    ]


def texts() -> list[pathlib.Path]:
    return [
        p
        for p in [
            *ROOT.glob("*.md"),
            *ROOT.glob("*/*.md"),
            *ROOT.glob("*/*/*.md"),
            ROOT / "Makefile",
            ROOT / "pyproject.toml",
        ]
        if ".venv" not in p.parts and p.name != "README.md" or p.parent == ROOT
    ]


def public_names(path: pathlib.Path) -> list[str]:
    """Top-level public functions, classes and constants defined in ``path``."""
    import ast

    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return sorted(n for n in set(names) if not n.startswith("_"))


def path_of(module: str) -> pathlib.Path:
    return ROOT / (module.replace(".", "/") + ".py")


def short(module: str) -> str:
    return module.rsplit(".", 1)[1]


def parent(module: str) -> str:
    return module.rsplit(".", 1)[0]


def git(*args: str) -> None:
    if DRY:
        print("git", *args)
    else:
        subprocess.run(["git", *args], check=True, cwd=ROOT)


def ensure_package(package: str) -> None:
    parts = package.split(".")
    for depth in range(2, len(parts) + 1):
        name = ".".join(parts[:depth])
        init = path_of(name).with_suffix("") / "__init__.py"
        if init.exists():
            continue
        doc = PACKAGE_DOCS.get(name)
        if doc is None and name.startswith("core.lessons."):
            phase = next(p for p in curriculum.PHASES if p.package == parts[depth - 1])
            doc = f'Lesson code of the phase "{phase.title}" (one module per lesson app).'
        text = f'"""{doc}"""\n' if doc else ""
        if DRY:
            print("create", init.relative_to(ROOT))
        else:
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(text)
            git("add", str(init))


def move_files() -> None:
    # core/lab.py -> core/lab/__init__.py first, so the lab's helpers can move in beside it.
    if not DRY:
        (ROOT / "core" / "lab").mkdir(exist_ok=True)
    git("mv", "core/lab.py", "core/lab/__init__.py")
    git("mv", "core/lab_test.py", "core/lab/lab_test.py")
    git("mv", "core/lab_check_test.py", "core/lab/check_test.py")
    for old, new in MOVES.items():
        ensure_package(parent(new))
        for suffix in ("", "_test"):
            source = path_of(old).with_name(short(old) + suffix + ".py")
            if source.exists():
                target = path_of(new).with_name(short(new) + suffix + ".py")
                git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
    for package, module in PACKAGED.items():
        source = path_of(package)
        names = public_names(source)
        target = path_of(module)
        if not DRY:
            target.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
        test = source.with_name(source.stem + "_test.py")
        test_target = target.with_name(target.stem + "_test.py")
        git("mv", str(test.relative_to(ROOT)), str(test_target.relative_to(ROOT)))
        if DRY:
            print("package", package, "->", module, names)
            continue
        doc = PACKAGE_DOCS[package]
        listing = "".join(f"    {name},\n" for name in names)
        init = target.parent / "__init__.py"
        init.write_text(
            f'"""{doc}\n\nThe public surface of {module} is re-exported here."""\n\n'
            f"from {module} import (  # noqa: F401 (the package's public surface)\n{listing})\n"
        )
        git("add", str(init))


FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<package>core(?:\.\w+)*) import (?P<names>[^()\n#]+?)"
    r"(?P<comment>[ \t]*#.*)?$",
    re.M,
)


def rewrite_from_imports(text: str, renames: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        indent, package = match["indent"], match["package"]
        comment = match["comment"] or ""
        lines: dict[str, list[str]] = {}
        for item in (n.strip() for n in match["names"].split(",")):
            if not item:
                continue
            name, _, alias = item.partition(" as ")
            module = f"{package}.{name.strip()}"
            if module in MOVES:
                new = MOVES[module]
                new_name = short(new)
                if not alias and new_name != name.strip():
                    renames[name.strip()] = new_name
                entry = f"{new_name} as {alias.strip()}" if alias else new_name
                lines.setdefault(parent(new), []).append(entry)
            elif package in MOVES:  # from core.old_module import Name
                lines.setdefault(MOVES[package], []).append(item)
            else:
                lines.setdefault(package, []).append(item)
        out = []
        for pkg in sorted(lines):
            out.append(f"{indent}from {pkg} import {', '.join(sorted(lines[pkg]))}")
        if comment and "noqa" in comment:
            out = [line + comment for line in out]
        elif comment and out:
            out[0] += comment
        return "\n".join(out)

    return FROM_IMPORT.sub(replace, text)


def rewrite_dotted(text: str) -> str:
    # core.x.y mentions (imports of objects, `import core.x`, docstrings), longest first.
    for old in sorted(MOVES, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", MOVES[old], text)
    return text


def rewrite_paths(text: str) -> str:
    for old, new in sorted(MOVES.items(), key=lambda kv: len(kv[0]), reverse=True):
        for suffix in ("_test.py", ".py"):
            old_path = old.replace(".", "/") + suffix
            new_path = new.replace(".", "/") + suffix
            text = re.sub(rf"(?<![\w/]){re.escape(old_path)}", new_path, text)
    for package, module in PACKAGED.items():
        for suffix in ("_test.py", ".py"):
            old_path = package.replace(".", "/") + suffix
            new_path = module.replace(".", "/") + suffix
            text = re.sub(rf"(?<![\w/]){re.escape(old_path)}", new_path, text)
    return text


def rename_usages(path: pathlib.Path, text: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        code = re.sub(rf"^\s*from core[\w.]* import .*{new}.*$", "", text, flags=re.M)
        clash = re.search(rf"(?<![\w.\"'])\b{new}\b(?![\s\w]*[\"'])(?!\s*\.)", code)
        rebinding = re.search(
            rf"(?<![\w.]){old}\s*(=[^=]|\+=)|for {old} in|def {old}\b|\b{old}:", text
        )
        if rebinding or clash:
            print(
                f"CHECK {path.relative_to(ROOT)}: rename {old}->{new} "
                f"(rebinding={bool(rebinding)}, clash={bool(clash)})"
            )
        text = re.sub(rf"(?<![\w./]){old}\.(?=[A-Za-z_])(?!py\b)", f"{new}.", text)
    return text


def rewrite_sources() -> None:
    for path in sources():
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        renames: dict[str, str] = {}
        new = rewrite_from_imports(text, renames)
        new = rewrite_dotted(new)
        new = rewrite_paths(new)
        new = rename_usages(path, new, renames)
        if new != text:
            if DRY:
                print("rewrite", path.relative_to(ROOT), renames or "")
            else:
                path.write_text(new, encoding="utf-8")


def rewrite_texts() -> None:
    for path in texts():
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite_paths(rewrite_dotted(text))
        if new != text:
            print("text", path.relative_to(ROOT))
            if not DRY:
                path.write_text(new, encoding="utf-8")


def main() -> None:
    # Find the moved paths in the new tree, so new locations are computed before moving.
    move_files()
    if DRY:
        return
    rewrite_sources()
    rewrite_texts()


if __name__ == "__main__":
    main()
