"""The profiles against the source: every module an app, the library or its tests import is
provided by a profile or by the TPU host's own JAX stack, so no lesson stops on
ModuleNotFoundError; and no profile carries what nothing imports."""

import pathlib

import pytest

from tpu_scripts.wheelhouse import imports, profiles


def test_every_app_reaches_only_modules_the_profiles_or_the_host_provide():
    assert profiles.coverage(["all"]) == {}


def test_every_library_module_imports_only_what_the_profiles_or_the_host_provide():
    imported = imports.direct_third_party(imports.library_files())
    assert profiles.gaps(imported, profiles.provided_by(["all"])) == {}


def test_the_library_tests_run_on_the_host_with_the_tests_profile():
    tests = imports.library_files(tests=True) + [imports.ROOT / "conftest.py"]
    imported = imports.direct_third_party(tests)
    assert profiles.gaps(imported, profiles.provided_by(["all"])) == {}


def test_every_profile_entry_is_imported_somewhere_or_says_why():
    files = imports.app_files() + imports.library_files() + imports.library_files(tests=True)
    imported = imports.direct_third_party(files)
    holders = set().union(*(profiles.providers(name)[1] for name in imported))
    roots = {root for profile in profiles.PROFILES for root in profile.roots}
    unused = sorted(roots - holders - set(profiles.NOT_IMPORTED))
    assert unused == [], f"nothing imports {unused}: leave them out or say why (NOT_IMPORTED)"
    assert set(profiles.NOT_IMPORTED) <= roots


def test_the_tpu_run_s_module_not_found_lessons_need_what_their_profiles_bring():
    # "Tried on a TPU": attention stopped on torch, functional_env on gymnasium
    apps = [imports.ROOT / "apps" / "attention.py", imports.ROOT / "apps" / "functional_env.py"]
    gaps = profiles.coverage(["core"], apps)
    assert set(gaps["attention"]) == {"torch"} and set(gaps["functional_env"]) == {"gymnasium"}
    assert profiles.coverage(["core", "torch", "rl"], apps) == {}


def test_the_scanner_follows_the_project_s_imports_and_skips_fallbacks(tmp_path):
    root = tmp_path
    (root / "apps").mkdir()
    (root / "core" / "deep").mkdir(parents=True)
    (root / "core" / "__init__.py").write_text("")
    (root / "core" / "deep" / "__init__.py").write_text("from . import leaf\n")
    (root / "core" / "deep" / "leaf.py").write_text(
        "import json\n"
        "def later():\n    import not_installed_anywhere.sub\n"
        "try:\n    import optional_thing\nexcept ImportError:\n    optional_thing = None\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import typing_only\n"
    )
    app = root / "apps" / "lesson.py"
    app.write_text("import marimo\nfrom core.deep import leaf\n")
    found = imports.third_party(app, root)
    assert set(found) == {"marimo", "not_installed_anywhere.sub"}
    assert found["not_installed_anywhere.sub"] == {"core/deep/leaf.py"}
    gaps = profiles.coverage(["core"], [app], root)
    assert set(gaps["lesson"]) == {"not_installed_anywhere"}
    assert "nothing installed here" in gaps["lesson"]["not_installed_anywhere"]


def test_a_namespace_is_matched_by_its_deepest_module():
    # google.protobuf (core, via protobuf) does not provide google.cloud.storage (operations)
    imported = {"google.cloud.storage": {"x.py"}, "google.protobuf.json_format": {"y.py"}}
    gaps = profiles.gaps(imported, profiles.provided_by(["core"]))
    assert list(gaps) == ["google.cloud.storage"]
    assert profiles.gaps(imported, profiles.provided_by(["core", "operations"])) == {}


def test_unknown_profiles_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="choose from all, core, torch"):
        profiles.chosen(["core", "gpu"])
    assert [p.name for p in profiles.chosen(["all"])] == [p.name for p in profiles.PROFILES]


def test_the_host_s_own_jax_stack_is_a_leaf():
    pinned = {"flax": "0.12.8"}
    with pytest.raises(ValueError, match="not in the course lock"):
        profiles.closure(["flax"], pinned)  # flax needs msgpack, which this lock lacks
    lock = (pathlib.Path(imports.ROOT) / "requirements.lock").read_text()
    from core import envlock

    closure = profiles.closure(["optax"], envlock.pins(lock))
    assert "optax" in closure and not set(closure) & set(profiles.HOST_FIRST)


EXPORTING_APPS = ("export_serving_contract", "inference_capacity", "rollback_provenance")


def test_the_apps_that_serialize_with_jax_export_need_flatbuffers():
    """On a v5e host with the core wheelhouse these three ended in "ImportError: Please
    install 'flatbuffers' in order to use Exported serialization": jax imports it only when
    an Exported is serialized, and declares no dependency on it."""
    apps = [imports.ROOT / "apps" / f"{stem}.py" for stem in EXPORTING_APPS]
    without = profiles.provided_by(["core"]) - {"flatbuffers"}
    for app in apps:
        reached = profiles.with_lazy_imports(imports.third_party(app))
        assert "flatbuffers" in profiles.gaps(reached, without), app.stem
    # with the core profile, none lacks anything but the optional packages it requires
    assert all(set(gaps) <= {"mlflow", "mlflow.entities"}
               for gaps in profiles.coverage(["core"], apps).values())  # fmt: skip
    assert profiles.coverage(["core", "operations"], apps) == {}
    # an app that never exports needs no flatbuffers
    plain = profiles.with_lazy_imports(imports.third_party(imports.ROOT / "apps" / "vmap.py"))
    assert "flatbuffers" not in plain


# The course's paths through what JAX, Flax and Orbax import only when used: jax.export's
# serialization (the deployment lessons' artifact), an Orbax checkpoint saved and restored,
# a profiler trace. Run in a fresh process; it prints every module it imported from a file.
RUN_TIME_PATHS = """
import json, pathlib, sys, tempfile
import jax, jax.numpy as jnp
from core.perf import trace
from core.serving.predict import export
from core.state import checkpoint

out = pathlib.Path(tempfile.mkdtemp())
export.write_artifacts(export.train(steps=5), out / "artifact", max_batch=4)
export.load_artifacts(out / "artifact")
state = {"w": jnp.ones((4, 4))}
with checkpoint.Checkpointer(out / "ckpt", save_every=1, async_save=False) as ckpt:
    ckpt.save(1, state, {"next_index": 0}, {"width": 4}, {})
checkpoint.Checkpointer(out / "ckpt").restore_latest(checkpoint.abstract_like(state))
trace.capture(jax.jit(lambda p: p * 0.5), jnp.ones((8, 8)), out / "trace", steps=2)
print(json.dumps(sorted(n for n, m in list(sys.modules.items()) if getattr(m, "__file__", None))))
"""


def test_what_the_course_imports_at_run_time_is_in_the_core_profile(tmp_path):
    """Not only what the source names: run the paths and check every module they loaded
    (by the distribution whose files hold it) against the core profile and the host's JAX."""
    import json
    import subprocess
    import sys

    from core import runtime

    result = subprocess.run(
        [sys.executable, "-c", RUN_TIME_PATHS],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env=runtime.child_env(JAX_PLATFORMS="cpu", PYTHONPATH=runtime.python_path(imports.ROOT)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"flatbuffers", "orbax.checkpoint", "tensorstore"} <= set(loaded)
    third_party = {
        name: {"run"}
        for name in loaded
        if name.split(".")[0] not in (*sys.stdlib_module_names, *imports.FIRST_PARTY)
        and profiles.providers(name)[1]  # held by an installed distribution's files
    }
    gaps = profiles.gaps(third_party, profiles.provided_by(["core"]))
    # setuptools' _distutils_hack and this checkout's editable-install finder are the site's
    # start-up hooks (.pth files), not imports of the course
    hooks = {"setuptools", "jax-tpu-lab"}
    unused = {
        module
        for module in gaps
        if profiles.providers(module)[1] <= set(profiles.UNUSED_AT_RUN_TIME) | hooks
    }
    assert set(gaps) == unused, sorted(set(gaps) - unused)
