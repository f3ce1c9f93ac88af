"""TorchRL MARL on the CORY token env: one PPO (TorchRL's ``ClipPPOLoss`` + ``GAE``) per seat, tiny-vocabulary task.

    python examples/torchrl_marl.py                         # 8000 episodes, ~170 CPU s: collective ~0.43 -> ~1.54
    python examples/torchrl_marl.py --episodes 32 --eval_episodes 8      # smoke test, seconds
    python examples/torchrl_marl.py --task chain_relay      # three seats passing a private query along

Needs the ``baselines`` extra (``pip install -e ".[baselines]"``: stable-baselines3, sb3-contrib, torchrl).
The adapter (`trainers.adapters.torchrl`): ``torchrl.envs.PettingZooWrapper`` over the AEC env (one group per seat)
→ ``Collector`` of whole episodes → `seat_transitions` (each seat's own transitions, its reward on its last action:
the trap of Tianshou issue #399) → per seat ``GAE`` and ``ClipPPOLoss``.

The task (`cory_env.tasks.tiny_vocab`): the query is 4 of 16 symbols; the pioneer names 2 of them, the observer
must name the other 2 (it sees the pioneer's answer). Collective reward: random ≈ 0.42, optimum 2.
"""

from __future__ import annotations

import argparse
import json

import torch

from trainers.adapters.torchrl import train_and_evaluate


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="Seed for torch and the training env.")
    parser.add_argument("--episodes", type=int, default=8000, help="Training budget in episodes.")
    parser.add_argument("--eval_episodes", type=int, default=256, help="Episodes per evaluation point.")
    parser.add_argument("--num_evals", type=int, default=4, help="Evaluation points during training.")
    parser.add_argument("--episodes_per_update", type=int, default=64, help="Whole episodes per PPO update.")
    parser.add_argument("--epochs", type=int, default=4, help="PPO passes over each seat's transitions.")
    parser.add_argument("--minibatch_size", type=int, default=64, help="PPO mini-batch size (transitions).")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (per seat).")
    parser.add_argument("--entropy_coeff", type=float, default=0.01, help="Entropy bonus coefficient.")
    parser.add_argument("--num_envs", type=int, default=16, help="Envs stepped together (TorchRL SerialEnv).")
    parser.add_argument("--task", default="tiny_vocab", help="A toy task: tiny_vocab, relay or chain_relay.")
    parser.add_argument("--seating", default=None, help="Seating spec (cory, chain:N); default the task's.")
    parser.add_argument("--torch_threads", type=int, default=1, help="torch.set_num_threads.")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    result = train_and_evaluate(args.seed, args.episodes, args.eval_episodes, num_evals=args.num_evals,
                                episodes_per_update=args.episodes_per_update, epochs=args.epochs,
                                minibatch_size=args.minibatch_size, lr=args.lr, entropy_coeff=args.entropy_coeff,
                                num_envs=args.num_envs, task=args.task, seating=args.seating)
    for done, reward in result["curve"]:
        print(f"episodes {done}: mean collective reward {reward:.3f}", flush=True)
    print(f"before {result['before']:.3f} -> after {result['after']:.3f} in {result['episodes']} episodes, "
          f"{result['cpu_s']:.1f} CPU s", flush=True)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
