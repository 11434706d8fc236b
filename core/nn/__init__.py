"""Neural networks and their training: MLPs, Flax NNX models, train/eval steps."""
