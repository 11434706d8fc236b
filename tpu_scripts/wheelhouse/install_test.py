"""Installing wheelhouse parts on a host: tiny real wheels, pip without any index but the
parts (and a local PEP 503 folder standing for the host's own index); nothing downloaded."""

import pathlib
import subprocess
import sys

import pytest

from tpu_scripts.wheelhouse import fake_wheels, install, manifest, tags

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _two_parts(tmp_path):
    src = tmp_path / "src"
    wheels = {
        "alpha": fake_wheels.make_wheel(
            src, "alpha", files={"ns/alpha.py": "A = 1\n"}, padding=6000
        ),  # fmt: skip
        "beta": fake_wheels.make_wheel(
            src, "beta", files={"ns/beta.py": "B = 2\n"}, padding=6000
        ),  # fmt: skip
    }
    return fake_wheels.wheelhouse(tmp_path / "wh", wheels)


def _install(dirs, site, **kwargs):
    lines = []
    done = install.install(dirs, site, host=tags.TPU_HOST, out=lines.append, **kwargs)
    return done, "\n".join(lines)


def test_parts_installed_call_after_call_keep_a_shared_namespace_folder(tmp_path):
    parts = _two_parts(tmp_path)
    assert len(parts) == 2  # 6 kB each, 10 kB a part
    site = tmp_path / "site"
    assert _install([parts[0]], site)[0] == [1]
    done, said = _install([parts[1]], site)
    assert done == [2] and "all 2 part(s)" in said
    assert "export PYTHONPATH=$PYTHONPATH:" in said
    # pip's own --target would have replaced ns/ with the second part's
    check = "import ns.alpha, ns.beta; print(ns.alpha.A + ns.beta.B)"
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         env={"PYTHONPATH": str(site)})  # fmt: skip
    assert ran.stdout.strip() == "3", ran.stderr
    assert sorted(install.installed_in(site)) == ["alpha", "beta"]
    # the same command again installs nothing
    done, said = _install([tmp_path / "wh"], site)
    assert done == [] and said.count("already installed") == 2


def test_a_wheel_changed_in_transit_is_refused_before_anything_installs(tmp_path):
    parts = _two_parts(tmp_path)
    wheel = next(parts[1].glob("*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 1
    wheel.write_bytes(bytes(data))
    site = tmp_path / "site"
    with pytest.raises(
        install.Refused, match=rf"(?s)differ from their manifest.*{wheel.name}.*sha256"
    ):
        _install(parts, site)
    assert not site.exists() or install.installed_in(site) == {}


def test_a_wheel_for_another_python_is_refused_by_name(tmp_path):
    src = tmp_path / "src"
    tag = "cp312-cp312-manylinux_2_17_x86_64"
    wheels = {"gamma": fake_wheels.make_wheel(src, "gamma", tag=tag),
              "alpha": fake_wheels.make_wheel(src, "alpha")}  # fmt: skip
    parts = fake_wheels.wheelhouse(tmp_path / "wh", wheels)
    with pytest.raises(install.Refused) as refused:
        _install(parts, tmp_path / "site")
    message = str(refused.value)
    assert "another Python or platform" in message and "nothing was installed" in message
    assert f"gamma-1.0-{tag}.whl is built for Python cp312" in message
    assert not (tmp_path / "site").exists()
    # and a glibc newer than the host's
    host = tags.Target("cp", (3, 12), "x86_64", (2, 17))
    wheels = {
        "delta": fake_wheels.make_wheel(src, "delta", tag="cp312-cp312-manylinux_2_28_x86_64")
    }
    parts = fake_wheels.wheelhouse(tmp_path / "wh2", wheels)
    with pytest.raises(install.Refused, match="platform manylinux_2_28_x86_64.*glibc 2.17"):
        install.install(parts, tmp_path / "site", host=host, out=lambda _: None)


def test_parts_of_two_builds_are_refused(tmp_path):
    one = fake_wheels.wheelhouse(
        tmp_path / "a", {"alpha": fake_wheels.make_wheel(tmp_path / "s", "alpha")}
    )
    two = fake_wheels.wheelhouse(
        tmp_path / "b", {"beta": fake_wheels.make_wheel(tmp_path / "s", "beta")}
    )
    with pytest.raises(install.Refused, match="2 different wheelhouse builds"):
        _install([one[0], two[0]], tmp_path / "site")


def test_a_newer_build_replaces_the_old_version_and_its_files(tmp_path):
    site = tmp_path / "site"
    old = fake_wheels.make_wheel(tmp_path / "s1", "alpha", "1.0",
                                 files={"alpha.py": "V = 1\n", "alpha_old.py": ""})  # fmt: skip
    _install(fake_wheels.wheelhouse(tmp_path / "a", {"alpha": old}), site)
    new = fake_wheels.make_wheel(tmp_path / "s2", "alpha", "2.0", files={"alpha.py": "V = 2\n"})
    _install(fake_wheels.wheelhouse(tmp_path / "b", {"alpha": new}), site)
    assert [p.name for p in site.glob("*.dist-info")] == ["alpha-2.0.dist-info"]
    assert (site / "alpha.py").read_text() == "V = 2\n"
    assert not (site / "alpha_old.py").exists()


def _index(root, wheel):
    """A PEP 503 folder holding ``wheel``, as the host's /opt/pypi is laid out."""
    files = root / "files"
    files.mkdir(parents=True)
    target = files / wheel.name
    target.write_bytes(wheel.read_bytes())
    page = root / "simple" / "hosted"
    page.mkdir(parents=True)
    link = f"../../files/{wheel.name}#sha256={fake_wheels.sha256(wheel)}"
    page.joinpath("index.html").write_text(f'<html><body><a href="{link}">x</a></body></html>')
    return f"file://{root / 'simple'}"


def test_pins_the_host_index_holds_install_from_it(tmp_path):
    hosted = fake_wheels.make_wheel(tmp_path / "elsewhere", "hosted")
    index = _index(tmp_path / "pypi", hosted)
    carried = fake_wheels.make_wheel(tmp_path / "s", "alpha")
    parts = fake_wheels.wheelhouse(tmp_path / "wh", {"alpha": carried}, {"hosted": hosted}, index)
    doc = manifest.read(parts[0])
    assert [p["name"] for p in doc["from_host_index"]] == ["hosted"]
    assert not list(parts[0].glob("hosted*"))  # not carried
    site = tmp_path / "site"
    _install(parts, site)
    assert sorted(install.installed_in(site)) == ["alpha", "hosted"]
    # where the host's index is not there, refused with the way out
    with pytest.raises(install.Refused, match="is not on this machine: pass --host-index"):
        _install(parts, tmp_path / "site2", host_index="file:///nonexistent/simple")


STDLIB_ONLY = """
import runpy, sys
class StandardLibraryOnly:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top == "tpu_scripts":
            return None
        raise ModuleNotFoundError(f"{name} is not the standard library")
sys.meta_path.insert(0, StandardLibraryOnly())
sys.argv = ["tpu_scripts", *sys.argv[1:]]
runpy.run_module("tpu_scripts", run_name="__main__", alter_sys=True)
"""


def _stdlib_only(*argv):
    return subprocess.run([sys.executable, "-c", STDLIB_ONLY, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_install_and_inventory_run_with_the_standard_library_alone(tmp_path):
    parts = _two_parts(tmp_path)
    ran = _stdlib_only("wheelhouse", "install", str(tmp_path / "wh"), "--target",
                       str(tmp_path / "site"))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "all 2 part(s)" in ran.stdout and len(parts) == 2
    ran = _stdlib_only("wheelhouse", "inventory", "-o", str(tmp_path / "host.json"))
    assert ran.returncode == 0, ran.stderr
    # the guard bites: the other commands need more than the standard library
    ran = _stdlib_only("course-run", "--help")
    assert ran.returncode != 0 and "is not the standard library" in ran.stderr
