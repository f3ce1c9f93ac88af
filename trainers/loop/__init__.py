"""The training loop and its infrastructure.

| module | what |
|---|---|
| `rollout` | env → `Rollout` (B, T) tensors per seat: `run_episodes` (the one rollout loop), `score_rollout` |
| `role_exchange` | `RoleExchange`: which bundle (agent + learner) sits in which seat, swapped every T_REx |
| `build` | configs → model, agents, reference model, bundles, env |
| `cory` | `CORYTrainer`: the CORY loop (and the single-agent baselines) |
| `run_dir` | the run directory: checks before a run, config.yaml, what a resume may change |
| `checkpoint` | atomic checkpoints, resume, `load_agent` for inference |
| `metrics` | metrics.jsonl, samples.jsonl, TensorBoard |
| `distributed` | `DataParallel`: accelerate process group, gradient averaging, global statistics |
| `inert_options` | options that do nothing in a combination, named at the start of a run |
"""
