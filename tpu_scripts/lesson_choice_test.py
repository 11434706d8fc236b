"""--phases: the course map's phase numbers, ranges, packages and all, refused with the list."""

import pytest

from core import curriculum
from tpu_scripts import lesson_choice


def _slugs(*numbers):
    return [lesson.slug for n in numbers for lesson in curriculum.PHASES[n - 1].lessons]


def test_phases_by_number_range_package_and_all():
    assert lesson_choice.resolve_phases("1-2") == _slugs(1, 2)
    assert lesson_choice.resolve_phases("3, setup ,3") == _slugs(3, 1)
    count = len(curriculum.PHASES)
    every = lesson_choice.resolve_phases("all")
    assert every == _slugs(*range(1, count + 1))
    assert every == [lesson.slug for lesson in curriculum.all_lessons()]
    # a whole course split in two calls covers it once
    half = count // 2
    first = lesson_choice.resolve_phases(f"1-{half}")
    second = lesson_choice.resolve_phases(f"{half + 1}-{count}")
    assert first + second == every and not set(first) & set(second)


@pytest.mark.parametrize(
    ("spec", "words"),
    [("0", "not within 1-"), ("3-2", "not within 1-"), ("99", "not within 1-"),
     ("setup,nowhere", "unknown phase(s) 'nowhere'"), (" , ", "--phases is empty")],
)  # fmt: skip
def test_bad_phases_are_refused_with_the_numbered_phases(spec, words):
    with pytest.raises(lesson_choice.UsageError) as refused:
        lesson_choice.resolve_phases(spec)
    assert words in str(refused.value)
    if "empty" not in words:
        assert f"1 {curriculum.PHASES[0].title}" in str(refused.value)


def test_the_course_s_other_apps_are_named_by_slug_and_by_kind():
    """A chip run covers every app the course map names: capstones, assessments and the Keras
    track by kind or by slug, beside the phases' lessons."""
    kinds = lesson_choice.resolve_lessons("capstones, assessments, keras")
    others = set(curriculum.named_app_slugs()) - {curriculum.HOME_APP}
    others -= {lesson.slug for lesson in curriculum.all_lessons()}
    assert set(kinds) == others and len(kinds) == len(others) == 13
    assert lesson_choice.resolve_lessons("keras_saving,jit") == ["keras_saving", "jit"]
    with pytest.raises(lesson_choice.UsageError, match="capstones"):
        lesson_choice.resolve_lessons("capstone")
