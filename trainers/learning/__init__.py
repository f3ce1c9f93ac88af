"""Learning: the maths and the learners that update one model from its seat's `Rollout`.

| module | what |
|---|---|
| `ppo_math` | pure PPO maths (TRL 0.7–0.11 formulas): KL penalties, shaped rewards, GAE, whitening, PPO losses |
| `kl_control` | `AdaptiveKLController`, `FixedKLController` |
| `score_scaling` | `RunningMoments`, score scaling / normalisation / clipping (TRL) |
| `update` | the update loop every learner shares: Adam, mini-batches, accumulation, clipping, data-parallel pooling |
| `ppo` | `PPOLearner` |
| `grpo` | `GRPOLearner` (critic-free, DeepSeekMath §4.1) |
| `learners` | the `Learner` protocol and the registry behind `--learner` |
| `sequential_marl` | Tianshou's multi-agent on-policy algorithm with the sequential-turn credit fix (imports Tianshou) |

Log-probabilities and entropies come from `agents.forward` (through `LLMAgent.evaluate`); the rollout data type and
the data-parallel group from `trainers.loop`.
"""
