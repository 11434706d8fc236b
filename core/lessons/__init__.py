"""Lesson-only code: core/lessons/<phase>/<lesson slug>.py, named like its app
apps/<lesson slug>.py, tests beside it. A module that gains a second user is promoted into a
domain package."""
