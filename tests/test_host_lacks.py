"""A host that lacks something a lesson needs says so: `STOPPED:` naming it and how to get it,
exit 0, never a traceback (issue 37, kind 7).

On a v5e TPU VM without networking pod_slices raised OSError [Errno 97] (no loopback socket
there), and attention and functional_env stopped at ModuleNotFoundError (torch, gymnasium were
not installed). Here such a host is made for the run by tests/fixtures/host_lacks/sitecustomize.py
(modules uninstalled as import sees them, AF_INET sockets failing with Errno 97), and an app
that needs what it lacks must stop at its lab.require with the reason. One app per kind of lack
runs here; REQUIRES, found by running every candidate app on such a host
(tests/tools/sweep_host_lacks.py), says which apps need what, and a static check keeps each
app's lab.require calls naming it.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from core import curriculum, lab, runtime

HOST_LACKS = pathlib.Path(__file__).resolve().parent / "fixtures" / "host_lacks"
OPTIONAL = "torch,tensorflow,keras,gymnasium,onnx,onnxruntime,ai_edge_litert,mlflow,optuna"
OPTIONAL += ",locust,schemathesis,onnxscript,kubernetes_validate,pandera"
OPTIONAL += ",opentelemetry.sdk"
LIMIT_S = 180  # a hang guard, not a speed assertion


def lacking_env(modules: str = "", sockets: bool = False) -> dict[str, str]:
    """The environment of a run on a host without ``modules`` (and loopback sockets)."""
    return lab.child_env(
        JAX_NUM_CPU_DEVICES="8",
        JAX_PLATFORMS="cpu",
        # this checkout's core, not an installed copy's (runtime.python_path keeps the rest)
        PYTHONPATH=runtime.python_path(HOST_LACKS, curriculum.REPO_ROOT),
        LAB_BLOCK_MODULES=modules,
        LAB_BLOCK_SOCKETS="1" if sockets else "0",
    )


def test_the_made_up_host_lacks_what_it_says(run_app, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib.util, sys\n"
        "from core import runtime\n"
        "print(runtime.has_module('torch'), runtime.has_module('numpy'),\n"
        "      importlib.util.find_spec('torch'), 'torch' in sys.modules)\n"
        "print(runtime.loopback_socket_problem())\n"
        "try:\n    import torch\nexcept ModuleNotFoundError as error:\n    print(error)\n",
        encoding="utf-8",
    )
    result = run_app(
        [probe], env=lacking_env("torch", sockets=True), cwd=tmp_path, timeout=60, one_off=True
    )
    assert result.stdout.splitlines() == [
        "False True None False",
        "socket(AF_INET).bind(('127.0.0.1', 0)) raised [Errno 97] Address family not supported "
        "by protocol",
        "No module named 'torch'",
    ], result.stdout + result.stderr


CASES = [
    ("attention", lacking_env(OPTIONAL), ["`torch` is not installed", "pip install torch"]),
    ("pod_slices", lacking_env(sockets=True), ["loopback socket", "Errno 97"]),
    # an optional package core imports lazily (core/state/tracking.py), not at the app's top
    ("capacity_cost", lacking_env("mlflow"), ["`mlflow` is not installed", "pip install mlflow"]),
    # an optional package a lesson module imported at its top, so the app's setup failed
    ("mlops", lacking_env("pandera"), ["`pandera` is not installed", "pip install pandera"]),
    # a module JAX itself imports lazily (jax.export's serialization): a v5e host's ImportError
    (
        "export_serving_contract",
        lacking_env("flatbuffers"),
        ["`flatbuffers` is not installed", "pip install flatbuffers"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_app_on_a_host_that_lacks_what_it_needs_stops_and_says_what(case, run_app):
    stem, env, said = case
    # each made-up host serves this one run: a fresh interpreter (run_app's one_off)
    result = run_app(
        [curriculum.APPS_DIR / f"{stem}.py"],
        env=env,
        cwd=curriculum.REPO_ROOT,
        timeout=LIMIT_S,
        one_off=True,
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-4000:]
    assert result.returncode == 0, output[-4000:]
    stopped = [line for line in result.stdout.splitlines() if line.startswith("STOPPED: ")]
    assert stopped and all(text in stopped[0] for text in said), output[-4000:]


# What each app needs that a host may lack, found by running every app that can reach an
# optional framework or a socket on a host without any (tests/tools/sweep_host_lacks.py):
# (optional modules, loopback sockets). Each app names them in its lab.require calls.
REQUIRES: dict[str, tuple[set[str], bool]] = {
    "adam_clipping_schedules": ({"torch"}, False),
    "attention": ({"torch"}, False),
    "batched_rollouts": ({"gymnasium"}, False),
    "accelerator_jobs": ({"kubernetes_validate"}, False),
    "capacity_cost": ({"optuna", "mlflow"}, False),
    "containerize_service": ({"schemathesis", "hypothesis", "flatbuffers"}, True),
    "edge_deploy": ({"tensorflow", "ai_edge_litert", "flatbuffers"}, False),
    # a storage emulator on 127.0.0.1, written to through gcsfs and google-cloud-storage
    "failure_runbooks": ({"gcp_storage_emulator", "gcsfs", "google.cloud.storage"}, True),
    "framework_interop": (set(), False),  # per chosen format: interop.parity.MODULES
    "functional_env": ({"gymnasium"}, False),
    # jax.export's serialization imports flatbuffers lazily (a v5e host without it: ImportError)
    "export_serving_contract": ({"flatbuffers"}, False),
    "inference_capacity": ({"locust", "kubernetes_validate", "flatbuffers"}, True),
    "rollback_provenance": ({"flatbuffers"}, False),
    "llmops": ({"opentelemetry.sdk"}, True),
    "losses_value_and_grad": ({"torch"}, False),
    "mlflow_tracking": ({"mlflow"}, False),
    "mlops": ({"pandera"}, False),
    "modelops": ({"mlflow", "flatbuffers"}, False),
    "observability": (set(), True),  # the job's metrics endpoint
    "pod_slices": (set(), True),  # jax.distributed's coordinator
    "torch_to_flax": ({"torch", "safetensors"}, False),
    # the Keras track: keras, and torch / tensorflow per chosen backend (each in its process);
    # safetensors where the weights travel to the backends' processes as a file
    "keras_custom_loop": ({"keras"}, False),
    "keras_distribution": ({"keras"}, False),
    **{
        f"keras_{name}": ({"keras", "safetensors"}, False)
        for name in (
            "cnn_digits",
            "debug_unstable",
            "nnx_twin",
            "saving",
            "tiny_mlp",
            "train_eval_step",
            "transformer_block",
        )
    },  # fmt: skip
}


def _required(path: pathlib.Path) -> tuple[set[str], bool]:
    """The modules an app's lab.require calls name, and whether one asks for sockets."""
    modules, sockets = set(), False
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lab.require":
            modules |= {a.value for a in node.args if isinstance(a, ast.Constant)}
            sockets |= any(
                k.arg == "sockets" and getattr(k.value, "value", False) for k in node.keywords
            )
    return modules, sockets


@pytest.mark.parametrize("stem", sorted(REQUIRES))
def test_each_app_requires_what_it_needs(stem):
    modules, sockets = _required(curriculum.APPS_DIR / f"{stem}.py")
    assert modules or sockets or "lab.require(" in (curriculum.APPS_DIR / f"{stem}.py").read_text()
    needed_modules, needs_sockets = REQUIRES[stem]
    assert needed_modules <= modules, f"{stem} needs lab.require({sorted(needed_modules)})"
    assert sockets or not needs_sockets, f"{stem} needs lab.require(sockets=True)"


def test_a_lesson_runs_its_defaults_on_a_one_device_host(run_app):
    """A one-chip TPU host has one JAX device: random_keys' defaults once asked for 8 and
    stopped there ("--devices 8 asks for more devices than JAX sees (1)"). Its default is
    now the host's count (at most 8); asking for more is still refused. One CPU device here
    stands in for the chip."""
    env = lab.child_env(JAX_NUM_CPU_DEVICES="1", JAX_PLATFORMS="cpu")
    app = curriculum.APPS_DIR / "random_keys.py"
    for flags, said in (([], "PASS: "), (["--devices", "2"], "STOPPED: --devices 2 asks for")):
        result = run_app([app, *flags], env=env, cwd=curriculum.REPO_ROOT, timeout=LIMIT_S)
        output = result.stdout + result.stderr
        assert result.returncode == 0 and "Traceback" not in output, output[-4000:]
        verdicts = [
            line for line in result.stdout.splitlines() if line.startswith(("PASS", "FAIL", "STOP"))
        ]
        assert verdicts and all(line.startswith(said) for line in verdicts), output[-4000:]


def test_apps_that_run_hadolint_require_it():
    """containerize_service ran container.hadolint() on the chip's host, which had no hadolint
    (a FileNotFoundError traceback): an app that runs it asks lab.require(programs=...) first
    (core/serving/container_test.py checks the refusal's words on a PATH without it)."""
    users = [p for p in curriculum.APPS_DIR.glob("*.py") if "container.hadolint(" in p.read_text()]
    assert users
    for path in users:
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "lab.require"
        ]
        programs = {
            ast.literal_eval(k.value) for c in calls for k in c.keywords if k.arg == "programs"
        }
        assert any("hadolint" in p for p in programs), f"{path.name}: lab.require(programs=...)"


# The modules core, interop and capstones import from the wheelhouse's optional profiles (what a
# TPU host's install may leave out: tpu_scripts/wheelhouse/profiles.py), plus kubernetes-validate
# (in its core profile, yet missing on the chip's host).
MAY_BE_MISSING = {"kubernetes-validate"}
RUN_BY_ITS_TOOL = {"core/serving/locustfile.py"}  # locust imports it; no lesson does


def test_a_package_a_host_may_lack_is_imported_where_used_and_named():
    """mlops and llmops imported pandera and OpenTelemetry's SDK at their modules' tops, so the
    apps' setup failed before any lab.require; kubernetes_validate, mlflow and onnxscript were
    imported lazily but runtime.OPTIONAL_MODULES did not know them, so no refusal could name
    their packages. Every import of such a package sits inside a function, and an entry of
    runtime.OPTIONAL_MODULES covers it (lab.require names it with its pip package)."""
    import importlib.metadata

    from tpu_scripts.wheelhouse import profiles

    def normal(name: str) -> str:
        return name.lower().replace("_", "-")

    optional = {normal(r) for p in profiles.PROFILES if p.name not in ("core", "tests")
                for r in p.roots} | MAY_BE_MISSING  # fmt: skip
    providers = importlib.metadata.packages_distributions()
    keys = set(runtime.OPTIONAL_MODULES)
    found = []
    for folder in ("core", "interop", "capstones"):
        for path in sorted((curriculum.REPO_ROOT / folder).rglob("*.py")):
            where = str(path.relative_to(curriculum.REPO_ROOT))
            if path.name.endswith("_test.py") or where in RUN_BY_ITS_TOOL:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            top = {id(node) for node in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    if not {normal(d) for d in _providers(name, providers)} & optional:
                        continue
                    if id(node) in top:
                        found.append(f"{where}:{node.lineno}: {name} imported at the top")
                    if not any(
                        name == k or name.startswith(k + ".") or k.startswith(name + ".")
                        for k in keys
                    ):
                        found.append(f"{where}:{node.lineno}: {name} not in OPTIONAL_MODULES")
    assert not found, "\n".join(found)


def _providers(name: str, by_top: dict[str, list[str]]) -> list[str]:
    """The distributions that provide module ``name``: by its top-level package, or, for a
    namespace several share (google: protobuf, google-auth, google-cloud-storage...), the one
    whose files hold the module."""
    import importlib.metadata
    import importlib.util

    candidates = by_top.get(name.split(".")[0], [])
    if len(candidates) <= 1:
        return list(candidates)
    spec = importlib.util.find_spec(name)
    origin = pathlib.Path(spec.origin).resolve() if spec and spec.origin else None
    for dist in dict.fromkeys(candidates):
        files = importlib.metadata.distribution(dist).files or ()
        if origin is not None and any(origin == pathlib.Path(f.locate()).resolve() for f in files):
            return [dist]
    return list(candidates)
