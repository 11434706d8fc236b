"""Lesson code of the phase "Pallas kernels"."""
