import argparse
import html.parser
import math

import jax
import jax.numpy as jnp
import markdown
import numpy as np
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
    args = FLAGS.parse(
        ["--rows", "12", "--dtype", "bfloat16", "--no-causal", "--port", "2718", "x.py"]
    )
    assert (args.rows, args.dtype, args.causal) == (12, "bfloat16", False)


def test_no_prefix_abbreviations():
    # `--row` must not silently set --rows: marimo and pytest own other options.
    assert FLAGS.parse(["--row", "3"]).rows == 6


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--row", "3"], "unrecognized arguments: --row 3 (did you mean --rows?)"),
        (["--dtyp=bfloat16"], "unrecognized arguments: --dtyp=bfloat16 (did you mean --dtype?)"),
        (["--port", "2718"], "unrecognized arguments: --port 2718"),
        (["x.py"], "unrecognized arguments: x.py"),
    ],
)
def test_a_script_refuses_unknown_flags_with_a_suggestion(argv, message, capsys):
    # strict is what a script run gets (`python apps/x.py --sed 5`): a typo must not run the
    # defaults silently. Marimo and pytest own the rest of argv, so they parse leniently.
    with pytest.raises(SystemExit) as exit_info:
        FLAGS.parse(argv, strict=True)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert FLAGS.parse(argv, strict=False).rows == 6


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--rows", "0"], "between 1 and 64"),
        (["--scale", "2"], "between 0.0 and 1.0"),
        (["--dtype", "int8"], "invalid choice"),
    ],
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
    rendered = html.unescape(lab.table([{"a": "x|y", "b": 2}]).text)
    # A pipe inside a cell stays in its cell instead of splitting the row.
    assert "<td>x|y</td>" in rendered and "<th>a</th>" in rendered
    assert rendered.count("<td>") == 2


class _TableCells(html.parser.HTMLParser):
    """The text of every <th> and <td> of rendered HTML, row by row (an independent reader)."""

    def __init__(self):
        super().__init__()
        self.tables, self.rows, self._cell = 0, [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = [tag, ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            self.rows[-1].append(tuple(self._cell))
            self._cell = None


def _cells(rendered: str) -> tuple[int, list[list[tuple[str, str]]]]:
    reader = _TableCells()
    reader.feed(rendered)
    return reader.tables, reader.rows


PIPE_HEADERS = ["max |diff|", "|loss - single device|", "max |Δ logit|", "`a|b` code"]


def test_table_headers_with_pipes_render_as_one_table():
    rows = [dict(zip(PIPE_HEADERS, ["1e-07", "x|y", "3", "`p|q`"], strict=True))]
    source = lab.table_markdown(rows)
    expected = [
        [("th", h.replace("`", "")) for h in PIPE_HEADERS],
        [("td", "1e-07"), ("td", "x|y"), ("td", "3"), ("td", "p|q")],
    ]
    # Two renderers: marimo's (what the learner sees) and python-markdown's own tables.
    for rendered in (lab.table(rows).text, markdown.markdown(source, extensions=["tables"])):
        assert _cells(rendered) == (1, expected), rendered


def test_table_formats_bools_floats_and_ints():
    rows = [
        {
            "ok": True,
            "check": False,
            "loss": 2.718281828459045,
            "err": 3.2e-7,
            "steps": 1200,
            "flops": 123456789.0,
            "np float": np.float32(0.1),
            "np bool": np.bool_(True),
            "jax": jnp.asarray(0.333333),
            "name": "adam",
        },
    ]
    rendered = lab.table(rows, words={"check": ("PASS", "FAIL")}).text
    tables, parsed = _cells(rendered)
    assert tables == 1
    assert [text for _tag, text in parsed[1]] == [
        "yes",
        "FAIL",
        "2.718",
        "3.2e-07",
        "1200",
        "123,456,789",
        "0.1",
        "yes",
        "0.3333",
        "adam",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1.0, "1"),
        (-0.5, "-0.5"),
        (1234.5678, "1235"),
        (12345.6, "12,346"),
        (0.0123456, "0.01235"),
        (0.001, "0.001"),
        (0.00099949, "0.000999"),
        (-2.5e-9, "-2.5e-09"),
        (6.02e23, "6.02e+23"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_format_number(value, text):
    assert lab.format_number(value) == text


def test_table_rejects_words_for_a_missing_column_and_bad_digits():
    with pytest.raises(ValueError, match="does not have: \\['pased'\\]"):
        lab.table([{"passed": True}], words={"pased": ("PASS", "FAIL")})
    with pytest.raises(ValueError, match="digits must be >= 1"):
        lab.format_number(1.5, digits=0)


def test_an_app_whose_tpu_another_process_holds_says_so_under_its_title(monkeypatch):
    """The lab on a TPU VM (issue 37): a second app's kernel runs on the CPU while the first
    holds the chip; its title line names the holder and how to free the chip."""
    from core import curriculum, runtime
    from core.lab import frame

    lesson = "jit"  # a lesson without exercises: its line is the course map's alone
    assert lab.phase_line(lesson) == f"{curriculum.phase_line(lesson)} — {frame.goal(lesson)}"
    busy = runtime.ChipBusy(4242, "python -m marimo run apps/jit.py", "/tmp/libtpu_lockfile")
    monkeypatch.setattr(runtime, "_BUSY", busy)
    line = lab.phase_line(lesson)
    assert line.startswith(curriculum.phase_line(lesson)) and "\n" not in line
    assert "On the CPU" in line and "process 4242" in line and "kill 4242" in line
    track_app = next(s for t in curriculum.TRACKS for s in t.slugs)
    assert "process 4242" in lab.track_line(track_app)
