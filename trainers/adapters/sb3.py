"""Stable-Baselines3 on the CORY pioneer seat: the token features extractor, and sb3-contrib's MaskablePPO on
``cory/TinyVocab-v0`` (alone, or with partners for any seating).

Needs the ``baselines`` extra (``pip install -e ".[baselines]"``: stable-baselines3, sb3-contrib, torchrl).

Pipeline: ``gymnasium.make("cory/TinyVocab-v0")`` (the single-agent view `cory_env.gym_env.PioneerEnv`: the
pioneer names 2 of the query's 4 symbols; reward 1 for two distinct query symbols; with ``seating=`` the later seats
answer with a fixed partner policy and the pioneer is paid its seat reward) → SB3 ``DummyVecEnv`` →
``sb3_contrib.MaskablePPO("MultiInputPolicy")``, which reads the action mask from the env's ``action_masks()``.
The policy sees the Dict observation; SB3 turns every Box into floats, so token ids would reach an MLP as
magnitudes (id 7 "between" ids 6 and 8). `TokenEmbedding` (an SB3 ``BaseFeaturesExtractor``) embeds them
instead: a one-hot encoding followed by a linear layer, without materialising the (L · V) one-hot vector. Padding
(attention mask 0) gets its own id V. `make_env` sizes the window L for the seating (`trainers.adapters.window`), and
`TokenEmbedding` reads L and V from the observation space.

`train_and_evaluate` is the entry point of `examples/sb3_baseline.py` and of the ladder arm ``sb3-maskable-ppo``
(`benchmarks/learning.py`). Importing this module imports Stable-Baselines3 and sb3-contrib.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

import cory_env  # noqa: F401  (registers the Gymnasium ids)
from cory_env.checks import check_number
from cory_env.gym_env import ALONE
from trainers.adapters.window import default_context_len

__all__ = ["ENV_ID", "EVAL_SEED_OFFSET", "EpisodeCounter", "TokenEmbedding", "evaluate", "make_env", "make_model",
           "train_and_evaluate"]

ENV_ID = "cory/TinyVocab-v0"
#: Evaluation queries and sampling use seeds from here on; training envs use seed .. seed + num_envs - 1.
EVAL_SEED_OFFSET = 1_000_000


class TokenEmbedding(BaseFeaturesExtractor):
    """SB3 features extractor for the CORY Dict observation: embed the token window, flatten.

    Input (after SB3's preprocessing, which casts every Box to float): ``input_ids`` float (B, L) holding integer
    ids in [0, V), ``attention_mask`` float (B, L) in {0, 1}; ``action_mask`` is ignored (masking acts on the
    logits). Output: float (B, L · embed_dim).

    Args:
        observation_space: the env's ``Dict`` space (``input_ids`` a Box of shape (L,) with high V - 1).
        embed_dim: embedding width per token.

    Raises:
        ValueError: if the space lacks ``input_ids`` / ``attention_mask`` or ``input_ids`` is not 1-D.
    """

    def __init__(self, observation_space: spaces.Dict, embed_dim: int = 16) -> None:
        ids = observation_space.spaces.get("input_ids") if isinstance(observation_space, spaces.Dict) else None
        if ids is None or "attention_mask" not in observation_space.spaces or len(ids.shape) != 1:
            raise ValueError(f"TokenEmbedding needs a Dict space with 1-D 'input_ids' and 'attention_mask', got "
                             f"{observation_space}")
        context_len, vocab_size = ids.shape[0], int(ids.high.max()) + 1
        super().__init__(observation_space, features_dim=context_len * embed_dim)
        self.pad_id = vocab_size
        self.embed = torch.nn.Embedding(vocab_size + 1, embed_dim)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = observations["input_ids"].long()
        ids = torch.where(observations["attention_mask"] > 0.5, ids, torch.full_like(ids, self.pad_id))
        return self.embed(ids).flatten(start_dim=1)


class EpisodeCounter(BaseCallback):
    """Counts finished episodes over all vectorised envs (SB3 ``dones``), across `learn` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes = 0

    def _on_step(self) -> bool:
        self.episodes += int(np.sum(self.locals["dones"]))
        return True


def make_env(seating: str | None = None, *, context_len: int | None = None) -> gym.Env:
    """``cory/TinyVocab-v0``: the pioneer seat of the tiny-vocabulary task; with a seating of N > 1 seats (a spec)
    the later seats are played by the env's uniform partner policy and the pioneer is paid its seat reward
    (`cory_env.gym_env.PioneerEnv`).

    Args:
        seating: a seating spec (``"cory"``, ``"chain:N"``); None: the pioneer alone.
        context_len: the window L in tokens; None: the ladder's 12 when a whole query and every response a seat
            reads fit, else the smallest window that holds them (`trainers.adapters.window.default_context_len`).

    Raises:
        ValueError: a bad seating, or a `context_len` too small for even the shortest query.
    """
    if context_len is None:
        context_len = default_context_len("tiny_vocab", ALONE if seating is None else seating)
    kwargs = {"context_len": context_len} if seating is None else {"context_len": context_len, "seating": seating}
    return gym.make(ENV_ID, **kwargs)


def make_model(seed: int, *, num_envs: int = 8, n_steps: int = 64, batch_size: int = 128, n_epochs: int = 10,
               learning_rate: float = 3e-3, ent_coef: float = 0.0, seating: str | None = None,
               context_len: int | None = None) -> MaskablePPO:
    """MaskablePPO (``MultiInputPolicy`` with `TokenEmbedding`, a 64-unit MLP per head) on `num_envs` `make_env`
    envs (`seating`, `context_len`) seeded seed .. seed + num_envs - 1. γ = 1 (an episode is a few tokens), GAE
    λ 0.95. Its logger writes nowhere (SB3's default makes a ``SB3-<date>`` folder in the temp directory at every
    ``learn`` call; `train_and_evaluate` calls it once per rollout).

    Raises:
        ValueError: if a count is < 1 (SB3's own checks cover the rest); from `make_env`.
    """
    for name, value in (("num_envs", num_envs), ("n_steps", n_steps), ("batch_size", batch_size),
                        ("n_epochs", n_epochs)):
        check_number(value, name, integer=True, low=1)
    venv = DummyVecEnv([lambda: make_env(seating, context_len=context_len) for _ in range(num_envs)])
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                        learning_rate=learning_rate, gamma=1.0, gae_lambda=0.95, ent_coef=ent_coef, seed=seed,
                        device="cpu", verbose=0,
                        policy_kwargs={"features_extractor_class": TokenEmbedding, "net_arch": [64]})
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def evaluate(model: MaskablePPO, episodes: int, seed: int, seating: str | None = None) -> float:
    """Mean pioneer reward over `episodes` episodes (its task reward alone; its seat reward with partners), actions
    sampled (not argmax) with the action mask.

    Queries come from one env reset with `seed`; sampling noise from torch's RNG seeded with `seed` inside
    ``torch.random.fork_rng`` (restored afterwards), so two calls with the same seed see the same queries and noise.
    The env's window is the model's (its ``input_ids`` space).
    """
    env = make_env(seating, context_len=model.observation_space["input_ids"].shape[0])
    total = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        obs, _ = env.reset(seed=seed)
        for _ in range(episodes):
            done, reward = False, 0.0
            while not done:
                action, _ = model.predict(obs, deterministic=False, action_masks=env.unwrapped.action_masks())
                obs, reward, terminated, truncated, _ = env.step(int(action))
                done = terminated or truncated
            total += float(reward)
            obs, _ = env.reset()
    env.close()
    return total / episodes


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int = 256, *, num_evals: int = 8,
                       seating: str | None = None, **model_kwargs) -> dict:
    """Train MaskablePPO on the pioneer seat of the tiny-vocabulary task for at most `episodes` episodes (alone, or
    with the partners of `seating`, `make_env`).

    Training runs whole rollouts (num_envs · n_steps env steps, one PPO update each) while the next rollout
    cannot overshoot the budget (every episode takes >= 1 step), so it stops at most one rollout's worth of
    steps short of `episodes`. Evaluation (`evaluate`, seed ``EVAL_SEED_OFFSET + seed``, disjoint from the
    training envs' seeds) runs before training, about every ``episodes / num_evals`` episodes, and at the end.

    Args:
        seed: seeds torch, the policy and the training envs.
        episodes: training budget in episodes (one episode = one pioneer answer, 1-2 tokens), >= 1.
        eval_episodes: evaluation episodes per point, >= 1.
        num_evals: evaluation points during training (>= 1), besides the one before.
        seating: a seating spec (None: the pioneer alone).
        **model_kwargs: passed to `make_model` (num_envs, n_steps, batch_size, n_epochs, learning_rate, ent_coef,
            context_len).

    Returns:
        ``{"before": float, "after": float, "episodes": int, "curve": [[episodes_so_far, reward], ...],
        "cpu_s": float}``: rewards are mean pioneer task rewards in [0, 1] (optimum 1, uniform random over
        the allowed tokens ≈ 0.23); ``episodes`` is the number of finished training episodes; ``cpu_s`` the
        process CPU seconds the call took.

    Raises:
        ValueError: if `episodes`, `eval_episodes` or `num_evals` is < 1, or `episodes` is smaller than one
            rollout (num_envs · n_steps: nothing would be trained).
    """
    for name, value in (("episodes", episodes), ("eval_episodes", eval_episodes), ("num_evals", num_evals)):
        check_number(value, name, integer=True, low=1)
    cpu0 = time.process_time()
    torch.manual_seed(seed)
    model = make_model(seed, seating=seating, **model_kwargs)
    rollout_steps = model.n_steps * model.n_envs
    if rollout_steps > episodes:
        raise ValueError(f"episodes ({episodes}) is smaller than one rollout ({model.n_envs} envs x "
                         f"{model.n_steps} steps = {rollout_steps}), so nothing would be trained; lower "
                         f"num_envs or n_steps")
    counter = EpisodeCounter()
    eval_seed = EVAL_SEED_OFFSET + seed
    curve = [[0, evaluate(model, eval_episodes, eval_seed, seating)]]
    next_eval = episodes / num_evals
    while counter.episodes + rollout_steps <= episodes:
        model.learn(total_timesteps=rollout_steps, callback=counter, reset_num_timesteps=False)
        if counter.episodes >= next_eval:
            curve.append([counter.episodes, evaluate(model, eval_episodes, eval_seed, seating)])
            next_eval = (int(counter.episodes * num_evals / episodes) + 1) * episodes / num_evals
    if curve[-1][0] != counter.episodes:
        curve.append([counter.episodes, evaluate(model, eval_episodes, eval_seed, seating)])
    model.get_env().close()
    return {"before": curve[0][1], "after": curve[-1][1], "episodes": counter.episodes, "curve": curve,
            "cpu_s": time.process_time() - cpu0}
