"""Optimization: linear-algebra helpers, a gradient checker, hand-written optimizers.

The phase "Math & optimization" teaches from here; later lessons' tests use the gradient
checker. Each module's test sits beside it.
"""
