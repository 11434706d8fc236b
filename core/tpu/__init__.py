"""TPU systems without a TPU: the spec table, HBM budgets, and compiling for TPU topologies."""
