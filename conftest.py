"""Suite-wide pytest setup.

1. Every test process sees the lab's 8 virtual CPU devices (JAX fixes the count when its
   backend starts, so this runs before anything imports jax). JAX_TPU_LAB_TEST_BACKEND=tpu
   runs the suite on a TPU chip instead, in one process (tests/tools/chip_mode.py): the TPU
   is the default backend, the CPU backend stays beside it, and tests marked needs_devices(n)
   or cpu_only(reason) are skipped there with their reason.
2. A marimo test cell whose ancestor stops (``mo.stop``) is never executed, and marimo's
   pytest bridge then returns quietly: the test would pass without asserting anything.
   Here such a test fails, naming the reason.
3. One persistent XLA compilation cache for the session's JAX processes, after a probe shows
   it reads back on this CPU (tests/tools/compilation_cache.py); JAX_LAB_TEST_COMPILATION_CACHE=0
   turns it off. Set here, in the controller, so xdist workers and every app subprocess inherit it.
   Before it, on the CPU, XLA_FLAGS gains LLVM's optimizer off (tests/tools/fast_compile.py:
   the suite compiles thousands of small programs; JAX_LAB_TEST_FAST_COMPILE=0 keeps defaults).
4. One fresh folder for the session's cache of trained weights (core/post_training/cache.py,
   JAX_LAB_CACHE_DIR): the first process that trains a base model stores it, the other apps,
   workers and browser kernels of the session load it; the next session starts empty, so every
   run trains once and never reads an earlier run's results. A JAX_LAB_CACHE_DIR set by the
   caller (a folder, or "off") is kept.
6. One fresh folder for the assessments' progress files (JAX_TPU_LAB_PROGRESS_DIR,
   core/assessment/sheets.py), so no test, app or served kernel writes a learner's progress
   into runs/assessments/.
5. Modules run longest first (tests/module_seconds.json: seconds per module from an earlier
   run; `make test PYTEST_FLAGS=--module-seconds-out=tests/module_seconds.json` rewrites it),
   so with xdist's one-module-per-worker scheduling (Makefile: --no-loadscope-reorder) no long
   module starts last while the other worker idles. A module not in the file is placed by its
   test count. Within a module the order is untouched. The browser tour and the headless app
   runs are each split into parts that different workers share (tests/tools/scheduling.py),
   taken first and in turns.
7. After collection, each process freezes what it holds out of the garbage collector
   (gc.freeze): the session's imports and test modules live until it ends.
"""

import gc
import importlib.util
import json
import os
import pathlib
import shutil
import tempfile

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent
COMPILATION_CACHE_DIR = REPO_ROOT / ".jax_compilation_cache"


def _load_tool(name: str):
    path = REPO_ROOT / "tests" / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_chip_mode = _load_tool("chip_mode")
_scheduling = _load_tool("scheduling")
try:
    TEST_BACKEND = _chip_mode.set_platforms(os.environ)  # before anything imports jax
except ValueError as error:
    pytest.exit(str(error), returncode=pytest.ExitCode.USAGE_ERROR)

# Before the cache's probe, so the probe compiles as the session will (flags are in the key).
_FAST_COMPILE_STATUS = (
    _load_tool("fast_compile").enable(TEST_BACKEND)
    if "PYTEST_XDIST_WORKER" not in os.environ  # workers inherit the controller's XLA_FLAGS
    else None
)
_CACHE_STATUS = (
    _load_tool("compilation_cache").enable(COMPILATION_CACHE_DIR)
    if "PYTEST_XDIST_WORKER" not in os.environ  # workers inherit the controller's decision
    else None
)

_WEIGHTS_CACHE_ENV = "JAX_LAB_CACHE_DIR"  # core.post_training.cache.ENV_VAR (jax not imported yet)
_SESSION_WEIGHTS_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ and _WEIGHTS_CACHE_ENV not in os.environ:
    _SESSION_WEIGHTS_CACHE = tempfile.mkdtemp(prefix="jax-lab-weights-cache-")
    os.environ[_WEIGHTS_CACHE_ENV] = _SESSION_WEIGHTS_CACHE


_PROGRESS_ENV = "JAX_TPU_LAB_PROGRESS_DIR"  # core.assessment.sheets.PROGRESS_DIR_ENV
_SESSION_PROGRESS_DIR = None
if "PYTEST_XDIST_WORKER" not in os.environ:
    _SESSION_PROGRESS_DIR = tempfile.mkdtemp(prefix="jax-lab-assessment-progress-")
    os.environ[_PROGRESS_ENV] = _SESSION_PROGRESS_DIR


def pytest_configure(config):
    for marker in _chip_mode.MARKERS:
        config.addinivalue_line("markers", marker)
    if TEST_BACKEND != "tpu":
        return
    if getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(
            f"{_chip_mode.ENV}=tpu runs in one process (a chip serves one process at a time): "
            "add -p no:xdist, or -n 0"
        )
    import jax

    try:
        backend = jax.default_backend()
    except RuntimeError as error:  # JAX_PLATFORMS names the TPU and this host has none
        backend = f"none ({str(error).splitlines()[0]})"
    if backend != "tpu":
        raise pytest.UsageError(
            f"{_chip_mode.ENV}=tpu needs a TPU: JAX's default backend here is {backend} "
            f"(JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')!r})"
        )


def pytest_runtest_setup(item):
    if TEST_BACKEND != "tpu":
        return  # on the CPU every test runs, as in CI
    import jax

    params = getattr(getattr(item, "callspec", None), "params", {})
    reason = _chip_mode.skip_reason(
        item.iter_markers(),
        jax.default_backend(),
        jax.device_count(),
        jax.devices()[0].device_kind,
        params,
    )
    if reason:
        pytest.skip(reason)


def pytest_report_header(config):
    # xdist workers inherit both decisions and report neither (None: no header line).
    weights = _SESSION_WEIGHTS_CACHE and f"trained-weights cache: {_SESSION_WEIGHTS_CACHE}"
    backend = f"test backend: {TEST_BACKEND} (JAX_PLATFORMS={os.environ['JAX_PLATFORMS']})"
    lines = (_FAST_COMPILE_STATUS, _CACHE_STATUS, weights, backend)
    return [line for line in lines if line]


def pytest_unconfigure(config):
    if _SESSION_WEIGHTS_CACHE and "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(_SESSION_WEIGHTS_CACHE, ignore_errors=True)
    if _SESSION_PROGRESS_DIR and "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(_SESSION_PROGRESS_DIR, ignore_errors=True)


def _is_marimo_cell(obj) -> bool:
    return type(obj).__module__ == "marimo._ast.cell" and type(obj).__name__ == "Cell"


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if not _is_marimo_cell(pyfuncitem.obj):
        return (yield)
    from marimo._runtime.runner import by_refs

    original = by_refs._classify

    def classify_or_fail(result):
        stop = original(result)
        if stop is not None:
            pytest.fail(
                f"{pyfuncitem.name} did not run: a cell it depends on called mo.stop "
                "(a control or run button left it stopped). A test cell must execute.",
                pytrace=False,
            )
        return stop

    by_refs._classify = classify_or_fail
    try:
        return (yield)
    finally:
        by_refs._classify = original


@pytest.fixture
def highest_matmul_precision_on_tpu():
    """In chip mode, the test's float32 matmuls run at HIGHEST (6 bfloat16 passes, not the
    TPU's one-pass DEFAULT): a check of what the code computes against float64, not of the MXU
    (JAX's own tests do the same); numerics.tolerance reads HIGHEST then. On the CPU (CI) it
    changes nothing. A module uses it with pytestmark = pytest.mark.usefixtures(...)."""
    if TEST_BACKEND != "tpu":
        yield
        return
    import jax

    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="session")
def run_app():
    """``run_app(argv, env=..., cwd=..., timeout=...)``: `python ARGV...` as a
    subprocess.CompletedProcess, from a pre-imported server (tests/tools/app_runner.py)."""
    return _load_tool("app_runner").run


@pytest.fixture(scope="session")
def run_lesson(run_app):
    """``run_lesson(stem, *flags, timeout=...)``: `python apps/STEM.py FLAGS...` headless on
    the course's 8 CPU devices, from the repository root (a subprocess.CompletedProcess)."""
    from core import curriculum, runtime

    def run(stem: str, *flags, timeout: float):
        return run_app(
            [curriculum.APPS_DIR / f"{stem}.py", *flags],
            env=runtime.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu"),
            cwd=curriculum.REPO_ROOT,
            timeout=timeout,
        )

    return run


MODULE_SECONDS_FILE = REPO_ROOT / "tests" / "module_seconds.json"
SECONDS_PER_UNKNOWN_TEST = 0.3  # a module missing from the file: about the suite's median test


def pytest_addoption(parser):
    parser.addoption(
        "--module-seconds-out",
        default=None,
        help="write the seconds each test module took (JSON) to this file after the run",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    try:
        recorded = json.loads(MODULE_SECONDS_FILE.read_text(encoding="utf-8"))["seconds"]
    except (OSError, ValueError, KeyError):
        recorded = {}
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def expected_seconds(module: str) -> float:
        seconds = recorded.get(module)
        if isinstance(seconds, (int, float)):
            return float(seconds)
        return SECONDS_PER_UNKNOWN_TEST * len(modules[module])

    # sorted() is stable, and every xdist worker collects the same items: the same order.
    ordered = sorted(modules, key=lambda module: -expected_seconds(module))
    items[:] = _scheduling.ordered([item for module in ordered for item in modules[module]])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """loadscope with the two longest modules split into parts (tests/tools/scheduling.py)."""
    if config.getoption("dist") == "loadscope":
        return _scheduling.make_scheduler(config, log)
    return None


# Seconds per test module (setup + call + teardown, summed over its tests): the list to read
# before cutting CI time. With xdist these reports arrive in the controller process.
_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    ranked = sorted(_MODULE_SECONDS.items(), key=lambda item: -item[1])
    terminalreporter.section(f"test time by module (all workers: {total:.0f} s)")
    for module, seconds in ranked[:30]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:5.1f} %  {module}")
    out = terminalreporter.config.getoption("--module-seconds-out")
    if out and "PYTEST_XDIST_WORKER" not in os.environ:
        document = {
            "about": "seconds per test module in one run of the suite (conftest.py orders "
            "modules longest first from it)",
            "seconds": {module: round(seconds, 1) for module, seconds in ranked},
        }
        pathlib.Path(out).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def pytest_collection_finish(session):
    """Freeze what collection left (the stack's imports, every test module) out of the garbage
    collector (gc.freeze: a permanent generation that collections skip): a full collection in
    a worker otherwise walks millions of objects that live for the whole session.
    In-process modules (optimizers, training, attention tests, one process, compilation cache
    off, 2-core host): 67.8 and 72.8 -> 64.2 and 69.9 CPU s."""
    gc.collect()
    gc.freeze()
