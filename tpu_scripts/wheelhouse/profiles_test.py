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
