"""Training state that outlives a process: checkpoints, experiment tracking, the resumable
trainer of the recovery lessons."""
