"""Lesson code of the phase "JAX transformations" (one module per lesson app)."""
