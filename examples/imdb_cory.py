"""CORY on IMDB positive-sentiment continuation, through the Python API (no CLI).

    python examples/imdb_cory.py                                   # SmolLM2-135M, built-in openings, a few CPU minutes
    python examples/imdb_cory.py --data_path $CORY_SHARED_DATA/imdb_reviews_1000.csv --num_iterations 20
    python examples/imdb_cory.py --model tiny --num_iterations 2   # seconds: a tiny random model

The pioneer continues a review opening; the observer sees the pioneer's continuation (knowledge transfer) and
writes its own; both are trained with PPO on the collective reward (VADER sentiment of query + response), with a
role exchange every `--role_exchange_period` iterations. Metrics go to `<output_dir>/metrics.jsonl`.
"""

from __future__ import annotations

import argparse

from cory_env import EnvConfig
from trainers import CORYConfig, CORYTrainer, ModelConfig, PPOConfig, RunConfigs


def parse_args(algo: str = "cory") -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model name, path or alias ('tiny' for tests).")
    p.add_argument("--data_path", default=None, help="IMDB CSV/JSONL/Parquet path; default: built-in openings.")
    p.add_argument("--num_iterations", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--role_exchange_period", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output_dir", default=f"runs/example-imdb-{algo}")
    p.add_argument("--torch_threads", type=int, default=2, help="CPU threads for torch (2 on a 2-core machine).")
    return p.parse_args()


def build_configs(args: argparse.Namespace, algo: str) -> tuple[CORYConfig, PPOConfig, EnvConfig, ModelConfig]:
    tiny = args.model == "tiny"
    cory = CORYConfig(
        output_dir=args.output_dir, num_iterations=args.num_iterations, seed=args.seed,
        role_exchange_period=args.role_exchange_period, overwrite=True, torch_threads=args.torch_threads,
    )
    ppo = PPOConfig(batch_size=args.batch_size, mini_batch_size=args.batch_size, ppo_epochs=2,
                    learning_rate=1e-3 if tiny else 2e-4)
    env = EnvConfig(task="imdb", data_path=args.data_path, reward="vader", min_new_tokens=4, max_new_tokens=12,
                    context_len=96, seating=algo)  # the seat line-up: "cory" (two seats) or "ppo" (the pioneer)
    model = ModelConfig(model=args.model, use_lora=not tiny)
    return cory, ppo, env, model


def main(algo: str = "cory") -> None:
    args = parse_args(algo)
    cory, ppo, env, model = build_configs(args, algo)
    with CORYTrainer(RunConfigs(run=cory, update=ppo, env=env, model=model)) as trainer:  # the block's end also ends a data-parallel launch cleanly
        history = trainer.train()
    for row in history:
        print(f"iter {row['iteration']:3d}  pioneer task_reward {row['pioneer/task_reward']:+.3f}  "
              f"kl {row['pioneer/kl']:.3f}  pioneer={'llm1' if row['cory/llm1_seat'] == 0 else 'llm2'}")


if __name__ == "__main__":
    main("cory")
