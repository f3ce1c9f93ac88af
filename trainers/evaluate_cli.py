"""`cory eval CHECKPOINT`: the pioneer alone (no observer, as at inference) on held-out queries.

Prints a short table and JSON (task reward, KL to the reference, combined reward, distinct-1/2, mean length,
samples) and writes the JSON next to the checkpoint (or to `--out`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Sequence

from cory_env import BatchedCORYEnv, EnvConfig
from trainers import checkpoint as ckpt
from trainers.build import build_agents, build_exchange, load_policy_model
from trainers.config import CORYConfig, PPOConfig
from trainers.evaluation import evaluate_pioneer


def configs_from_dict(flat: dict) -> tuple[EnvConfig, PPOConfig, CORYConfig]:
    """Rebuild the three configs from a flat dict (a run's config.yaml or a checkpoint's trainer_state)."""
    out = []
    for cls in (EnvConfig, PPOConfig, CORYConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        out.append(cls(**{k: v for k, v in flat.items() if k in names}))
    return tuple(out)  # type: ignore[return-value]


def format_table(result: dict) -> str:
    keys = ("task_reward", "kl", "combined_reward", "distinct_1", "distinct_2", "response_len", "num_queries")
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {result[k]:.4f}" if isinstance(result[k], float) else f"{k:<{width}}  {result[k]}"
                     for k in keys if k in result)


def run_eval(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cory eval", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="A checkpoint folder (runs/X/checkpoints/iter-000009) or a run directory "
                                           "(its latest checkpoint).")
    parser.add_argument("--model_name", default=None,
                        help="Which trained model answers: llm1, llm2 (default: the one in the pioneer seat).")
    parser.add_argument("--num_batches", type=int, default=4, help="Batches of --batch_size held-out queries.")
    parser.add_argument("--batch_size", type=int, default=8, help="Queries per batch.")
    parser.add_argument("--seed", type=int, default=12345, help="Query and sampling seed (not the training seed).")
    parser.add_argument("--data_path", default=None, help="Query source override (else the run's).")
    parser.add_argument("--eta", type=float, default=None,
                        help="Combined reward coefficient (default: the model's final KL coefficient).")
    parser.add_argument("--out", default=None, help="JSON output path (default: <checkpoint>/eval-<model>.json).")
    args = parser.parse_args(argv)

    path = Path(args.checkpoint)
    if not (path / "trainer_state.json").exists():
        latest = ckpt.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} is neither a checkpoint folder nor a run directory with checkpoints")
        path = latest
    state = ckpt.read_trainer_state(path)
    env_cfg, ppo_cfg, cory_cfg = configs_from_dict(state["config"])
    if args.data_path is not None:
        env_cfg = dataclasses.replace(env_cfg, data_path=args.data_path)
    name = args.model_name or state["exchange"]["seats"]["pioneer"]
    model, tokenizer = load_policy_model(cory_cfg.model, seed=cory_cfg.seed)
    agents, ref = build_agents(model, tokenizer, cory_cfg)
    if name not in agents:
        raise ValueError(f"--model_name {name!r} is not in this checkpoint; choose one of {sorted(agents)}")
    exchange = build_exchange(agents, ref, cory_cfg, ppo_cfg, cory_cfg.learner)
    ckpt.load_bundle(path, exchange.bundles[name], with_learner=False)
    eta = args.eta
    if eta is None:
        learner_json = json.loads((path / name / "learner.json").read_text(encoding="utf-8"))
        eta = float(learner_json["kl_ctl"]["value"])
    env = BatchedCORYEnv(env_cfg, tokenizer, batch_size=args.batch_size, single_agent=True)
    result = evaluate_pioneer(agents[name], ref, env, num_batches=args.num_batches, seed=args.seed, eta=eta)
    result = {"checkpoint": str(path), "model_name": name, "eta": eta, **result}
    out = Path(args.out) if args.out else path / f"eval-{name}.json"
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    print(format_table(result))
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0
