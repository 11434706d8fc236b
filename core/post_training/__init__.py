"""Post-training of the course's byte LM: SFT, LoRA, reward models, PPO-RLHF, GRPO and DPO.

Every identity (reference model, policy, reward model, data set) carries a content hash.
Each module's test sits beside it.
"""
