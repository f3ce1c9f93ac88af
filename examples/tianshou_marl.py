"""Tianshou MARL on the CORY token env: one PPO per seat on the tiny-vocabulary task, a few CPU minutes.

    python examples/tianshou_marl.py                       # ~2 CPU minutes: collective reward ~0.4 -> ~1.5+
    python examples/tianshou_marl.py --epochs 1 --episodes 50 --test_episodes 20   # smoke test

Pipeline: `cory_env.env(task="tiny_vocab")` (PettingZoo AEC) → `cory_env.wrappers.TianshouObsWrapper` →
`tianshou.env.PettingZooEnv` → `trainers.learning.sequential_marl.SequentialMultiAgentOnPolicyAlgorithm` (Tianshou's
`MultiAgentOnPolicyAlgorithm` plus the terminal-reward fix of Tianshou issue #399) with one `tianshou.algorithm.PPO` per seat, each an MLP over
the embedded token window, trained by Tianshou's `Collector` and `OnPolicyTrainer`.

The task (see `cory_env.tasks.tiny_vocab`): the query is 4 of 16 symbols; the pioneer names 2 of them, the observer
must name the other 2 (it sees the pioneer's answer). Collective reward: random ≈ 0.42, optimum 2. The script
prints the mean test return (= collective reward) before training and after every epoch.
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import torch
from tianshou.algorithm import PPO
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, VectorReplayBuffer
from tianshou.env import DummyVectorEnv, PettingZooEnv
from tianshou.trainer import OnPolicyTrainerParams

from cory_env.tasks.tiny_vocab import CONTEXT_LEN, tiny_vocab_tokenizer
from cory_env.token_env import env as cory_aec_env
from cory_env.wrappers import TianshouObsWrapper
from trainers.learning.sequential_marl import SequentialMultiAgentOnPolicyAlgorithm


class TokenMLP(torch.nn.Module):
    """Embed the (L,) token window (id V = padding), flatten, MLP → `out` features; masks logits if `masked`."""

    def __init__(self, vocab_size: int, context_len: int, out: int, *, hidden: int = 64, masked: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size + 1, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16 * context_len, hidden),
                                       torch.nn.Tanh(), torch.nn.Linear(hidden, out))
        self.masked = masked

    def forward(self, obs, state=None, info=None):
        out = self.mlp(self.embed(torch.as_tensor(obs.obs, dtype=torch.long)))
        if not self.masked:
            return out
        mask = torch.as_tensor(np.asarray(obs.mask, dtype=bool))
        return out.masked_fill(~mask, -1e9), state


def make_env() -> PettingZooEnv:
    aec = cory_aec_env(task="tiny_vocab", tokenizer=tiny_vocab_tokenizer(), context_len=CONTEXT_LEN)
    return PettingZooEnv(TianshouObsWrapper(aec))


def build_algorithm(env: PettingZooEnv, lr: float) -> SequentialMultiAgentOnPolicyAlgorithm:
    V = env.action_space.n
    algorithms = []
    for _ in env.agents:
        policy = DiscreteActorPolicy(actor=TokenMLP(V, CONTEXT_LEN, V, masked=True), action_space=env.action_space,
                                     observation_space=env.observation_space)
        algorithms.append(PPO(policy=policy, critic=TokenMLP(V, CONTEXT_LEN, 1, masked=False),
                              optim=AdamOptimizerFactory(lr=lr), gamma=1.0, gae_lambda=0.95, ent_coef=0.01))
    return SequentialMultiAgentOnPolicyAlgorithm(algorithms=algorithms, env=env)


def evaluate(collector: Collector, episodes: int, seed: int) -> float:
    collector.reset(reset_buffer=True, gym_reset_kwargs={"seed": seed})
    stats = collector.collect(n_episode=episodes)
    return float(np.mean(stats.returns))  # both seats' columns hold the collective reward


STEPS_PER_EPISODE = 4  # tiny_vocab: 2 pioneer tokens + 2 observer tokens (EOS may end an answer earlier)


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int = 256, *, epochs: int = 8,
                       episodes_per_update: int = 64, repeat: int = 4, batch_size: int = 64, lr: float = 3e-3,
                       num_envs: int = 4) -> dict:
    """Train one PPO per seat for about `episodes` training episodes and evaluate the collective reward.

    The budget is spread over `epochs` Tianshou epochs of ``STEPS_PER_EPISODE * episodes / epochs`` env steps
    (tokens); the test collector (seeds ``10_000 + seed + epoch``, never a training seed) plays `eval_episodes`
    episodes before training and after every epoch, sampling from the policies.

    Args:
        seed: seeds torch, numpy and the training envs.
        episodes: training budget in episodes (one episode = the pioneer's and the observer's answers), >= epochs.
        eval_episodes: evaluation episodes per point.
        epochs, episodes_per_update, repeat, batch_size, lr, num_envs: as the command-line flags.

    Returns:
        ``{"before", "after", "episodes", "curve": [[episodes_so_far, reward], ...], "metric": "collective"}``:
        mean collective rewards in [0, 2] (random ≈ 0.42); ``episodes`` counts the finished training episodes.

    Raises:
        ValueError: if `episodes` < `epochs` or `eval_episodes` < 1.
    """
    if episodes < epochs or eval_episodes < 1:
        raise ValueError(f"need episodes >= epochs ({episodes} < {epochs}?) and eval_episodes >= 1 "
                         f"(got {eval_episodes})")
    logging.getLogger("tianshou").setLevel(logging.WARNING)
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = make_env()
    algorithm = build_algorithm(env, lr)
    train_envs = DummyVectorEnv([make_env for _ in range(num_envs)])
    test_envs = DummyVectorEnv([make_env])
    train_envs.seed(seed)
    buffer = VectorReplayBuffer(episodes_per_update * 5 + 10 * num_envs, num_envs)
    train_collector = Collector(algorithm, train_envs, buffer)
    test_collector = Collector(algorithm, test_envs)
    curve = [[0, evaluate(test_collector, eval_episodes, 10_000 + seed)]]
    train_collector.reset()
    done = 0
    for epoch in range(1, epochs + 1):
        stats = algorithm.run_training(OnPolicyTrainerParams(
            training_collector=train_collector, test_collector=None, max_epochs=1,
            epoch_num_steps=STEPS_PER_EPISODE * episodes // epochs, collection_step_num_env_steps=None,
            collection_step_num_episodes=episodes_per_update, update_step_num_repetitions=repeat,
            batch_size=batch_size, show_progress=False, verbose=False,
        ))
        done += int(stats.train_episode)  # episodes this epoch's training run collected
        curve.append([done, evaluate(test_collector, eval_episodes, 10_000 + seed + epoch)])
    return {"before": curve[0][1], "after": curve[-1][1], "episodes": done, "curve": curve, "metric": "collective"}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="Seed for torch, numpy and the envs.")
    parser.add_argument("--episodes", type=int, default=7500, help="Training budget in episodes (pioneer + observer).")
    parser.add_argument("--epochs", type=int, default=10, help="Training epochs (an evaluation after each).")
    parser.add_argument("--episodes_per_update", type=int, default=64, help="Episodes collected per PPO update.")
    parser.add_argument("--repeat", type=int, default=4, help="PPO passes over each collected buffer.")
    parser.add_argument("--batch_size", type=int, default=64, help="PPO mini-batch size (transitions).")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate.")
    parser.add_argument("--num_envs", type=int, default=4, help="Parallel (dummy) training envs.")
    parser.add_argument("--test_episodes", type=int, default=100, help="Episodes per evaluation.")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = train_and_evaluate(args.seed, args.episodes, args.test_episodes, epochs=args.epochs,
                             episodes_per_update=args.episodes_per_update, repeat=args.repeat,
                             batch_size=args.batch_size, lr=args.lr, num_envs=args.num_envs)
    for epoch, (episodes, value) in enumerate(out["curve"]):
        label = "epoch 0 (before training)" if epoch == 0 else f"epoch {epoch}"
        print(f"{label}: mean collective reward {value:.3f} after {episodes} training episodes", flush=True)
    result = {"first": out["before"], "last": out["after"], "returns": [v for _, v in out["curve"]],
              "episodes": out["episodes"]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
