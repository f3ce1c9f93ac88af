"""Tianshou MARL on the CORY token env: one PPO per seat on the tiny-vocabulary task, a few CPU minutes.

    python examples/tianshou_marl.py                       # ~2 CPU minutes: collective reward ~0.4 -> ~1.5+
    python examples/tianshou_marl.py --epochs 1 --episodes 50 --test_episodes 20   # smoke test
    python examples/tianshou_marl.py --task chain_relay    # three seats passing a private query along

Pipeline (`trainers.adapters.tianshou`): `cory_env.env(task=...)` (PettingZoo AEC) → `TianshouObsWrapper` →
`tianshou.env.PettingZooEnv` → `SequentialMultiAgentOnPolicyAlgorithm` (Tianshou's `MultiAgentOnPolicyAlgorithm`
plus the terminal-reward fix of Tianshou issue #399) with one `tianshou.algorithm.PPO` per seat, each an MLP over the
embedded token window, trained by Tianshou's `Collector` and `OnPolicyTrainer`.

The task (see `cory_env.tasks.tiny_vocab`): the query is 4 of 16 symbols; the pioneer names 2 of them, the observer
must name the other 2 (it sees the pioneer's answer). Collective reward: random ≈ 0.42, optimum 2. The script
prints the mean test return (= collective reward) before training and after every epoch.
"""

from __future__ import annotations

import argparse
import json

import torch

from trainers.adapters.tianshou import train_and_evaluate


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="Seed for torch, numpy and the envs.")
    parser.add_argument("--episodes", type=int, default=7500, help="Training budget in episodes (every seat's answer).")
    parser.add_argument("--epochs", type=int, default=10, help="Training epochs (an evaluation after each).")
    parser.add_argument("--episodes_per_update", type=int, default=64, help="Episodes collected per PPO update.")
    parser.add_argument("--repeat", type=int, default=4, help="PPO passes over each collected buffer.")
    parser.add_argument("--batch_size", type=int, default=64, help="PPO mini-batch size (transitions).")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate.")
    parser.add_argument("--num_envs", type=int, default=4, help="Parallel (dummy) training envs.")
    parser.add_argument("--test_episodes", type=int, default=100, help="Episodes per evaluation.")
    parser.add_argument("--task", default="tiny_vocab", help="A toy task: tiny_vocab, relay or chain_relay.")
    parser.add_argument("--seating", default=None, help="Seating spec (cory, chain:N); default the task's.")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = train_and_evaluate(args.seed, args.episodes, args.test_episodes, epochs=args.epochs,
                             episodes_per_update=args.episodes_per_update, repeat=args.repeat,
                             batch_size=args.batch_size, lr=args.lr, num_envs=args.num_envs, task=args.task,
                             seating=args.seating)
    for epoch, (episodes, value) in enumerate(out["curve"]):
        label = "epoch 0 (before training)" if epoch == 0 else f"epoch {epoch}"
        print(f"{label}: mean collective reward {value:.3f} after {episodes} training episodes", flush=True)
    result = {"first": out["before"], "last": out["after"], "returns": [v for _, v in out["curve"]],
              "episodes": out["episodes"]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
