"""The training loop and its infrastructure.

| module | what |
|---|---|
| `plan` | `plan_run`: every check and the task and seating of a run, before any model loads (trainer and launcher) |
| `build` | configs → tokenizer, model, agents, reference model, the algorithm, bundles, env |
| `role_exchange` | `RoleExchange`: which bundle (agent + learner) sits in which seat, rotated every T_REx |
| `population` | partner populations: N >= seats models, seated each iteration by a matchmaking scheme (`trainers.matchmaking`) |
| `cory` | `CORYTrainer`: the CORY loop (and the single-agent baselines, chains) |
| `run_dir` | the run directory: checks before a run, config.yaml, what a resume may change |
| `fingerprint` | content fingerprints of a run's inputs, which a resume must match |
| `checkpoint` | atomic checkpoints, resume, `load_agent` for inference |
| `guards` | `UpdateGuard`: no NaN/inf loss, gradient or weight passes an update, whoever wrote the learner |
| `metrics` | metrics.jsonl, samples.jsonl, TensorBoard |
| `progress` | the progress bar on a terminal, progress lines off it |
| `sharding` | `--sharding fsdp`: FSDP2 shards of the models, gathered for generation |
"""
