"""Lesson code of the phase "Distributed training"."""
