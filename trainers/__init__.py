"""MARL trainer layer for CORY (the map: docs/architecture.md), in parts a newcomer can read in this order:

| part | what |
|---|---|
| `trainers.config` | the flat option namespace: the run's configs as a tree (`RunConfigs`: `CORYConfig`, `ModelConfig`, `EnvConfig`, `PPOConfig`, `SamplingConfig`, the task's, the learner's and the scheme's options) and the flat dict that joins them, who owns each name, the command line, YAML and presets, and the options a run does not read |
| `trainers.learning` | PPO maths, KL control, score scaling, the shared update loop, the `Rollout`, the learners and their registry |
| `trainers.rollout` | the one rollout loop: env → one `Rollout` per seat (training and evaluation) |
| `trainers.loop` | checks and builds a run (`plan_run`), its cast of models (`build_cast`), the role-exchange wrapper, `CORYTrainer`, run directory, checkpoints, metrics |
| `trainers.distributed` | the data-parallel process group (`DataParallel`) the learners and the loop share |
| `trainers.heap` | the process's heap kept for reuse (glibc `mallopt`), so an iteration's large tensors do not fault pages in afresh |
| `trainers.evaluation` | one `Evaluator` for the held-out evaluations (the pioneer alone, every seat, influence), a checkpoint's evaluation, cross-play, pass@k, statistics over seeds |
| `trainers.matchmaking` | matchmaking schemes (a plug-in registry) and their options: which of a population's models sits in which seat each iteration |
| `trainers.export` | one trained model of a checkpoint as a `from_pretrained` folder, with its model card |
| `trainers.adapters` | other RL libraries (Tianshou, Stable-Baselines3, TorchRL) on the env |
| `trainers.cli` | the `cory` command: each command parses, calls the library and prints (train, launch, eval, export, crossplay, plot, bench) |

Names are imported lazily so `import trainers.learning.ppo_math` stays light (torch only).
"""

from __future__ import annotations

from cory_env.lazy import lazy_exports

_EXPORTS = {
    "CORYConfig": "trainers.config", "ModelConfig": "trainers.config", "PPOConfig": "trainers.config",
    "GRPOConfig": "trainers.config", "RunConfigs": "trainers.config",
    "CORYTrainer": "trainers.loop.cory", "Bundle": "trainers.loop.role_exchange",
    "RoleExchange": "trainers.loop.role_exchange", "Rollout": "trainers.learning.experience",
    "Learner": "trainers.learning.registry", "make_learner": "trainers.learning.registry",
    "register_learner": "trainers.learning.registry", "LearnerSpec": "trainers.learning.registry",
    "make_joint_learner": "trainers.learning.registry", "JointBatch": "trainers.learning.joint",
    "JointLearner": "trainers.learning.joint", "IndependentLearners": "trainers.learning.joint",
    "FrozenLearner": "trainers.learning.joint", "Evaluator": "trainers.evaluation.evaluator",
    "Cast": "trainers.loop.cast", "build_cast": "trainers.loop.cast",
    "MAPPO": "trainers.learning.mappo", "MAGRPO": "trainers.learning.magrpo",
    "PPOLearner": "trainers.learning.ppo", "GRPOLearner": "trainers.learning.grpo",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports("trainers", _EXPORTS)
