"""The lesson frame: every lesson's goal line, its neighbours and its sources, from the map."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from core import curriculum, lab
from core.curriculum import sources as sources_lib
from core.lab import frame

LESSONS = [lesson.slug for lesson in curriculum.all_lessons()]


def test_every_phase_has_sources_and_every_lesson_source_names_a_lesson():
    assert set(sources_lib.PHASE_SOURCES) == set(curriculum.PHASE_PACKAGES.values())
    assert set(sources_lib.LESSON_SOURCES) <= set(LESSONS)


def test_every_source_is_https_on_a_primary_domain_and_named():
    every = [s for group in sources_lib.PHASE_SOURCES.values() for s in group] + [
        s for group in sources_lib.LESSON_SOURCES.values() for s in group
    ]
    for source in every:
        parsed = urlparse(source.url)
        assert parsed.scheme == "https", source
        assert parsed.hostname in sources_lib.PRIMARY_DOMAINS, source
        assert source.title.strip() and "example" not in parsed.hostname, source


@pytest.mark.parametrize("slug", LESSONS)
def test_each_lesson_ends_with_its_neighbours_and_at_least_two_sources(slug):
    end = frame.lesson_end(slug)
    index = LESSONS.index(slug)
    assert (end.previous.slug if end.previous else None) == (LESSONS[index - 1] if index else None)
    following = LESSONS[index + 1] if index + 1 < len(LESSONS) else None
    assert (end.next.slug if end.next else None) == following
    assert len(end.sources) >= 2 and len({s.url for s in end.sources}) == len(end.sources)
    page = end._mime_()[1]
    for lesson in (end.previous, end.next):
        if lesson is not None:
            assert f'href="/?file={lesson.slug}.py"' in page
    assert all(source.url in page for source in end.sources)
    # the lesson's own sources come before its phase's
    own = sources_lib.LESSON_SOURCES.get(slug, ())
    assert [s.url for s in end.sources[: len(own)]] == [s.url for s in own]


def test_a_capstone_ends_with_its_results_and_its_own_sources():
    """A capstone app closes with lab.lesson_end too: no neighbours (it is no lesson of the
    map), its own reading on primary domains."""
    for slug, reading in sources_lib.APP_SOURCES.items():
        assert slug in {c.slug for c in curriculum.CAPSTONES}
        end = frame.lesson_end(slug)
        assert end.previous is None and end.next is None and end.sources == reading
        assert "Where next" not in end.markdown and "Read next" in end.markdown
        assert all(urlparse(s.url).hostname in sources_lib.PRIMARY_DOMAINS for s in reading)


def test_the_goal_is_the_phase_summary_on_the_title_line():
    for slug in ("workspace", "vmap", "modelops"):
        line = lab.phase_line(slug)
        assert "\n" not in line and curriculum.phase_of(slug).summary in line
    assert curriculum.neighbours(LESSONS[0])[0] is None
    assert curriculum.neighbours(LESSONS[-1])[1] is None
    with pytest.raises(ValueError, match="no lesson 'nope'"):
        curriculum.neighbours("nope")
