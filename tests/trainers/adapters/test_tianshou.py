"""Tianshou 2.0.1 over the CORY AEC env (`trainers.adapters.tianshou`): the observation adapter, the issue #399 credit
fix for any seating, a collect-update cycle."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

pytest.importorskip("tianshou")

from tianshou.algorithm.algorithm_base import policy_within_training_step  # noqa: E402
from tianshou.algorithm.multiagent.marl import MultiAgentOnPolicyAlgorithm  # noqa: E402
from tianshou.data import Collector, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv, PettingZooEnv  # noqa: E402

import cory_env  # noqa: E402
from cory_env.seating import seat_names  # noqa: E402
from cory_env.tasks import task_tokenizer  # noqa: E402
from trainers.adapters.tianshou import (  # noqa: E402
    SequentialMultiAgentOnPolicyAlgorithm,
    TianshouObsWrapper,
    build_algorithm,
    make_env,
    train_and_evaluate,
)


@pytest.fixture()
def setup():
    torch.manual_seed(0)
    env = make_env()
    return env, build_algorithm(env, lr=3e-3)


def _collect(algorithm, episodes=8, seed=0, seating=None, make=None):
    venv = DummyVectorEnv([make or (lambda: make_env(seating=seating))] * 2)
    collector = Collector(algorithm, venv, VectorReplayBuffer(200, 2))
    collector.reset(gym_reset_kwargs={"seed": seed})
    stats = collector.collect(n_episode=episodes)
    batch, indices = collector.buffer.sample(0)
    return collector, stats, batch, indices


def _episodes(buffer, indices):
    """Split buffer positions into finished episodes: lists of (index, seat)."""
    out, current = [], []
    for i in indices:
        current.append((int(i), buffer.obs.agent_id[i]))
        if buffer.done[i]:
            out.append(current)
            current = []
    return out


def test_spaces_are_identical_and_observations_adapted(setup):
    env, _ = setup
    obs, _ = env.reset(seed=0)
    assert obs["agent_id"] == "pioneer" and obs["obs"].dtype == np.int64 and obs["obs"].max() <= 20
    assert sum(obs["mask"]) == 17  # 16 symbols + EOS


def test_plain_tianshou_loses_the_pioneer_reward(setup):
    env, seq = setup
    plain = MultiAgentOnPolicyAlgorithm(algorithms=list(seq._dispatcher.algorithms.values()), env=env)
    collector, _, batch, indices = _collect(plain)
    plain._preprocess_batch(batch, collector.buffer, indices)
    pioneer = collector.buffer.obs.agent_id[indices] == "pioneer"
    assert not collector.buffer.terminated[indices][pioneer].any()     # issue #399: no done for the pioneer
    assert (collector.buffer.rew[indices][pioneer] == 0).all()         # and never a reward


@pytest.mark.parametrize("seats", [2, 3, 4])
def test_fix_credits_the_collective_reward_to_every_seat(seats):
    torch.manual_seed(0)
    seating = f"chain:{seats}"
    algorithm = build_algorithm(make_env(seating=seating), lr=3e-3)
    collector, stats, batch, indices = _collect(algorithm, seating=seating)
    buffer, names = collector.buffer, seat_names(seats)
    returns = np.asarray(stats.returns)                                  # (episodes, N): [R, ..., R] per episode
    assert returns.shape[1] == seats and np.allclose(returns, returns[:, :1])
    algorithm._preprocess_batch(batch, buffer, indices)
    episodes = _episodes(buffer, indices)
    assert len(episodes) == 8
    for episode in episodes:
        last = {seat: max(i for i, s in episode if s == seat) for seat in names}
        collective = buffer.rew[last[names[-1]], seats - 1]
        for k, seat in enumerate(names):  # every seat's last transition carries its R, marked terminal
            assert buffer.rew[last[seat], k] == pytest.approx(collective) and buffer.terminated[last[seat]]
        others = [i for i, _ in episode if i not in last.values()]
        assert (buffer.rew[others] == 0).all() and not buffer.terminated[others].any()
    # column sums (the per-seat returns) are unchanged, and a second pass changes nothing
    assert buffer.rew[indices].sum(axis=0) == pytest.approx(returns.sum(axis=0))
    before = buffer.rew.copy()
    algorithm._preprocess_batch(batch, buffer, indices)
    np.testing.assert_array_equal(buffer.rew, before)


def test_collect_and_update_cycle_trains_both_seats(setup):
    _, algorithm = setup
    assert isinstance(algorithm, SequentialMultiAgentOnPolicyAlgorithm)
    params = {seat: [p.detach().clone() for p in a.policy.parameters()]
              for seat, a in algorithm._dispatcher.algorithms.items()}
    collector, _, _, _ = _collect(algorithm, episodes=16)
    with policy_within_training_step(algorithm.policy):
        stats = algorithm.update(buffer=collector.buffer, batch_size=32, repeat=1)
    losses = stats.get_loss_stats_dict()
    assert any(k.startswith("pioneer/") for k in losses) and any(k.startswith("observer/") for k in losses)
    for seat, a in algorithm._dispatcher.algorithms.items():
        assert any(not torch.equal(b, p) for b, p in zip(params[seat], a.policy.parameters())), seat


def _trains_one_update(algorithm, make) -> None:
    """One collect (4 episodes) and one PPO update move every seat's policy."""
    params = {seat: [p.detach().clone() for p in a.policy.parameters()]
              for seat, a in algorithm._dispatcher.algorithms.items()}
    collector, _, _, _ = _collect(algorithm, episodes=4, make=make)
    with policy_within_training_step(algorithm.policy):
        algorithm.update(buffer=collector.buffer, batch_size=16, repeat=1)
    for seat, a in algorithm._dispatcher.algorithms.items():
        assert any(not torch.equal(b, p) for b, p in zip(params[seat], a.policy.parameters())), seat


@pytest.mark.parametrize("context_len", [16, 9])
def test_build_algorithm_sizes_its_networks_from_the_env(context_len):
    """Any window: the networks read L and V from the env's spaces (a fixed 12 failed with a matmul shape error)."""
    torch.manual_seed(0)

    def make():
        return PettingZooEnv(TianshouObsWrapper(cory_env.env(task="tiny_vocab", tokenizer=task_tokenizer("tiny_vocab"),
                                                             context_len=context_len)))

    env = make()
    assert env.observation_space["observation"].shape == (context_len,)
    _trains_one_update(build_algorithm(env, lr=1e-2), make)


def test_build_algorithm_refuses_an_env_without_the_observation_wrapper():
    from types import SimpleNamespace

    from gymnasium import spaces

    bare = SimpleNamespace(observation_space=spaces.Dict({"input_ids": spaces.Box(0, 19, (12,), dtype=np.int64)}),
                           action_space=spaces.Discrete(20), agents=["pioneer", "observer"])
    with pytest.raises(ValueError, match="Dict observation space of TianshouObsWrapper.*build the env with make_env"):
        build_algorithm(bare, lr=1e-2)


@pytest.mark.parametrize(("seating", "window"), [("chain:4", 14), ("chain:6", 18)])
def test_make_env_window_grows_with_the_seats(caplog, seating, window):
    """chain:4 used to cut every query to 2 of its 4 symbols (a warning) and chain:6 was refused ("context_len=12 is
    too small"): the default window holds a whole query and every answer the last seat reads."""
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        env = make_env(seating=seating)
        assert env.observation_space["observation"].shape == (window,)
        _trains_one_update(build_algorithm(env, lr=1e-2), lambda: make_env(seating=seating))
    assert not [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]


def test_train_and_evaluate_on_another_window_and_a_chain_of_four(caplog):
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        for kwargs in ({"context_len": 16}, {"seating": "chain:4"}):
            result = train_and_evaluate(0, episodes=8, eval_episodes=2, epochs=1, episodes_per_update=4,
                                        batch_size=16, repeat=1, num_envs=2, **kwargs)
            assert result["episodes"] >= 4 and len(result["curve"]) == 2
    assert not [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]


def test_seats_of_different_vocabularies_are_refused():
    from agents.tiny import tiny_tokenizer
    from cory_env.tasks.tiny_vocab import tiny_vocab_tokenizer

    aec = cory_env.env(task="relay", tokenizer={"pioneer": tiny_vocab_tokenizer(), "observer": tiny_tokenizer()},
                       context_len=12)
    with pytest.raises(ValueError, match=r"act in different vocabularies \{'pioneer': 20, 'observer': 384\}"):
        TianshouObsWrapper(aec)
