"""Learning: the maths and the learners that update the models from the seats' `Rollout`s.

| module | what |
|---|---|
| `configs` | `UpdateConfig` (the update every learner shares), `PPOConfig` (+ PPO's value head, GAE, scores), `GRPOConfig` (+ groups) |
| `experience` | `Rollout` (one seat's experience, (B, T) tensors), `score_rollout`, `pad_sequences` |
| `ppo_math` | pure PPO maths (TRL 0.7–0.11 formulas): KL penalties, shaped rewards, GAE, whitening, PPO losses |
| `kl_control` | `AdaptiveKLController`, `FixedKLController` |
| `score_scaling` | `RunningMoments`, score scaling / normalisation / clipping (TRL) |
| `update` | the update loop every learner shares: Adam, mini-batches, accumulation, clipping, data-parallel pooling |
| `ppo` | `PPOLearner` and its `SPEC` |
| `grpo` | `GRPOLearner` (critic-free, DeepSeekMath §4.1) and its `SPEC` |
| `joint` | `JointBatch`, the `JointLearner` protocol, `IndependentLearners` (per-seat learners = IPPO) |
| `mappo` | `MAPPO`: PPO with a centralized critic on the joint transcript, and its `SPEC` |
| `magrpo` | `MAGRPO`: the joint reward's group-relative advantage shared by every seat, and its `SPEC` |
| `registry` | the `Learner` protocol, `LearnerSpec` and `LEARNERS`, the registry behind `--learner` |

Log-probabilities and entropies come from `agents.forward` (through `LLMAgent.evaluate`); the data-parallel group
from `trainers.distributed`. Nothing here imports the loop, the CLI, the evaluation or `trainers.config`.
"""
