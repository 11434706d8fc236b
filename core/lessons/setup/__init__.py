"""Lesson code of the phase "Setup & first steps" (one module per lesson app)."""
