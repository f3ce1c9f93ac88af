"""The training loop and its infrastructure.

| module | what |
|---|---|
| `plan` | `plan_run`: every check, the task and seating of a run, each slot's and seat's settings, the scheme, before any model loads |
| `loading` | models and tokenizers by name (hub id, folder, `.gguf`, alias, the tiny random models) |
| `build` | the agents of one base in one layout, the reference model, frozen snapshots, seeding |
| `cast` | `Cast`: a run's models (agent, reference, tokenizer, config, fingerprint), built once for training, resume and every command |
| `role_exchange` | `RoleExchange`: which bundle (agent + learner) sits in which seat, by a matchmaking scheme (CORY's role exchange by default) |
| `cory` | `CORYTrainer`: the CORY loop (and the single-agent baselines, chains, populations) |
| `run_state` | what a checkpoint records beside the weights, the rescue checkpoint, `--resume` |
| `job` | a `cory train` job: the held-out evaluations before and after, eval.json, what a stopped run kept |
| `evaluate` | a trained run's checkpoint evaluated as its task's spec says (`cory eval`) |
| `outputs` | the one rule for every file a command writes: never a run's own, nor a folder; an existing one only with --overwrite |
| `plots` | PNG curves, a Pareto scatter and a bench's arm means from run directories |
| `run_dir` | the run directory: checks before a run, config.yaml, what a resume may change |
| `fingerprint` | content fingerprints of a run's inputs, which a resume must match |
| `checkpoint` | atomic checkpoints of a format number, resume, `load_agent` for inference |
| `guards` | `UpdateGuard`: no NaN/inf loss, gradient or weight passes an update, whoever wrote the learner |
| `metrics` | an iteration's metrics, metrics.jsonl, samples.jsonl, TensorBoard |
| `progress` | the progress bar on a terminal, progress lines off it |
| `sharding` | `--sharding fsdp`: FSDP2 shards of the models, gathered for generation |
"""
