"""Reinforcement learning: a functional CartPole, batched rollouts, GAE, PPO.

The whole training pipeline is one pure function of a key (`make_train(config) -> train(key)`),
jitted end to end and vmappable over seeds. Each module's test sits beside it.
"""
