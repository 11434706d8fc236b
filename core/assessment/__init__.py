"""The synthesis assessments of the two learning paths: items, papers, answers, progress.

    python -m core.assessment paper --path learn-tpus --seed 7 --template answers.json
    python -m core.assessment grade --path learn-tpus --answers answers.json

Nothing here imports marimo; apps/assessment_*.py are the interactive papers.
"""

import os
import pathlib

from core import curriculum

# The learner's workspace for progress files; $JAX_TPU_LAB_PROGRESS_DIR moves it (the test
# suite points every app it starts at a temporary folder). Defined here, without importing
# the items, so the grader's CLI can read it before JAX starts.
PROGRESS_DIR_ENV = "JAX_TPU_LAB_PROGRESS_DIR"
WORKSPACE = pathlib.Path(
    os.environ.get(PROGRESS_DIR_ENV) or curriculum.REPO_ROOT / "runs" / "assessments"
)
