"""PyTorch/XLA and TensorFlow training scripts for TPU VMs, each run in its own environment."""
