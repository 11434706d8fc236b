"""Lesson code of the phase "Arrays & pure functions" (one module per lesson app)."""
