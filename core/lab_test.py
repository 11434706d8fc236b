import argparse

import jax
import pytest

from core import lab

FLAGS = lab.Flags(
    lab.Flag("rows", 6, "rows", lo=1, hi=64),
    lab.Flag("scale", 0.5, "scale", lo=0.0, hi=1.0, step=0.05),
    lab.Flag("dtype", "float32", "dtype", choices=("float32", "bfloat16")),
    lab.Flag("causal", True, "causal mask"),
)


def test_defaults_without_arguments():
    args = FLAGS.parse([])
    assert (args.rows, args.scale, args.dtype, args.causal) == (6, 0.5, "float32", True)


def test_flags_parse_and_ignore_foreign_arguments():
    args = FLAGS.parse(["--rows", "12", "--dtype", "bfloat16", "--no-causal", "--port", "2718", "x.py"])
    assert (args.rows, args.dtype, args.causal) == (12, "bfloat16", False)


def test_no_prefix_abbreviations():
    # `--row` must not silently set --rows: marimo and pytest own other options.
    assert FLAGS.parse(["--row", "3"]).rows == 6


@pytest.mark.parametrize(
    ("argv", "reason"),
    [(["--rows", "0"], "between 1 and 64"), (["--scale", "2"], "between 0.0 and 1.0"), (["--dtype", "int8"], "invalid choice")],
)
def test_out_of_bounds_exits_2_with_the_reason(argv, reason, capsys):
    with pytest.raises(SystemExit) as exit_info:
        FLAGS.parse(argv)
    assert exit_info.value.code == 2
    assert reason in capsys.readouterr().err


def test_bad_flag_specs_are_rejected():
    with pytest.raises(ValueError, match="lo and hi"):
        lab.Flag("n", 3, "n")
    with pytest.raises(ValueError, match="outside"):
        lab.Flag("n", 99, "n", lo=0, hi=10)
    with pytest.raises(ValueError, match="not in"):
        lab.Flag("d", "f64", "d", choices=("f32",))


def test_controls_follow_the_spec():
    args = argparse.Namespace(rows=9, scale=0.25, dtype="bfloat16", causal=False)
    rows = FLAGS.control("rows", args)
    assert (rows.start, rows.stop, rows.value) == (1, 64, 9)
    assert FLAGS.control("scale", args).value == 0.25
    assert FLAGS.control("dtype", args).value == "bfloat16"
    assert FLAGS.control("causal", args).value is False


def test_use_cpu_devices_leaves_a_started_backend_alone():
    jax.devices()  # the backend is running: the count is fixed
    before = jax.device_count()
    assert lab.use_cpu_devices(3) == 3
    assert jax.device_count() == before
    with pytest.raises(ValueError):
        lab.use_cpu_devices(0)


def test_child_env_drops_pytest_markers(monkeypatch):
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "x")
    env = lab.child_env(EXTRA="1")
    assert "PYTEST_CURRENT_TEST" not in env and env["EXTRA"] == "1"


def test_table_escapes_pipes():
    html = lab.table([{"a": "x|y", "b": 2}]).text
    # A pipe inside a cell stays in its cell instead of splitting the row.
    assert "<td>x|y</td>" in html and "<th>a</th>" in html and html.count("<td>") == 2
