"""Lesson code of the phase "Post-training: SFT, LoRA, reward models and RLHF" (one module per
lesson app). The shared pieces (task, model functions, losses, LoRA, preferences, PPO/GRPO)
live in core.post_training."""
