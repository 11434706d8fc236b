import json
import os
import platform
import subprocess
import sys

import pytest

from core import documents
from core.lessons.setup import workspace

GIT_IDENTITY = ("-c", "user.email=a@b", "-c", "user.name=t")


def git(repo, *args):
    """Run git in ``repo`` and return its stdout: the reference the module is checked against."""
    done = subprocess.run(
        ["git", *GIT_IDENTITY, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def no_outer_repo(tmp_path, monkeypatch):
    # git would otherwise walk up from tmp_path and could find an enclosing repository.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    return tmp_path


def fresh_jax(cpu_devices: int) -> tuple[str, int, str]:
    """(jax version, device count, python version) as a new interpreter reports them."""
    env = dict(os.environ, JAX_NUM_CPU_DEVICES=str(cpu_devices), JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import jax, sys; print(jax.__version__, jax.device_count(), sys.version)",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    jax_version, device_count, python_version = done.stdout.split()[:3]
    return jax_version, int(device_count), python_version


@pytest.fixture(scope="module")
def receipt():
    return workspace.environment_receipt()


def test_receipt_agrees_with_a_fresh_process(receipt):
    # conftest asks every test process for this many CPU devices.
    cpu_devices = int(os.environ["JAX_NUM_CPU_DEVICES"])
    jax_version, device_count, python_version = fresh_jax(cpu_devices)
    assert receipt["packages"]["jax"]["version"] == jax_version
    assert receipt["python_version"] == python_version
    assert receipt["jax"]["backend"] == "cpu"
    assert receipt["jax"]["device_count"] == device_count == cpu_devices
    assert len(receipt["jax"]["devices"]) == cpu_devices
    assert receipt["env"]["JAX_NUM_CPU_DEVICES"] == str(cpu_devices)


def test_receipt_host_matches_the_platform_module(receipt):
    assert receipt["host"]["os"] == platform.system()
    assert receipt["host"]["machine"] == platform.machine()
    assert receipt["host"]["platform"] == platform.platform()
    assert receipt["host"]["cpu_count"] == os.cpu_count()
    assert receipt["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert receipt["python_executable"] == sys.executable


def test_receipt_versions_match_the_modules_themselves(receipt):
    import flax
    import jax
    import optax

    packages = receipt["packages"]
    assert packages["jax"]["version"] == jax.__version__
    assert packages["flax"]["version"] == flax.__version__
    assert packages["optax"]["version"] == optax.__version__
    assert set(packages) == {package.name for package in workspace.PACKAGES}


def test_receipt_without_env_and_json_round_trip(receipt):
    without = workspace.environment_receipt(include_env=False)
    assert without["env"] == {}
    for document in (receipt, without):
        text = workspace.to_json(document)
        assert json.loads(text) == document
        assert workspace.from_json(text) == document
        assert workspace.from_json(text.encode()) == document


def test_receipt_rows_list_every_leaf(receipt):
    import jax

    rows = workspace.receipt_rows(receipt)
    fields = [row["field"] for row in rows]
    assert len(fields) == len(set(fields))
    assert "packages.jax.version" in fields and "git.revision" in fields and "host.os" in fields
    by_field = {row["field"]: row["value"] for row in rows}
    assert by_field["jax.device_count"] == str(receipt["jax"]["device_count"])
    assert by_field["jax.devices"].split(", ") == [str(d) for d in jax.devices()]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("git"), "'git' is missing"),
        (lambda r: r["jax"].update(device_count="8"), "jax.device_count"),
        (lambda r: r["jax"].update(device_count=True), "jax.device_count"),
        (lambda r: r["host"].pop("os"), "host.os"),
        (lambda r: r["packages"].update(jax="0.10.2"), "packages.jax"),
        (lambda r: r["packages"]["flax"].update(version=12), "packages.flax.version"),
        (lambda r: r["env"].update(XLA_FLAGS=1), "env.XLA_FLAGS"),
        (lambda r: r.update(schema_version=99), "schema_version 99"),
        (lambda r: r.update(created_utc="yesterday"), "ISO time"),
    ],
)
def test_from_json_rejects_a_bad_receipt(receipt, mutate, message):
    document = json.loads(json.dumps(receipt))
    mutate(document)
    with pytest.raises(ValueError, match=message):
        workspace.from_json(json.dumps(document))


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"name": "jax-tpu-lab"}', "schema_version None"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_from_json_rejects_a_foreign_file(text, message):
    with pytest.raises(ValueError, match=message):
        workspace.from_json(text)


def test_git_revision_in_a_fresh_repository(no_outer_repo):
    repo = no_outer_repo / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    # No commits yet: no sha; no files: clean.
    assert workspace.git_revision(repo) == (None, False)
    (repo / "notes.txt").write_text("one\n")
    assert workspace.git_revision(repo) == (None, True)
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "first")
    first = git(repo, "rev-parse", "HEAD")
    assert workspace.git_revision(repo) == (first, False)
    (repo / "notes.txt").write_text("two\n")  # a modified tracked file
    assert workspace.git_revision(repo) == (first, True)
    git(repo, "commit", "-q", "-am", "second")
    second = git(repo, "rev-parse", "HEAD")
    assert second != first and workspace.git_revision(repo) == (second, False)
    (repo / "new.py").write_text("x = 1\n")  # an untracked file also makes it dirty
    assert workspace.git_revision(repo) == (second, True)
    (repo / ".gitignore").write_text("new.py\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore new.py")
    assert workspace.git_revision(repo) == (git(repo, "rev-parse", "HEAD"), False)


def test_git_revision_outside_a_repository(no_outer_repo):
    plain = no_outer_repo / "plain"
    plain.mkdir()
    assert workspace.git_revision(plain) == (None, None)
    assert workspace.git_revision(no_outer_repo / "does-not-exist") == (None, None)


def test_receipt_records_the_git_revision(no_outer_repo):
    repo = no_outer_repo / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "a")
    receipt = workspace.environment_receipt(repo)
    assert receipt["git"] == {"revision": git(repo, "rev-parse", "HEAD"), "dirty": False}
    assert workspace.environment_receipt(no_outer_repo)["git"] == {
        "revision": None,
        "dirty": None,
    }


PYPROJECT = """
[project]
name = "demo"
dependencies = [
    "jax==0.10.2",
    "Orbax_Checkpoint == 0.12.8",
    "pandas",
    "numpy>=2",
    "grain==0.2.18; python_version >= '3.11'",
]

[project.optional-dependencies]
tpu = ["jax[tpu]==0.10.2"]
frameworks = [
    "torch==2.13.0",  # a comment inside the array
    "tensorflow-cpu==2.21.0",
]
dev = ["pytest>=8"]
"""


def test_pinned_versions_of_a_temporary_pyproject(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    base = {"jax": "0.10.2", "orbax-checkpoint": "0.12.8", "grain": "0.2.18"}
    assert workspace.pinned_versions(path, extras=()) == base
    frameworks = {"torch": "2.13.0", "tensorflow-cpu": "2.21.0"}
    assert workspace.pinned_versions(path) == base | frameworks
    assert workspace.pinned_versions(path, extras=("tpu", "dev")) == base
    with pytest.raises(ValueError, match="no optional extra 'gpu'"):
        workspace.pinned_versions(path, extras=("gpu",))


def test_pinned_versions_reject_conflicts_and_non_projects(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[project]\ndependencies = ["jax==0.10.2"]\n'
        '[project.optional-dependencies]\nold = ["jax==0.4.30"]\n'
    )
    with pytest.raises(ValueError, match="pinned to both 0.10.2 and 0.4.30"):
        workspace.pinned_versions(path, extras=("old",))
    path.write_text("[tool.ruff]\nline-length = 100\n")
    with pytest.raises(ValueError, match=r"no \[project\] table"):
        workspace.pinned_versions(path, extras=())


def test_pinned_versions_of_the_lab_match_its_pyproject():
    pins = workspace.pinned_versions()
    assert pins["jax"] == pins["jaxlib"]
    assert pins["torch"] == "2.13.0" and "tensorflow-cpu" in pins and "pandas" not in pins


def fake_receipt(versions: dict, tpu_vm: bool = False) -> dict:
    """A receipt whose packages are {name: (distribution, version)}."""
    receipt = workspace.environment_receipt(include_env=False)
    receipt["packages"] = {
        name: {"distribution": dist, "version": version}
        for name, (dist, version) in versions.items()
    }
    receipt["host"]["tpu_vm"] = tpu_vm
    return workspace.validate(receipt)


PINS = {
    "jax": "0.10.2",
    "Flax": "0.12.8",
    "torch": "2.13.0",
    "tensorflow-cpu": "2.21.0",
    "altair": "6.3.0",
}


def test_package_table_statuses_and_fix_lines():
    receipt = fake_receipt(
        {
            "jax": ("jax", "0.10.2"),
            "flax": ("flax", "0.11.0"),  # mismatch
            "torch": ("torch", "2.13.0+cpu"),  # a local label satisfies the pin
            "tensorflow": (None, None),  # missing, pinned through tensorflow-cpu
            "altair": (None, None),  # missing
            "marimo": ("marimo", "0.25.2"),  # no pin: ok
            "libtpu": (None, None),  # not needed off a TPU VM
        }
    )
    rows = workspace.package_table(receipt, PINS)
    status = {row["package"]: row["status"] for row in rows}
    assert status == {
        "jax": "ok",
        "flax": "mismatch",
        "torch": "ok",
        "tensorflow": "missing",
        "altair": "missing",
        "marimo": "ok",
        "libtpu": "optional",
    }
    by_name = {row["package"]: row for row in rows}
    assert by_name["tensorflow"]["pinned"] == "2.21.0"
    assert by_name["tensorflow"]["distribution"] == "tensorflow-cpu"
    assert by_name["flax"]["pinned"] == "0.12.8" and by_name["marimo"]["pinned"] is None

    lines = workspace.fixes(rows)
    assert len(lines) == 3
    assert lines[0].startswith("flax: mismatch (0.11.0 installed, pinned 0.12.8)")
    assert "pip install 'flax==0.12.8'" in lines[0]
    assert "pip install 'tensorflow-cpu==2.21.0'" in lines[1]
    assert "pip install 'altair==6.3.0'" in lines[2]


def test_torch_and_libtpu_get_their_own_fix():
    receipt = fake_receipt(
        {"torch": ("torch", "2.5.1+cu121"), "libtpu": (None, None), "jax": (None, None)},
        tpu_vm=True,
    )
    rows = workspace.package_table(receipt, PINS)
    assert [row["status"] for row in rows] == ["mismatch", "missing", "missing"]
    torch_fix, libtpu_fix, jax_fix = workspace.fixes(rows)
    assert "pip install torch==2.13.0" in torch_fix and "CUDA" in torch_fix
    assert "'.[tpu]'" in libtpu_fix and "TPU VM" in libtpu_fix
    assert "pip install 'jax==0.10.2'" in jax_fix


def test_missing_package_without_a_pin_reinstalls_the_stack():
    rows = workspace.package_table(fake_receipt({"keras": (None, None)}), {})
    (line,) = workspace.fixes(rows)
    assert rows[0]["pinned"] is None and workspace.REINSTALL_ALL in line


def test_everything_ok_needs_no_fix():
    receipt = fake_receipt({"jax": ("jax", "0.10.2"), "altair": ("altair", "6.3.0")})
    assert workspace.fixes(workspace.package_table(receipt, PINS)) == []


@pytest.mark.parametrize(
    "installed, pinned, expected",
    [
        ("2.13.0+cpu", "2.13.0", True),
        ("2.13.0", "2.13.0", True),
        ("2.13.0", "2.13.0+cpu", False),
        ("2.13.1", "2.13.0", False),
        ("0.10.20", "0.10.2", False),
    ],
)
def test_versions_match(installed, pinned, expected):
    assert workspace.versions_match(installed, pinned) is expected


@pytest.mark.parametrize("cpu_devices", [1, 3])
def test_probe_reports_a_fresh_process(cpu_devices):
    import jax
    import jaxlib

    probe = workspace.probe_fresh_process(cpu_devices)
    reference = fresh_jax(cpu_devices)
    assert (probe["jax_version"], probe["device_count"], probe["python_version"]) == reference
    assert probe["jax_version"] == jax.__version__ and probe["jaxlib_version"] == jaxlib.__version__
    assert probe["backend"] == "cpu"


def test_probe_rejects_zero_devices():
    with pytest.raises(ValueError, match="cpu_devices"):
        workspace.probe_fresh_process(0)


def test_compare_with_probe(receipt):
    probe = {
        "python_version": receipt["python_version"],
        "jax_version": receipt["packages"]["jax"]["version"],
        "jaxlib_version": receipt["packages"]["jaxlib"]["version"],
        "device_count": receipt["jax"]["device_count"],
    }
    rows = workspace.compare_with_probe(receipt, probe)
    assert [row["field"] for row in rows] == [
        "python version",
        "jax version",
        "jaxlib version",
        "device count",
    ]
    assert all(row["match"] for row in rows)
    rows = workspace.compare_with_probe(receipt, probe | {"device_count": 1})
    assert [row["match"] for row in rows] == [True, True, True, False]
    failed = workspace.compare_with_probe(receipt, {"error": "boom"})
    assert not any(row["match"] for row in failed)


def test_the_environment_receipt_schema_is_exported_as_json_schema():
    schema = documents.json_schema(workspace.Receipt)
    assert schema["type"] == "object"
    assert {"schema_version", "packages", "jax", "host", "git"} <= set(schema["required"])
