"""The agreement table: its rows pass, and its checker fails a planted wrong kernel."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capstones.pallas_kernel import agreement
from core import numerics
from core.kernels import flash_attention_test

SHAPE, BLOCKS = (1, 2, 16, 8), (8, 8)  # float32 only: 8-row blocks break bfloat16's tile


@pytest.fixture(scope="module")
def case():
    q, k, v, do = agreement.operands(SHAPE, "float32", 3)
    outputs = agreement.kernel_outputs(q, k, v, do, True, BLOCKS, interpret=True)
    return outputs, agreement.references(q, k, v, do, True), v


def test_kernel_row_passes(case):
    outputs, expected, _ = case
    measured = agreement.errors(outputs, expected)
    assert set(measured) == set(agreement.MEASURES)
    verdict = agreement.judge(measured, "float32")
    assert verdict["pass"] and verdict["worst / tolerance"] < 1
    assert verdict["tolerance"] == numerics.tolerance("float32")


def test_a_planted_wrong_kernel_fails(case):
    outputs, expected, v = case
    o, dq, dk, dv = (np.asarray(x) for x in outputs)
    wrong_o = o.copy()
    wrong_o[0, 1, 5] += 1e-3  # one row of one head off by a little
    assert not agreement.judge(agreement.errors((wrong_o, dq, dk, dv), expected), "float32")["pass"]
    swapped = agreement.errors((o, dq, dv, dk), expected)  # dK and dV mixed up
    assert not agreement.judge(swapped, "float32")["pass"]
    assert swapped["O"] <= numerics.tolerance("float32")  # only the wrong measure is flagged
    # and the kernel itself was causal: row 0 sees only key 0, O[0] = V[0]
    assert numerics.scaled_max_error(o[:, :, 0], np.asarray(v)[:, :, 0]) <= 1e-6


def test_table_covers_every_combination(monkeypatch):
    seen = []
    monkeypatch.setattr(agreement, "row", lambda *a: seen.append(a) or {"worst / tolerance": 0.0})
    rows = agreement.table(seed=7)
    combos = {(s, b, d, c) for s, b, d, c, _, _ in seen}
    assert len(rows) == len(combos) == 16
    assert {s for s, *_ in combos} == set(agreement.SHAPES) and len(agreement.SHAPES) >= 2
    assert {b for _, b, *_ in combos} == set(agreement.BLOCKS) and len(agreement.BLOCKS) >= 2
    for shape in agreement.SHAPES:  # every block divides every T, bfloat16 tile kept
        for block in agreement.BLOCKS:
            assert shape[2] % block[0] == 0 and shape[2] % block[1] == 0
            assert block[0] % 16 == 0 and block[1] % 16 == 0


def test_property_tests_read_the_real_profile():
    summary = agreement.property_tests()
    assert summary["ci_examples"] == flash_attention_test.CI.max_examples


def test_benchmark_result_is_read_or_said_absent(tmp_path):
    (tmp_path / "core/kernels").mkdir(parents=True)
    (tmp_path / agreement.PROPERTY_TEST).write_text(
        'x.register_profile(\n    "ci", max_examples=7, deadline=None)\n'
    )
    absent = agreement.property_tests(tmp_path)
    assert absent["ci_examples"] == 7 and absent["benchmark"] is None
    assert "not found" in agreement.property_line(absent)
    (tmp_path / "benchmarks/results").mkdir(parents=True)
    (tmp_path / agreement.PROPERTY_BENCHMARK).write_text(
        json.dumps(
            {
                "machine": {"measured_utc": "2026-01-02T03:04:05Z"},
                "max_examples": 9,
                "failure": None,
                "summary": [
                    {"cases": 4, "worst error / tolerance": 0.5},
                    {"cases": 5, "worst error / tolerance": 0.25},
                ],
            }
        )
    )
    bench = agreement.property_tests(tmp_path)["benchmark"]
    assert bench["cases"] == 9 and bench["worst error / tolerance"] == 0.5
    line = agreement.property_line(agreement.property_tests(tmp_path))
    assert "2026-01-02T03:04:05Z" in line and "9 cases" in line and "no failure" in line


@pytest.mark.parametrize(
    ("shape", "blocks", "dtype", "words"),
    [
        ((1, 1, 48, 16), (32, 16), "float32", "does not divide"),
        ((1, 1, 32, 16), (4, 16), "bfloat16", "not divisible by 8 (sublanes)"),
        ((1, 4, 256, 16), (16, 16), "float32", "program instances"),
    ],
)
def test_problem_refuses_what_cannot_run(shape, blocks, dtype, words):
    assert words in agreement.problem(shape, blocks, dtype)


def test_problem_accepts_the_table():
    for shape in agreement.SHAPES:
        for blocks in agreement.BLOCKS:
            for dtype in agreement.DTYPES:
                assert agreement.problem(shape, blocks, dtype) is None
