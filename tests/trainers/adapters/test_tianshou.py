"""Tianshou 2.0.1 over the CORY AEC env (`trainers.adapters.tianshou`): the observation adapter, the issue #399 credit
fix for any seating, a collect-update cycle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("tianshou")

from tianshou.algorithm.algorithm_base import policy_within_training_step  # noqa: E402
from tianshou.algorithm.multiagent.marl import MultiAgentOnPolicyAlgorithm  # noqa: E402
from tianshou.data import Collector, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv  # noqa: E402

from cory_env.seating import seat_names  # noqa: E402
from trainers.adapters.tianshou import SequentialMultiAgentOnPolicyAlgorithm, build_algorithm, make_env  # noqa: E402


@pytest.fixture()
def setup():
    torch.manual_seed(0)
    env = make_env()
    return env, build_algorithm(env, lr=3e-3)


def _collect(algorithm, episodes=8, seed=0, seating=None):
    venv = DummyVectorEnv([lambda: make_env(seating=seating)] * 2)
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
