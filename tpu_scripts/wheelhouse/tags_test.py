"""A wheel's tags against a host: the TPU host's CPython 3.11 on glibc 2.36 x86-64."""

import pytest

from tpu_scripts.wheelhouse import tags

HOST = tags.TPU_HOST


@pytest.mark.parametrize(
    "filename",
    [
        "marimo-0.25.2-py3-none-any.whl",
        "jedi-0.20.1-py2.py3-none-any.whl",
        "pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "tensorstore-0.1.86-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "jsonschema_rs-0.60.3-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "simplejson-4.3.0-cp311-cp311-manylinux1_x86_64.manylinux_2_5_x86_64.whl",
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_36_x86_64.whl",
        "thing-1.0-1build-py3-none-any.whl",
    ],
)
def test_wheels_for_the_tpu_host_are_accepted(filename):
    assert tags.problem(filename, HOST) is None


@pytest.mark.parametrize(
    ("filename", "named"),
    [
        ("pandas-3.1.1-cp312-cp312-manylinux_2_28_x86_64.whl", "Python cp312"),
        ("x-1.0-cp311-cp311-manylinux_2_39_x86_64.whl", "platform manylinux_2_39_x86_64"),
        ("x-1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "platform manylinux_2_28_aarch64"),
        ("x-1.0-cp311-cp311-musllinux_1_2_x86_64.whl", "platform musllinux_1_2_x86_64"),
        ("x-1.0-cp311-cp311-macosx_11_0_arm64.whl", "platform macosx_11_0_arm64"),
        ("x-1.0-cp312-abi3-manylinux_2_17_x86_64.whl", "Python cp312"),
        ("x-1.0-py2-none-any.whl", "Python py2"),
    ],
)
def test_wheels_for_another_python_or_platform_are_refused_by_name(filename, named):
    why = tags.problem(filename, HOST)
    assert why is not None and filename in why and named in why
    assert "CPython 3.11 on x86_64 Linux (glibc 2.36)" in why


def test_a_host_without_glibc_refuses_manylinux():
    host = tags.Target("cp", (3, 11), "x86_64", None)
    assert "manylinux_2_17" in tags.problem("x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", host)
    assert tags.problem("x-1.0-py3-none-any.whl", host) is None


def test_a_file_that_is_not_a_wheel_name_is_an_error():
    with pytest.raises(ValueError, match="not a wheel file name"):
        tags.parse("marimo-0.25.2.tar.gz")


def test_this_host_reads_the_running_interpreter():
    host = tags.this_host()
    assert host.python == tuple(__import__("sys").version_info[:2])
    assert host.implementation == "cp"
