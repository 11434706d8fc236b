"""Lesson code of the phase "Reinforcement learning" (shared RL code lives in core.rl)."""
