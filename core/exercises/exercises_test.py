"""The lesson exercises' registry: every lesson that has exercises asks at least two, one of
them code, each with hints; none leaks into the synthesis assessments' papers. (The items'
own grading, references, planted wrong answers and self-checks are held by
core/assessment/items_test.py, which takes every item of core.assessment.paper.ITEMS.)"""

from core import curriculum, exercises
from core.assessment import bank, paper


def test_every_lesson_with_exercises_asks_two_one_of_them_code():
    assert exercises.lessons(), "at least one lesson has exercises"
    for lesson in exercises.lessons():
        items = exercises.lesson_items(lesson)
        assert len(items) >= 2, f"{lesson}: {len(items)} exercise(s)"
        assert any(item.kind == "code" for item in items), f"{lesson}: no code exercise"


def test_exercises_name_their_lesson_and_phase_and_carry_hints():
    lessons = {lesson.slug: lesson for lesson in curriculum.all_lessons()}
    for item in exercises.ITEMS:
        assert item.lesson in lessons, f"{item.id}: no lesson {item.lesson!r}"
        package = curriculum.PHASE_PACKAGES[item.phase]
        assert item.id.startswith(f"{package}.{item.lesson}."), item.id  # bank ids: 2 parts
        assert curriculum.phase_of(item.lesson).title == item.phase, item.id
        assert len(item.hints) >= 2, f"{item.id}: hints in order of strength, at least two"
        assert all(hint.strip() for hint in item.hints), item.id


def test_each_lesson_opens_as_its_own_paper_and_the_assessments_stay_as_they_were():
    for lesson in exercises.lessons():
        sheet = paper.paper(exercises.paper_slug(lesson))
        assert sheet.is_lesson and sheet.app_slug == lesson
        assert sheet.item_ids == tuple(item.id for item in exercises.lesson_items(lesson))
        assert sheet.title.startswith("Exercises: ")
    bank_ids = {item.id for item in bank.ITEMS}
    for assessment in curriculum.ASSESSMENTS:
        chosen = paper.paper(assessment.paper)
        assert not chosen.is_lesson and set(chosen.item_ids) <= bank_ids
