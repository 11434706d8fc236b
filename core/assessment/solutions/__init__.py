"""Reference solutions of the code exercises, one module per exercise.

The learner sees a module's source only after an attempt (core.assessment.items.CodeItem);
each is tested by the exercise's hidden tests on three learner seeds.
"""
