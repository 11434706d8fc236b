"""Where a lesson makes a claim about training dynamics, and how to read its controls.

A lesson may claim something only for its defaults ("at the default settings the run
diverges and every fix trains"). Its test cell then has to ask whether the controls *now*
hold the defaults: in a served app the learner moves the sliders while the parsed
command-line arguments stay what they were, so comparing ``vars(ARGS)`` with the defaults
would assert the claim on settings it was never made for. ``at_defaults`` compares the
current control values instead.

The claims themselves, and the multi-seed tests that prove their margins, live with the
code they are about (``core.lessons.nn_training.debug_unstable``, ``core.nn.mlp``,
``core.nn.training``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core import lab


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return value == default
    if isinstance(default, (int, float)):
        try:
            number = float(value)  # a dropdown of numbers hands back strings
        except (TypeError, ValueError):
            return False
        return math.isclose(number, float(default), rel_tol=1e-9, abs_tol=1e-12)
    return str(value) == str(default)


# Flags that name a file to grade (the exercises' answers sheet), not the lesson's
# computation: no control mirrors them and a claim about the defaults does not look at them.
GRADING_FLAGS = frozenset({"answers"})


def at_defaults(flags: lab.Flags, values: Mapping[str, Any]) -> bool:
    """True when every control of ``flags`` holds its default (GRADING_FLAGS aside).

    ``values`` maps every flag name to the control's current value (``control.value``);
    a slider may hand back 0.30000000000000004 for 0.3 and a dropdown "32" for 32, and both
    count as the default. A missing or unknown name raises ValueError: a claim made for the
    defaults must look at every control.
    """
    missing = sorted(set(flags.flags) - set(values) - GRADING_FLAGS)
    unknown = sorted(set(values) - set(flags.flags))
    if missing or unknown:
        raise ValueError(
            f"at_defaults needs exactly the flags' names: missing {missing}, unknown {unknown}"
        )
    return all(
        _same(values[name], flag.default) for name, flag in flags.flags.items() if name in values
    )
