"""Lesson code of the phase "Neural network training" (one module per lesson app)."""
