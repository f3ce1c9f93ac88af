"""MARL trainer layer for CORY: PPO maths, KL control, PPO learner, CORY trainer, role exchange."""
