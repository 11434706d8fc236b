"""lab.Check and lab.guard: the check vocabulary every lesson's check cell uses."""

import marimo as mo
import pytest

from core import lab


def test_one_error_within_its_tolerance_passes_and_prints_headless(monkeypatch, capsys):
    monkeypatch.setattr(lab, "mode", lambda: "script")
    check = lab.Check("f equals numpy float64", 3.1e-7, 1e-5)
    assert check.passed and check.error == 3.1e-7
    assert capsys.readouterr().out == (
        "PASS: f equals numpy float64. max error 3.1e-07 (tolerance 1e-05)\n"
    )
    check.assert_passed()


def test_a_tolerance_with_a_reason_says_it_in_the_line():
    from core import numerics

    tpu = numerics.tolerance("float32", backend="tpu", precision="default")
    check = lab.Check("MLP vs NumPy float64", 4e-3, tpu)
    assert check.passed and check.line() == (
        "PASS: MLP vs NumPy float64. max error 0.004 (tolerance 0.02: float32 on a TPU at "
        "DEFAULT matmul precision (1 bfloat16 pass: 8-bit operands, the bfloat16 tolerance))"
    )
    cpu = numerics.tolerance("float32", backend="cpu")
    highest = numerics.tolerance("float32", backend="tpu", precision="highest")
    both = lab.Check("two", {"a": 1e-6, "b": 5e-5}, {"a": cpu, "b": highest})
    assert both.passed and both.line().endswith("(6 bfloat16 passes))")
    assert (
        lab.Check("cpu", 1e-6, numerics.tolerance("float32", backend="cpu"))
        .line()
        .endswith("(tolerance 1e-05)")
    )


def test_the_worst_error_relative_to_its_bound_is_reported_and_fails():
    check = lab.Check("two outputs", {"loss": 1e-6, "grad": 3e-2}, {"loss": 1e-5, "grad": 2e-2})
    assert not check.passed and check.failed == ["grad"]
    assert (check.error, check.tolerance) == (3e-2, 2e-2)
    assert check.line().startswith("FAIL: two outputs. max error 0.03 (tolerance 0.02)")
    with pytest.raises(AssertionError, match="failed: grad"):
        check.assert_passed()


def test_nan_and_a_false_fact_fail():
    assert not lab.Check("nan", float("nan"), 1.0).passed
    check = lab.Check("shape", 0.0, 1e-5, facts={"shapes match": False})
    assert not check.passed and check.failed == ["shapes match"]
    assert [row["pass"] for row in check.rows()] == ["yes", "no"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        lab.Check("empty", {}, 1e-5)
    with pytest.raises(ValueError, match="do not match"):
        lab.Check("names", {"a": 0.0}, {"b": 1.0})


def test_the_badge_is_a_callout_of_the_verdict():
    assert "success" in lab.Check("ok", 0.0, 1e-5).badge.text
    assert "danger" in lab.Check("bad", 1.0, 1e-5).badge.text


def test_guard_passes_none_and_stops_with_the_reason(monkeypatch, capsys):
    lab.guard(None)
    monkeypatch.setattr(lab, "mode", lambda: "script")
    stopped = []
    monkeypatch.setattr(
        mo, "stop", lambda predicate, output=None: stopped.append((predicate, output))
    )
    lab.guard("heads (3) must divide d_model (64)")
    assert capsys.readouterr().out == "STOPPED: heads (3) must divide d_model (64)\n"
    assert stopped and stopped[0][0] is True and "heads (3)" in stopped[0][1].text


def test_guard_puts_a_headline_before_the_reason_in_the_ui_only(monkeypatch, capsys):
    monkeypatch.setattr(lab, "mode", lambda: "script")
    stopped = []
    markdown = []
    monkeypatch.setattr(mo, "stop", lambda predicate, output=None: stopped.append(output))
    monkeypatch.setattr(mo, "md", lambda text: markdown.append(text) or mo.Html(text))
    lab.guard("in_axes has 2 entries for 3 arguments", headline="`vmap(f)` cannot work.")
    assert capsys.readouterr().out == "STOPPED: in_axes has 2 entries for 3 arguments\n"
    assert markdown == ["**`vmap(f)` cannot work.** in_axes has 2 entries for 3 arguments"]
    assert stopped


@pytest.mark.parametrize("stop", ["guard", "require"])
def test_a_stop_unbinds_the_names_of_the_cell_that_asked(monkeypatch, stop):
    """guard and require both hand the calling cell's globals to the unbinding (marimo issue
    #7293), never core.lab's own: require once passed its own frame through guard."""
    monkeypatch.setattr(lab, "mode", lambda: "edit")
    monkeypatch.setattr(mo, "stop", lambda predicate, output=None: None)
    monkeypatch.setattr(lab.runtime, "host_lacks", lambda *args: "no torch here")
    unbound = []
    monkeypatch.setattr(lab, "_unbind_calling_cell", unbound.append)
    if stop == "guard":
        lab.guard("refused")
    else:
        lab.require("torch", why="the reference")
    assert unbound == [globals()]
