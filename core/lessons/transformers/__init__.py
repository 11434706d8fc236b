"""Lesson code of the phase "Transformers & language models"."""
