"""The course map: 19 phases, 91 lessons, two capstones, each lesson tied to its app.

course.py holds the map itself (phases, lessons, capstones, tracks, learning paths, assessments);
queries.py what is asked of it (a lesson's phase, its title lines, an app's status: "present"
when ``apps/<slug>.py`` exists, "missing" otherwise); tpu_record.py each app's entry in the
newest committed TPU course record; views.py the map as text and apps/README.md.
``from core import curriculum`` reaches all of it:

    python -m core.curriculum             # the map with each lesson's status
    python -m core.curriculum --json      # machine-readable map
    python -m core.curriculum --summary   # counts per phase
    python -m core.curriculum --write-readme   # regenerate apps/README.md from the map
"""

from core.curriculum import tpu_record  # noqa: F401 (each lesson's TPU course record entry)
from core.curriculum.course import (  # noqa: F401 (the package's public surface)
    APPS_DIR,
    APPS_README,
    ASSESSMENT_PREFIX,
    ASSESSMENTS,
    CAPSTONE_PREFIX,
    CAPSTONES,
    HOME_APP,
    LEARNING_PATHS,
    PHASE_PACKAGES,
    PHASES,
    PORTFOLIO_DIR,
    REPO_ROOT,
    TPU_ADDS_NOTHING,
    TRACK_PREFIXES,
    TRACKS,
    Assessment,
    Capstone,
    LearningPath,
    Lesson,
    Phase,
    Track,
)
from core.curriculum.queries import (  # noqa: F401
    all_lessons,
    app_path,
    assessment_for,
    lesson_module,
    named_app_slugs,
    neighbours,
    phase_line,
    phase_number,
    phase_of,
    portfolio_guide,
    status,
    track_line,
    track_of,
    track_twins,
    unnamed_apps,
)
from core.curriculum.views import (  # noqa: F401
    apps_readme,
    course_map,
    format_map,
    format_summary,
    summary_rows,
)
