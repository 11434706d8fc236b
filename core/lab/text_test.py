import numpy as np
import pytest

from core.lab import text


@pytest.mark.parametrize(
    ("count", "singular", "plural_form", "expected"),
    [
        (1, "chip", None, "1 chip"),
        (16, "chip", None, "16 chips"),
        (0, "run", None, "0 runs"),
        (-1, "step", None, "-1 steps"),
        (1, "batch", "batches", "1 batch"),
        (2, "batch", "batches", "2 batches"),
        (1024, "row", None, "1,024 rows"),
    ],
)
def test_plural_agrees_with_the_count(count, singular, plural_form, expected):
    assert text.plural(count, singular, plural_form) == expected


def test_plural_accepts_numpy_integers():
    assert text.plural(np.int64(3), "head") == "3 heads"
    assert text.plural(np.int32(1), "head") == "1 head"


@pytest.mark.parametrize("count", [1.0, 2.5, True, "3", np.float32(2.0)])
def test_plural_refuses_what_is_not_a_whole_count(count):
    with pytest.raises(TypeError, match="whole things"):
        text.plural(count, "chip")
