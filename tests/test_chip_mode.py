"""The suite's chip mode (tests/tools/chip_mode.py): which tests a TPU chip skips, and why,
decided here on the CPU; on the CPU (CI) nothing is skipped."""

import importlib.util
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "chip_mode", pathlib.Path(__file__).parent / "tools" / "chip_mode.py"
)
chip_mode = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(chip_mode)

EIGHT = pytest.mark.needs_devices(8).mark
BY_PARAMETER = pytest.mark.needs_devices("devices").mark
CPU_COST = pytest.mark.cpu_only("XLA:CPU's cost analysis fields").mark


def test_a_chip_skips_what_needs_more_devices_and_says_why():
    reason = chip_mode.skip_reason([EIGHT], "tpu", 1, "TPU v5 lite")
    assert reason == (
        "needs 8 devices; this backend has 1 (TPU v5 lite); CI runs it on 8 virtual CPU devices"
    )
    assert (
        chip_mode.skip_reason([pytest.mark.needs_devices(1).mark], "tpu", 1, "TPU v5 lite") is None
    )


@pytest.mark.parametrize(("devices", "skipped"), [(1, False), (2, True), (8, True)])
def test_the_count_can_come_from_a_test_parameter(devices, skipped):
    reason = chip_mode.skip_reason([BY_PARAMETER], "tpu", 1, "TPU v5 lite", {"devices": devices})
    assert (reason is not None) == skipped
    if skipped:
        assert reason.startswith(f"needs {devices} devices; this backend has 1")
    with pytest.raises(ValueError, match="names no parameter"):
        chip_mode.skip_reason([BY_PARAMETER], "tpu", 1, "TPU v5 lite", {"count": devices})


def test_a_mesh_shape_counts_its_product_and_several_counts_their_most():
    marks = [pytest.mark.needs_devices("mesh_shape").mark]
    assert "needs 8 devices" in chip_mode.skip_reason(marks, "tpu", 4, "x", {"mesh_shape": (2, 4)})
    assert chip_mode.skip_reason(marks, "tpu", 1, "x", {"mesh_shape": (1,)}) is None
    marks = [pytest.mark.needs_devices("before", "after").mark]
    assert "needs 8 devices" in chip_mode.skip_reason(
        marks, "tpu", 4, "x", {"before": 8, "after": 2}
    )


def test_a_cpu_claim_is_skipped_off_the_cpu_with_its_reason():
    reason = chip_mode.skip_reason([CPU_COST], "tpu", 1, "TPU v5 lite")
    assert reason == "a claim about the CPU backend, not tpu: XLA:CPU's cost analysis fields"


def test_on_the_cpu_nothing_is_skipped():
    marks = [EIGHT, BY_PARAMETER, CPU_COST]
    assert chip_mode.skip_reason(marks, "cpu", 8, "cpu", {"devices": 8}) is None
    assert chip_mode.skip_reason([], "tpu", 1, "TPU v5 lite") is None


@pytest.mark.parametrize(
    ("environ", "backend", "platforms"),
    [
        ({}, "cpu", "cpu"),
        ({chip_mode.ENV: "cpu"}, "cpu", "cpu"),
        ({chip_mode.ENV: "TPU"}, "tpu", "tpu,cpu"),
        ({chip_mode.ENV: "tpu", "JAX_PLATFORMS": "tpu"}, "tpu", "tpu"),  # the caller's wins
    ],
)
def test_platforms_follow_the_mode(environ, backend, platforms):
    environ = dict(environ)
    assert chip_mode.set_platforms(environ) == backend
    assert environ["JAX_PLATFORMS"] == platforms
    assert environ["JAX_NUM_CPU_DEVICES"] == "8"  # the CPU backend's devices, in both modes


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="JAX_TPU_LAB_TEST_BACKEND='gpu': expected one of cpu"):
        chip_mode.backend_asked({chip_mode.ENV: "gpu"})


def test_this_run_is_on_the_cpu_unless_chip_mode_was_asked():
    # CI: the suite runs on the CPU, where the markers change nothing.
    import os

    if chip_mode.backend_asked(os.environ) == "cpu":
        assert os.environ["JAX_PLATFORMS"] == "cpu"
