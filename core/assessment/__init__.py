"""The synthesis assessments of the two learning paths: items, papers, answers, progress.

    python -m core.assessment paper --path learn-tpus --seed 7 --template answers.json
    python -m core.assessment grade --path learn-tpus --answers answers.json

Nothing here imports marimo; apps/assessment_*.py are the interactive papers.
"""
