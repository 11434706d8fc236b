"""What a TPU host needs beside its own JAX: profiles of distributions and their closure in
the course lock.

A profile names the distributions whose modules the apps and the library import (the test
beside this file reads every import and fails on a module no profile, and not the host,
provides, and on a profile entry nothing imports); its closure adds their dependencies as the
lock's environment (this interpreter's, ``make install``) declares them, evaluated for the TPU
host (CPython 3.11, Linux x86-64). What the host already has first on PYTHONPATH (``HOST_FIRST``)
is a leaf: neither it nor what it depends on is followed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import pathlib

from packaging.requirements import Requirement

from core import envlock
from tpu_scripts.wheelhouse import imports


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    what: str
    roots: tuple[str, ...]


PROFILES = (
    Profile(
        "core",
        "the lessons' own stack: marimo, charts and tables, Flax NNX, optax, orbax, grain, "
        "scikit-learn's data, pydantic, the service kit (FastAPI, uvicorn, httpx)",
        tuple(
            "marimo altair pandas pydantic flax optax orbax-checkpoint grain chex scikit-learn "
            "matplotlib pyyaml etils fastapi uvicorn httpx prometheus-client kubernetes-validate "
            "jsonschema flatbuffers".split()
        ),
    ),
    Profile("torch", "PyTorch (the CPU build): the references of many lessons", ("torch",)),
    Profile("rl", "gymnasium: CartPole-v1 beside the functional environment", ("gymnasium",)),
    Profile(
        "frameworks",
        "the Keras track and the interop lessons: Keras, TensorFlow (CPU), ONNX, LiteRT",
        tuple(
            "keras tensorflow-cpu safetensors onnx onnxscript onnxruntime ai-edge-litert".split()
        ),
    ),
    Profile(
        "operations",
        "workload operations: MLflow, Optuna, the Cloud Storage emulator, data contracts, "
        "traces, load runs, API fuzzing",
        tuple(
            "mlflow optuna gcp-storage-emulator google-cloud-storage gcsfs pandera "
            "opentelemetry-sdk locust schemathesis hypothesis".split()
        ),
    ),
    Profile(
        "tests",
        "pytest core/ on the host (the plugins pyproject's pytest settings use)",
        ("pytest", "pytest-timeout", "pytest-xdist", "hypothesis"),
    ),
)
BY_NAME = {profile.name: profile for profile in PROFILES}
# Modules that a library the course uses imports inside a function (or in a try), so no import
# of the course's own names them and no Requires-Dist declares them: the dotted name whose use
# in the code an app reaches needs them (``jax.export``: an import of it, or an attribute
# ``jax.export.x``), and why. profiles_test runs those paths and checks what they import.
LAZY_IMPORTS = {
    "flatbuffers": (
        "jax.export",
        "jax.export's serialize/deserialize import it (jax/_src/export/serialization.py); "
        "jax declares no dependency on it",
    ),
}
# Imported at run time by a library the course uses, where present, for a feature the course
# never turns on: not carried (profiles_test's run-time check leaves them out, saying why).
UNUSED_AT_RUN_TIME = {
    "filelock": "jax imports it for jax_compilation_cache_max_size (jax/_src/lru_cache.py), "
    "which the course never sets",
}
# Roots that no import names, and why the host needs them anyway.
NOT_IMPORTED = {
    **{name: why for name, (_, why) in LAZY_IMPORTS.items()},
    "chex": "the workspace lesson reports its version (core/lessons/setup/workspace.py)",
    "onnxscript": "torch.onnx.export's dynamo exporter imports it (interop/onnx_io.py)",
    "pytest-timeout": "a pytest plugin (pytest --timeout)",
    "pytest-xdist": "a pytest plugin (pytest -n)",
}
# On a Cloud TPU VM whose image brings JAX, jaxlib and libtpu, first on PYTHONPATH: never
# carried, and their own dependencies are the host's.
HOST_FIRST = ("jax", "jaxlib", "libtpu", "numpy", "scipy", "ml-dtypes", "opt-einsum")
# Imported by code that runs in its own environment, never on the course's TPU host.
OWN_ENVIRONMENT = {
    "kfp": "Kubeflow Pipelines: .venv-kfp (make kfp-env), its pins conflict with the course's",
    "torch_xla": "PyTorch/XLA: its own venv on a TPU VM (tpu_scripts/frameworks/envs/)",
}
# The TPU host's interpreter, for the dependencies' environment markers.
MARKER_ENVIRONMENT = {
    "python_version": envlock.LOCK_PYTHON,
    "python_full_version": f"{envlock.LOCK_PYTHON}.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def chosen(names: list[str]) -> list[Profile]:
    """Profiles by name ("all": every one); ValueError naming the valid ones."""
    if "all" in names:
        return list(PROFILES)
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        raise ValueError(
            f"unknown profile(s) {', '.join(unknown)}: choose from all, " + ", ".join(BY_NAME)
        )
    return [BY_NAME[name] for name in dict.fromkeys(names)]


@functools.lru_cache(maxsize=1)
def distributions() -> dict[str, importlib.metadata.Distribution]:
    """{normal name: distribution} of this environment (the lock's: ``make install``)."""
    found = {}
    for dist in envlock.distributions():
        if dist.metadata["Name"]:
            found.setdefault(envlock.normal(dist.metadata["Name"]), dist)
    return found


def requirements_of(name: str, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The requirements distribution ``name`` declares (installed here) that apply on the TPU
    host with ``extras`` requested."""
    out = []
    for text in distributions()[name].requires or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(
            marker.evaluate({**MARKER_ENVIRONMENT, "extra": extra}) for extra in extras or {""}
        ):
            out.append(requirement)
    return out


def closure(roots, pinned: dict[str, str], leaves=HOST_FIRST) -> dict[str, set[str]]:
    """{normal name: who asked for it} of ``roots`` and everything they need, within the lock
    ``pinned`` ({normal name: version}). ``leaves`` are taken as present and not followed.
    ValueError when a name is not in the lock or this environment has another version."""
    found: dict[str, set[str]] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo = [(envlock.normal(root), frozenset(), "profile") for root in roots]
    while todo:
        name, extras, by = todo.pop()
        if name in leaves:
            continue
        found.setdefault(name, set()).add(by)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        if name not in pinned:
            raise ValueError(f"{name} (needed by {by}) is not in the course lock")
        if name not in distributions():
            raise ValueError(f"{name} is not installed here: make install")
        if distributions()[name].version != pinned[name]:
            have = distributions()[name].version
            raise ValueError(f"{name} is {have} here, the lock pins {pinned[name]}: make install")
        for requirement in requirements_of(name, extras):
            todo.append((envlock.normal(requirement.name), frozenset(requirement.extras), name))
    return found


@functools.lru_cache(maxsize=1)
def module_index() -> dict[str, frozenset[str]]:
    """{dotted module: the distributions whose files hold it} in this environment: every
    package and module path of every distribution's RECORD (``google.cloud.storage``:
    google-cloud-storage; ``google.protobuf``: protobuf; a namespace such as ``google``: many)."""
    index: dict[str, set[str]] = {}
    for name, dist in distributions().items():
        for file in dist.files or []:
            parts = file.parts
            if not parts or ".dist-info" in parts[0] or parts[0] in ("..", "bin"):
                continue
            if not file.name.endswith((".py", ".so", ".pyd")):
                continue
            stem = file.name.split(".")[0]
            path = [*parts[:-1], *([] if stem == "__init__" else [stem])]
            for i in range(1, len(path) + 1):
                index.setdefault(".".join(path[:i]), set()).add(name)
    return {module: frozenset(names) for module, names in index.items()}


def providers(dotted: str) -> tuple[str, frozenset[str]]:
    """(the deepest module of ``dotted`` that a distribution holds, those distributions);
    ``(top, empty)`` when none holds even its top level (not installed here)."""
    parts = dotted.split(".")
    index = module_index()
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in index:
            return module, index[module]
    return parts[0], frozenset()


def provided_by(names: list[str], leaves=HOST_FIRST) -> set[str]:
    """The distributions the profiles ``names`` bring, with the host's own ``leaves``."""
    pinned = envlock.pins(envlock.COURSE_LOCK.read_text())
    roots = [root for profile in chosen(names) for root in profile.roots]
    return set(closure(roots, pinned, leaves)) | set(leaves)


def gaps(imported: dict[str, set[str]], dists: set[str]) -> dict[str, str]:
    """{module: why} for each imported dotted name that no distribution of ``dists`` holds."""
    missing = {}
    for dotted in imported:
        module, holders = providers(dotted)
        top = module.split(".")[0]
        if holders & dists:
            continue
        if top in OWN_ENVIRONMENT:
            continue  # never imported on the course's TPU host
        held = ", ".join(sorted(holders)) or "nothing installed here"
        missing[module] = f"held by {held}; imported by {', '.join(sorted(imported[dotted]))}"
    return missing


def coverage(
    names: list[str], apps: list[pathlib.Path] | None = None, root: pathlib.Path = imports.ROOT
) -> dict[str, dict]:
    """{app stem: {module: why}} for each app that imports a module neither the profiles
    ``names`` nor the host's own JAX stack provide; {} when every app is covered."""
    dists = provided_by(names)
    out = {}
    for app in apps if apps is not None else imports.app_files(root):
        missing = gaps(with_lazy_imports(imports.third_party(app, root), root), dists)
        if missing:
            out[app.stem] = missing
    return out


def with_lazy_imports(
    imported: dict[str, set[str]], root: pathlib.Path = imports.ROOT
) -> dict[str, set[str]]:
    """``imported`` ({module: files}) plus the LAZY_IMPORTS modules that those files' code
    reaches (a file that imports or uses their dotted name)."""
    out = {name: set(files) for name, files in imported.items()}
    files = sorted(set().union(*imported.values())) if imported else []
    for file in files:
        used = _dotted_uses(root / file)
        for module, (dotted, _) in LAZY_IMPORTS.items():
            if any(name == dotted or name.startswith(dotted + ".") for name in used):
                out.setdefault(module, set()).add(f"{file} (lazily)")
    return out


@functools.cache
def _dotted_uses(path: pathlib.Path) -> frozenset[str]:
    """The dotted names ``path``'s code imports or reads as attributes of a name (``jax.export
    .deserialize``, ``from jax import export``: jax.export); comments and strings are not code."""
    if not path.is_file():
        return frozenset()
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute):
            found.add(ast.unparse(node))
    return frozenset(found)
