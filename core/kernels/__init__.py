"""Pallas kernels, each file beside its reference (jax's pallas/ops/tpu pattern).

Every kernel runs in TPU interpret mode on CPU (races detected, uninitialized memory poisoned)
and lowers unchanged through Mosaic for TPU topologies; its test class runs both ways.
"""
