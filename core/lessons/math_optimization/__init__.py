"""Lesson code of the phase "Math & optimization"."""
