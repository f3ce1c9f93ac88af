"""Tianshou 2.0 on the CORY AEC env, for any seating: the observation adapter, the sequential-turn credit fix, and one
PPO per seat.

Tianshou trains PettingZoo envs through `tianshou.env.PettingZooEnv`, which expects ``{"observation": ...,
"action_mask": ...}`` and identical spaces for all agents (every seat of a CORY env shares L and V):
`TianshouObsWrapper` presents our ``input_ids`` / ``attention_mask`` / ``action_mask`` dict that way, with padding
written as the extra id V so a token embedding of size V + 1 can tell it apart.

Tianshou's `MultiAgentOnPolicyAlgorithm` (one algorithm per seat; `possible_agents` order = reward-vector columns)
ends the episode on the last seat's last token, where every seat's reward arrives, so the other seats' transitions
never carry it (Tianshou issue #399): `redistribute_terminal_reward` fixes that, and
`SequentialMultiAgentOnPolicyAlgorithm` runs it before each seat's GAE.

`make_env` sizes the window for the seating (`trainers.adapters.window`: a whole query and every response a seat
reads fit), and `build_algorithm` reads the window L and the vocabulary V from the env's spaces.
`train_and_evaluate` trains one `tianshou.algorithm.PPO` per seat (an MLP over the embedded token window) on a task
and seating; `examples/tianshou_marl.py` is its command line, `benchmarks/learning.py` its ladder arm
``tianshou``. Importing this module imports Tianshou (the project's dependency).

Example:
    >>> from tianshou.env import PettingZooEnv
    >>> env = make_env(seating="chain:4")  # the last seat reads 3 answers: a 14-token window
    >>> obs, info = env.reset(seed=0)
    >>> obs["agent_id"], obs["obs"].shape, env.agents
    ('pioneer', (14,), ['pioneer', 'observer_1', 'observer_2', 'observer_3'])
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseWrapper
from tianshou.algorithm import PPO
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
from tianshou.algorithm.multiagent.marl import MultiAgentOnPolicyAlgorithm
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, VectorReplayBuffer
from tianshou.env import DummyVectorEnv, PettingZooEnv
from tianshou.trainer import OnPolicyTrainerParams

from cory_env.checks import check_number
from trainers.adapters.window import aec_env, default_context_len, episode_size

__all__ = ["SequentialMultiAgentOnPolicyAlgorithm", "TianshouObsWrapper", "TokenMLP", "build_algorithm", "make_env",
           "redistribute_terminal_reward", "train_and_evaluate"]


class TianshouObsWrapper(BaseWrapper):
    """Present the CORY AEC env's observations as Tianshou's ``{"observation", "action_mask"}`` dict.

    ``observation`` is int64 (L,): the window's token ids, with padding (attention mask 0) replaced by V.
    ``action_mask`` is the task's int8 (V,) mask. One space object for every seat. `last` returns numeric infos
    only (see there).

    Args:
        env: a CORY AEC env (`cory_env.env(...)` or `raw_env`), of any seating, its seats of one tokenizer.

    Raises:
        ValueError: seats of different tokenizers (docs/seats.md): Tianshou's ``PettingZooEnv`` gives every agent one
            observation and action space.
    """

    def __init__(self, env) -> None:
        super().__init__(env)
        sizes = {seat: int(env.action_space(seat).n) for seat in env.possible_agents}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"the seats of this env act in different vocabularies {sizes} (a tokenizer per seat, "
                             "docs/seats.md), and Tianshou's PettingZooEnv gives every agent one observation and "
                             "action space; give every seat one tokenizer, or train with cory's own trainer")
        inner = env.observation_space(env.possible_agents[0])
        L = inner["input_ids"].shape[0]
        V = inner["action_mask"].shape[0]
        self._pad_index = V
        self._space = spaces.Dict({
            "observation": spaces.Box(0, V, shape=(L,), dtype=np.int64),
            "action_mask": spaces.Box(0, 1, shape=(V,), dtype=np.int8),
        })

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._space

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        obs = super().observe(agent)
        ids = np.where(obs["attention_mask"] == 1, obs["input_ids"], self._pad_index)
        return {"observation": ids, "action_mask": obs["action_mask"]}

    def last(self, observe: bool = True):
        """`AECEnv.last`, with an info of fixed numeric keys (``task_reward`` float, ``response_len`` int; 0 until
        the episode ends): Tianshou's buffer stores infos column-wise and rejects missing values and texts."""
        obs, reward, terminated, truncated, info = super().last(observe)
        info = {"task_reward": float(info.get("task_reward", 0.0)), "response_len": int(info.get("response_len", 0))}
        return obs, reward, terminated, truncated, info

    def step(self, action) -> None:
        # Tianshou acts for a finished seat too; PettingZoo expects None there.
        if self.terminations.get(self.agent_selection) or self.truncations.get(self.agent_selection):
            action = None
        elif action is not None:
            action = int(np.asarray(action).reshape(-1)[0])
        super().step(action)


def redistribute_terminal_reward(batch, buffer, indices: np.ndarray, agent_idx: dict) -> int:
    """Give every seat its share of the terminal reward on its own last transition, marked terminated.

    For each finished episode (a transition with ``terminated`` set, owned by seat s*), and each other seat a:
    find a's last transition j in that episode (walking back with ``buffer.prev``), add the terminal reward's
    column a to ``rew[j, a]`` and zero it on the terminal step, and set ``terminated[j] = True``. Done flags used
    for episode boundaries are left alone, so the buffer's episode bookkeeping is untouched. Idempotent.

    Args:
        batch: the sampled Tianshou `Batch` (``buffer[indices]``), edited in place.
        buffer: the Tianshou replay buffer, edited in place (``rew`` (N, n_seats) float, ``terminated`` (N,)).
        indices: int (n,), the buffer positions of `batch`.
        agent_idx: seat id -> reward column (`PettingZooEnv.agent_idx`).

    Returns:
        The number of transitions that received a terminal reward.

    Raises:
        ValueError: if the buffer's rewards are not (N, n_seats).

    Source:
        Tianshou issue #399 (sequential multi-agent envs: only the last mover sees the terminal reward).
    """
    rew = buffer.rew
    if not isinstance(rew, np.ndarray) or rew.ndim != 2 or rew.shape[1] != len(agent_idx):
        raise ValueError(f"expected buffer rewards of shape (N, {len(agent_idx)}), got "
                         f"{getattr(rew, 'shape', type(rew).__name__)}; collect with a PettingZooEnv")
    position = {int(i): p for p, i in enumerate(indices)}
    agent_ids = buffer.obs.agent_id
    moved = 0
    for end in np.asarray(indices)[np.asarray(buffer.terminated[indices], dtype=bool)]:
        end = int(end)
        owner = agent_ids[end]
        waiting = {a for a in agent_idx if a != owner}
        j = end
        while waiting:
            previous = int(buffer.prev(np.array([j]))[0])
            if previous == j:  # reached the first transition of the episode
                break
            j = previous
            seat = agent_ids[j]
            if seat in waiting:
                waiting.discard(seat)
                col = agent_idx[seat]
                rew[j, col] += rew[end, col]
                rew[end, col] = 0.0
                buffer.terminated[j] = True
                if j in position:
                    batch.rew[position[j]] = rew[j]
                    batch.terminated[position[j]] = True
                moved += 1
        if end in position:
            batch.rew[position[end]] = rew[end]
    return moved


class SequentialMultiAgentOnPolicyAlgorithm(MultiAgentOnPolicyAlgorithm):
    """`MultiAgentOnPolicyAlgorithm` for turn-based envs: every seat's last transition gets its terminal reward and
    ``terminated`` flag (`redistribute_terminal_reward`) before each seat's GAE.

    Args:
        algorithms: one on-policy algorithm per seat, in `possible_agents` order.
        env: the `tianshou.env.PettingZooEnv` (gives the seat -> reward column map).
    """

    def __init__(self, *, algorithms, env) -> None:
        super().__init__(algorithms=algorithms, env=env)
        self.agent_idx = dict(env.agent_idx)

    def _preprocess_batch(self, batch, buffer, indices):
        redistribute_terminal_reward(batch, buffer, indices, self.agent_idx)
        return super()._preprocess_batch(batch, buffer, indices)


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


def make_env(task: str = "tiny_vocab", seating: str | None = None, *, context_len: int | None = None) -> PettingZooEnv:
    """Tianshou's view of the CORY AEC env of a toy task with its own tokenizer (``tiny_vocab``, ``relay``,
    ``chain_relay``) and a seating spec (``"cory"``, ``"chain:N"``; None: the task's default seats).

    Args:
        context_len: the window L in tokens; None: the ladder's 12 when a whole query and every response a seat
            reads fit, else the smallest window that holds them (`trainers.adapters.window.default_context_len`).

    Raises:
        ValueError: a task without its own tokenizer, a bad seating, or a `context_len` too small for even the
            shortest query (the env's error names the length needed).
    """
    return PettingZooEnv(TianshouObsWrapper(aec_env(task, seating, context_len=context_len)))


def build_algorithm(env: PettingZooEnv, lr: float) -> SequentialMultiAgentOnPolicyAlgorithm:
    """One `tianshou.algorithm.PPO` per seat of `env` (actor and critic `TokenMLP`s sized by the env's spaces: the
    window L of ``observation``, the vocabulary V of the action space; γ 1, GAE λ 0.95, entropy 0.01).

    Raises:
        ValueError: if `env`'s observation space is not `TianshouObsWrapper`'s (a Dict with a 1-D ``observation``).
    """
    space = env.observation_space
    window = space.spaces.get("observation") if isinstance(space, spaces.Dict) else None
    if window is None or len(window.shape) != 1:
        raise ValueError(f"expected the Dict observation space of TianshouObsWrapper (a 1-D 'observation' of token "
                         f"ids), got {space}; build the env with make_env")
    V, L = env.action_space.n, window.shape[0]
    algorithms = []
    for _ in env.agents:
        policy = DiscreteActorPolicy(actor=TokenMLP(V, L, V, masked=True), action_space=env.action_space,
                                     observation_space=env.observation_space)
        algorithms.append(PPO(policy=policy, critic=TokenMLP(V, L, 1, masked=False),
                              optim=AdamOptimizerFactory(lr=lr), gamma=1.0, gae_lambda=0.95, ent_coef=0.01))
    return SequentialMultiAgentOnPolicyAlgorithm(algorithms=algorithms, env=env)


def evaluate(collector: Collector, episodes: int, seed: int) -> float:
    """Mean episode return of `episodes` test episodes (every seat's column holds its reward: with the collective
    reward, the same number), the test env reset with `seed`."""
    collector.reset(reset_buffer=True, gym_reset_kwargs={"seed": seed})
    stats = collector.collect(n_episode=episodes)
    return float(np.mean(stats.returns))


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int = 256, *, epochs: int = 8,
                       episodes_per_update: int = 64, repeat: int = 4, batch_size: int = 64, lr: float = 3e-3,
                       num_envs: int = 4, task: str = "tiny_vocab", seating: str | None = None,
                       context_len: int | None = None) -> dict:
    """Train one PPO per seat for about `episodes` training episodes and evaluate the collective reward.

    The budget is spread over `epochs` Tianshou epochs of ``tokens per episode * episodes / epochs`` env steps
    (at most the task's ``max_new_tokens`` per seat, `trainers.adapters.window.episode_size`); the test collector (seeds ``10_000 + seed + epoch``, never a training seed) plays
    `eval_episodes` episodes before training and after every epoch, sampling from the policies.

    Args:
        seed: seeds torch, numpy and the training envs.
        episodes: training budget in episodes (one episode = every seat's answer), >= epochs.
        eval_episodes: evaluation episodes per point.
        epochs, episodes_per_update, repeat, batch_size, lr, num_envs: Tianshou's training settings.
        task, seating: a toy task with its own tokenizer (`tiny_vocab`, `relay`, `chain_relay`) and a seating spec.
        context_len: the window L (`make_env`); None: the smallest that holds a whole query and every response.

    Returns:
        ``{"before", "after", "episodes", "curve": [[episodes_so_far, reward], ...], "metric": "collective"}``:
        mean collective rewards (tiny_vocab: in [0, 2], random ≈ 0.42); ``episodes`` counts the finished training
        episodes.

    Raises:
        ValueError: if `episodes` < `epochs` or `eval_episodes` < 1; from `make_env`.
    """
    check_number(eval_episodes, "eval_episodes", integer=True, low=1)
    check_number(episodes, "episodes", integer=True, low=epochs, fix=f"at least epochs={epochs}")
    logging.getLogger("tianshou").setLevel(logging.WARNING)
    # a multi-agent return is (episodes, seats) by design; Tianshou's statistics warn on every collect that they
    # flatten it ("Sequence has shape ..."), which says nothing about this run
    logging.getLogger("tianshou.data.stats").setLevel(logging.ERROR)
    torch.manual_seed(seed)
    np.random.seed(seed)
    steps_per_episode = episode_size(task, seating).max_episode_steps
    context_len = default_context_len(task, seating) if context_len is None else context_len
    env = make_env(task, seating, context_len=context_len)
    algorithm = build_algorithm(env, lr)
    train_envs = DummyVectorEnv([lambda: make_env(task, seating, context_len=context_len) for _ in range(num_envs)])
    test_envs = DummyVectorEnv([lambda: make_env(task, seating, context_len=context_len)])
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
            epoch_num_steps=steps_per_episode * episodes // epochs, collection_step_num_env_steps=None,
            collection_step_num_episodes=episodes_per_update, update_step_num_repetitions=repeat,
            batch_size=batch_size, show_progress=False, verbose=False,
        ))
        done += int(stats.train_episode)  # episodes this epoch's training run collected
        curve.append([done, evaluate(test_collector, eval_episodes, 10_000 + seed + epoch)])
    return {"before": curve[0][1], "after": curve[-1][1], "episodes": done, "curve": curve, "metric": "collective"}
