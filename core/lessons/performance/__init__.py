"""Lesson code of the phase "Performance diagnosis" (one module per lesson app)."""
