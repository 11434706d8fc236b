"""The frame every lesson shares, built from the course map rather than typed per app: the
phase's goal under the title (``goal``), and at the lesson's end its TPU results, the lessons
before and after it as links, and the primary sources to read next (``lesson_end``).

A served gallery opens a lesson at ``/?file=<slug>.py``: the links use that form.
"""

from __future__ import annotations

import dataclasses

from core import curriculum
from core.curriculum import sources as sources_lib


def goal(slug: str) -> str:
    """One line: what the lesson's phase makes a learner able to do, in the map's words."""
    return f"**This phase:** {curriculum.phase_of(slug).summary}"


@dataclasses.dataclass(frozen=True)
class LessonEnd:
    """What closes a lesson (marimo renders ``_mime_``; a headless run draws nothing)."""

    slug: str
    results: object  # comparison.ComparisonSection: the lesson's TPU results or how to get them
    previous: curriculum.Lesson | None
    next: curriculum.Lesson | None
    sources: tuple[sources_lib.Source, ...]

    @property
    def markdown(self) -> str:
        steps = []
        if self.previous:
            steps.append(f"← previous: [{self.previous.title}](/?file={self.previous.slug}.py)")
        if self.next:
            steps.append(f"next: [{self.next.title}](/?file={self.next.slug}.py) →")
        reading = "\n".join(f"- {source.markdown()}" for source in self.sources)
        text = self.results.markdown
        if steps:
            text += f"\n### Where next\n\n{' · '.join(steps)}\n"
        if reading:
            text += f"\n### Read next\n\n{reading}\n"
        return text

    def _mime_(self) -> tuple[str, str]:
        """Rendered as marimo markdown, styled like the lesson's own text (headings, links,
        the results' table)."""
        import marimo as mo

        return mo.md(self.markdown)._mime_()


def lesson_end(slug: str) -> LessonEnd:
    """App ``slug``'s closing section: its TPU results beside the CPU's (or how to make
    them), then for a lesson the previous and next lessons of the course map and its sources;
    for another app (a capstone) its own sources (sources_lib.APP_SOURCES)."""
    from core.lab import comparison

    if slug in {lesson.slug for lesson in curriculum.all_lessons()}:
        previous, following = curriculum.neighbours(slug)
        package = curriculum.PHASE_PACKAGES[curriculum.phase_of(slug).title]
        reading = sources_lib.sources_for(slug, package)
    else:
        previous = following = None
        reading = sources_lib.APP_SOURCES.get(slug, ())
    return LessonEnd(slug, comparison.comparison_section(slug), previous, following, reading)
