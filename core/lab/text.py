"""Words a lesson shows the learner: counts with the right singular or plural."""

from __future__ import annotations

import numbers


def plural(count: numbers.Integral, singular: str, plural_form: str | None = None) -> str:
    """``count`` and the noun that agrees with it: "1 chip", "16 chips", "2 batches".

    The plural defaults to ``singular + "s"``; pass ``plural_form`` for any other
    ("batch" -> "batches"). Integers get thousands separators ("1,024 rows").
    """
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise TypeError(f"plural counts whole things: got {count!r} ({type(count).__name__})")
    count = int(count)  # numpy integers too
    noun = singular if count == 1 else (plural_form or singular + "s")
    return f"{count:,} {noun}"
