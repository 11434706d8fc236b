"""What the lessons of the phase "Pallas kernels" share: its title, a float64 view of a
learner's result, and which output blocks of a blocked result are wrong (the feedback a
kernel's author needs: a wrong index map shows as whole wrong blocks)."""

from __future__ import annotations

import numpy as np

PHASE = "Pallas kernels"


def as_float64(value, name: str) -> tuple[np.ndarray | None, str]:
    """(array, "") or (None, why it is not a numeric array)."""
    try:
        array = np.asarray(value, np.float64)
    except (TypeError, ValueError) as error:
        return None, f"{name} is not a numeric array ({type(value).__name__}: {error})"
    return array, ""


def wrong_blocks(wrong: np.ndarray, block: tuple[int, int], shown: int = 6) -> str:
    """ "; wrong output blocks (r, c): [...]" for a boolean mask of wrong elements, "" if none."""
    rows, cols = np.nonzero(wrong)
    found = sorted(
        {(int(r) // block[0], int(c) // block[1]) for r, c in zip(rows, cols, strict=True)}
    )
    if not found:
        return ""
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return f"; wrong output blocks (r, c) of {block}: {found[:shown]}{more}"
