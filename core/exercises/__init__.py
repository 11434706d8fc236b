"""The lesson apps' graded exercises: which items each lesson asks, by lesson slug.

An exercise is an item of core.assessment.items (predict, diagnose or code), graded the same
way as the assessments' (seeded numbers, an independent reference, code in a sandbox), but it
lives here, not in the assessment bank: the two synthesis papers take every bank item of their
path's phases, and a lesson's practice must not grow them. One module per phase, like the
bank; each item names its lesson (``Item.lesson``) and carries hints in order of strength.
core.assessment.paper opens a lesson's exercises as the paper ``lesson-<slug>``.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises import (
    data_checkpoints,
    distributed,
    nn_training,
    pallas,
    performance,
    post_training,
    reinforcement_learning,
    transformations,
    transformers,
)

# In course order (a lesson's exercises are listed in the order of its phase's module).
PHASE_MODULES = (
    transformations,
    nn_training,
    data_checkpoints,
    transformers,
    reinforcement_learning,
    post_training,
    performance,
    distributed,
    pallas,
)
ITEMS: tuple[Item, ...] = tuple(item for module in PHASE_MODULES for item in module.ITEMS)
PAPER_PREFIX = "lesson-"


def lesson_items(slug: str) -> tuple[Item, ...]:
    """The exercises of lesson ``slug``, in the order its app asks them (none: ())."""
    return tuple(item for item in ITEMS if item.lesson == slug)


def lessons() -> tuple[str, ...]:
    """Every lesson slug that has exercises, in course order of first appearance."""
    return tuple(dict.fromkeys(item.lesson for item in ITEMS))


def paper_slug(lesson: str) -> str:
    """The paper name of a lesson's exercises: ``lesson-tiny_mlp``."""
    return PAPER_PREFIX + lesson
