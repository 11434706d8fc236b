"""The XLA:CPU YNN-reduce miscompile, pinned: the guarded program is right on every CPU; the
default program's error is reported, and the test says when an upgrade has fixed it."""

from __future__ import annotations

import jax
import pytest

from core import numerics
from core.perf import xla_cpu

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU bug")


def _error(fn) -> float:
    ct, x = xla_cpu.example_inputs()
    return numerics.scaled_max_error(fn(ct, x), xla_cpu.example_reference(ct, x))


def test_the_guarded_program_is_right_and_has_no_ynn_fusion():
    guarded = xla_cpu.jit_without_ynn_fusion(xla_cpu.miscompiled_example)
    assert _error(guarded) < numerics.tolerance("float32")
    text = guarded.lower(*xla_cpu.example_inputs()).compile().as_text()
    assert not xla_cpu.uses_ynn_fusion(text)


def test_the_guard_keeps_other_compiler_options_and_jit_arguments():
    guarded = xla_cpu.jit_without_ynn_fusion(
        lambda ct, x, scale: xla_cpu.miscompiled_example(ct, x) * scale,
        static_argnums=2,
        compiler_options={"xla_cpu_enable_fast_math": False},
    )
    ct, x = xla_cpu.example_inputs(1)
    want = xla_cpu.example_reference(ct, x) * 2
    assert numerics.scaled_max_error(guarded(ct, x, 2), want) < numerics.tolerance("float32")


def test_the_default_program_is_miscompiled_until_jaxlib_fixes_it():
    """Where the default program uses a YNN fusion it is wrong (the bug this module guards);
    once a jaxlib gets it right, this test fails to say the guard may go."""
    plain = jax.jit(xla_cpu.miscompiled_example)
    text = plain.lower(*xla_cpu.example_inputs()).compile().as_text()
    if not xla_cpu.uses_ynn_fusion(text):
        pytest.skip("this CPU's default program has no YNN fusion: nothing to guard here")
    error = _error(plain)
    assert error > 100 * numerics.tolerance("float32"), (
        f"the YNN-fused program is now right (error {error:.2g}): the jaxlib in use has "
        "fixed the miscompile; drop core.perf.xla_cpu's guard and this test"
    )
