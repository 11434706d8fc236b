"""Lesson code of the phase "State, randomness & control flow" (one module per lesson app)."""
