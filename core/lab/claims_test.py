import pytest

from core import lab
from core.lab import claims

FLAGS = lab.Flags(
    lab.Flag("learning_rate", 0.3, "lr", lo=0.01, hi=2.0, step=0.01),
    lab.Flag("steps", 150, "steps", lo=20, hi=500, step=10),
    lab.Flag("batch_size", 32, "batch", choices=(8, 16, 32)),
    lab.Flag("dataset", "blobs", "data", choices=("moons", "blobs")),
    lab.Flag("shuffle", True, "shuffle"),
)
DEFAULTS = {
    "learning_rate": 0.3,
    "steps": 150,
    "batch_size": 32,
    "dataset": "blobs",
    "shuffle": True,
}


def test_defaults_as_controls_hand_them_back():
    assert claims.at_defaults(FLAGS, DEFAULTS)
    # a slider's float arithmetic and a dropdown's strings still count as the default
    assert claims.at_defaults(FLAGS, {**DEFAULTS, "learning_rate": 0.1 * 3, "batch_size": "32"})


@pytest.mark.parametrize(
    "name, value",
    [
        ("learning_rate", 0.31),
        ("steps", 160),
        ("batch_size", "16"),
        ("dataset", "moons"),
        ("shuffle", False),
        ("batch_size", "not a number"),
    ],
)
def test_any_moved_control_is_not_the_defaults(name, value):
    assert not claims.at_defaults(FLAGS, {**DEFAULTS, name: value})


def test_every_control_must_be_named():
    with pytest.raises(ValueError, match=r"missing \['steps'\]"):
        claims.at_defaults(FLAGS, {k: v for k, v in DEFAULTS.items() if k != "steps"})
    with pytest.raises(ValueError, match=r"unknown \['seed'\]"):
        claims.at_defaults(FLAGS, {**DEFAULTS, "seed": 0})
