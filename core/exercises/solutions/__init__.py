"""Reference solutions of the lesson exercises' code items (core/exercises), one module each:
what a learner sees behind "show solution", and what the hidden tests must pass."""
