"""TorchRL over the CORY AEC env: `PettingZooWrapper` rollouts, the sequential reward, per-seat PPO (ClipPPOLoss)."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("torchrl")

from tensordict.nn import TensorDictSequential  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import PettingZooWrapper  # noqa: E402

import cory_env  # noqa: E402
from cory_env import SEATS  # noqa: E402
from cory_env.tasks import task_tokenizer  # noqa: E402
from cory_env.tasks.tiny_vocab import SYMBOLS, VOCAB, tiny_vocab_reward  # noqa: E402
from trainers.adapters.torchrl import (  # noqa: E402
    SeatPPO,
    evaluate,
    make_actor_critic,
    make_batched_env,
    make_env,
    seat_transitions,
    seats_of,
    token_sizes,
    train_and_evaluate,
)
from trainers.adapters.window import episode_size  # noqa: E402

ID_TO_TOKEN = {i: t for t, i in VOCAB.items()}
ALLOWED = {VOCAB[s] for s in SYMBOLS} | {VOCAB["<eos>"]}


def _random_rollout(steps=60, seed=0):
    env = make_env(seed)
    return env.rollout(steps, break_when_any_done=False)


def _text(ids) -> str:
    return " ".join(ID_TO_TOKEN[int(i)] for i in ids if int(i) != VOCAB["<eos>"])


def _episodes(rollout):
    """Split a flat rollout into episodes: lists of step indices."""
    out, current = [], []
    for t in range(rollout.shape[0]):
        current.append(t)
        if rollout["next", "done"][t].item():
            out.append(current)
            current = []
    return out


def _collective(rollout, episode) -> float:
    """The env's collective reward recomputed from the episode's tokens with the task's reward (c = 1)."""
    first = episode[0]
    window = rollout["pioneer", "observation", "input_ids"][first, 0]
    attended = rollout["pioneer", "observation", "attention_mask"][first, 0].bool()
    query = _text(window[attended][:-1])  # the pioneer's prompt is "{query} ?"
    answers = {seat: _text([rollout[seat, "action"][t, 0] for t in episode if rollout[seat, "mask"][t, 0]])
               for seat in SEATS}
    r1, r2 = tiny_vocab_reward([query] * 2, [answers["pioneer"], answers["observer"]],
                               [{}, {"partner_response": answers["pioneer"]}])
    return r1 + r2


def test_random_rollout_is_turn_based_with_the_action_mask():
    rollout = _random_rollout()
    acting = torch.stack([rollout[seat, "mask"][:, 0] for seat in SEATS])
    assert (acting.sum(0) == 1).all()                                   # exactly one seat acts per step
    for seat in SEATS:
        mine = rollout[seat, "mask"][:, 0]
        assert {int(a) for a in rollout[seat, "action"][mine, 0]} <= ALLOWED
        assert rollout[seat, "action_mask"][mine, 0].sum(-1).eq(17).all()
    first = _episodes(rollout)[0]
    assert rollout["pioneer", "mask"][first[0], 0] and rollout["observer", "mask"][first[-1], 0]


def test_both_seats_terminal_rewards_arrive_and_equal_the_collective_reward():
    rollout = _random_rollout(steps=120, seed=3)
    episodes = _episodes(rollout)
    assert len(episodes) >= 20
    for episode in episodes:
        end = episode[-1]
        collective = _collective(rollout, episode)
        for seat in SEATS:
            rewards = rollout["next", seat, "reward"][episode, 0, 0]
            assert rewards[-1].item() == pytest.approx(collective)     # the pioneer's too
            assert (rewards[:-1] == 0).all()
            assert rollout["next", seat, "done"][end].all()
        assert not rollout["pioneer", "mask"][end, 0]                  # ...on a step the pioneer did not take


def test_seat_transitions_credit_the_terminal_reward_to_each_seats_last_action():
    rollout = _random_rollout(steps=120, seed=3)
    episodes = _episodes(rollout)
    whole = rollout[: episodes[-1][-1] + 1]
    for seat in SEATS:
        batch = seat_transitions(whole, seat)
        mine = [[t for t in ep if rollout[seat, "mask"][t, 0]] for ep in episodes]
        assert batch.shape[0] == sum(len(m) for m in mine)
        k = 0
        for episode, steps in zip(episodes, mine):
            for j, t in enumerate(steps):
                is_last = j == len(steps) - 1
                expected = _collective(rollout, episode) if is_last else 0.0
                assert batch["next", seat, "reward"][k, 0, 0].item() == pytest.approx(expected)
                assert batch["next", seat, "terminated"][k, 0, 0].item() == is_last
                assert torch.equal(batch[seat, "action"][k], rollout[seat, "action"][t])
                if not is_last:  # the next observation is the seat's next decision point
                    assert torch.equal(batch["next", seat, "observation", "input_ids"][k],
                                       rollout[seat, "observation", "input_ids"][steps[j + 1]])
                k += 1
        # reward is moved, never created or lost
        assert batch["next", seat, "reward"].sum().item() == pytest.approx(
            whole["next", seat, "reward"].sum().item())
    with pytest.raises(ValueError, match="flat"):
        seat_transitions(whole.unsqueeze(0), "pioneer")


def test_collector_and_clip_ppo_update_train_both_seats():
    torch.manual_seed(0)
    env = make_batched_env(2, seed=0)
    pairs = {seat: make_actor_critic(seat, *token_sizes(env)) for seat in SEATS}
    learners = [SeatPPO(seat, *pairs[seat], lr=1e-2, epochs=1, minibatch_size=16, entropy_coeff=0.01)
                for seat in SEATS]
    policy = TensorDictSequential(*(pairs[seat][0] for seat in SEATS))
    collector = Collector(env, policy, frames_per_batch=32, trajs_per_batch=8, traj_format="cat",
                          auto_register_policy_transforms=False)
    data = next(iter(collector))
    collector.shutdown()
    assert int(data["next", "done"].sum()) == 8 and data["next", "done"][-1].item()  # whole episodes only
    before = {seat: [p.detach().clone() for p in pairs[seat][0].parameters()] for seat in SEATS}
    for learner in learners:
        stats = learner.update(data)
        assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
        assert f"{learner.seat}/loss_objective" in stats
    for seat in SEATS:
        assert any(not torch.equal(b, p) for b, p in zip(before[seat], pairs[seat][0].parameters())), seat


def test_evaluate_is_seeded():
    torch.manual_seed(0)
    env = make_batched_env(2, seed=5)
    policy = TensorDictSequential(*(make_actor_critic(seat, *token_sizes(env))[0] for seat in SEATS))
    steps = episode_size("tiny_vocab").max_episode_steps
    first = evaluate(env, policy, 6, seed=11, max_episode_steps=steps)
    assert 0.0 <= first <= 2.0 and evaluate(env, policy, 6, seed=11, max_episode_steps=steps) == first
    with pytest.raises(ValueError, match="max_episode_steps=1 is shorter than an episode"):
        evaluate(env, policy, 6, seed=11, max_episode_steps=1)


def test_train_and_evaluate_contract():
    torch.set_num_threads(1)
    result = train_and_evaluate(0, episodes=24, eval_episodes=4, episodes_per_update=16, num_envs=2, num_evals=1)
    assert result["episodes"] == 24 and [p[0] for p in result["curve"]] == [0, 24]  # 16 + the last 8
    assert result["curve"][0][1] == result["before"] and result["curve"][-1][1] == result["after"]
    assert all(0.0 <= r <= 2.0 for _, r in result["curve"])
    with pytest.raises(ValueError, match="episodes"):
        train_and_evaluate(0, episodes=0)


def test_seat_transitions_for_three_seats_credit_each_seats_reward_to_its_last_action():
    """chain_relay: three seats, the rewards arrive on the last seat's last step; each seat's own transitions get
    its reward on its own last action (the fix works whoever acts last)."""
    env = make_env(3, task="chain_relay")
    names = seats_of(env)
    assert names == ["pioneer", "observer_1", "observer_2"]
    rollout = env.rollout(120, break_when_any_done=False)
    episodes = _episodes(rollout)
    whole = rollout[: episodes[-1][-1] + 1]
    for seat in names:
        batch = seat_transitions(whole, seat)
        credited, k = [], 0
        for episode in episodes:
            steps = [t for t in episode if rollout[seat, "mask"][t, 0]]
            rewards = batch["next", seat, "reward"][k:k + len(steps), 0, 0]
            assert rewards[-1].item() == pytest.approx(rollout["next", seat, "reward"][episode[-1], 0, 0].item())
            assert (rewards[:-1] == 0).all() and batch["next", seat, "terminated"][k + len(steps) - 1].all()
            credited.append(rewards[-1].item())
            k += len(steps)
        assert k == batch.shape[0]
        assert sum(credited) == pytest.approx(whole["next", seat, "reward"].sum().item())


def test_train_and_evaluate_runs_a_chain_of_three():
    torch.set_num_threads(1)
    result = train_and_evaluate(0, episodes=16, eval_episodes=4, episodes_per_update=16, num_envs=2, num_evals=1,
                                task="chain_relay")
    assert result["episodes"] == 16 and all(0.0 <= r <= 3.0 for _, r in result["curve"])


@pytest.mark.filterwarnings("ignore:PettingZoo in TorchRL is tested:UserWarning")
def test_actor_critic_sized_from_the_env_train_on_another_window():
    """Any window: `token_sizes` reads (V, L) from the env's specs; a PPO update on a 16-token window."""
    torch.manual_seed(0)
    env = make_batched_env(2, seed=0, context_len=16)
    assert token_sizes(env) == (20, 16)
    pairs = {seat: make_actor_critic(seat, *token_sizes(env)) for seat in SEATS}
    policy = TensorDictSequential(*(pairs[seat][0] for seat in SEATS))
    collector = Collector(env, policy, frames_per_batch=16, trajs_per_batch=4, traj_format="cat",
                          auto_register_policy_transforms=False)
    data = next(iter(collector))
    collector.shutdown()
    before = [p.detach().clone() for p in pairs["pioneer"][0].parameters()]
    SeatPPO("pioneer", *pairs["pioneer"], lr=1e-2, epochs=1, minibatch_size=8, entropy_coeff=0.01).update(data)
    assert any(not torch.equal(b, p) for b, p in zip(before, pairs["pioneer"][0].parameters()))
    # a hand-built env (docs/libraries.md's way) is read the same
    hand = PettingZooWrapper(env=cory_env.env(task="tiny_vocab", tokenizer=task_tokenizer("tiny_vocab"),
                                              context_len=9), use_mask=True, categorical_actions=True)
    assert token_sizes(hand) == (20, 9)


@pytest.mark.parametrize(("seating", "window"), [("chain:4", 14), ("chain:6", 18)])
def test_window_grows_with_the_seats_and_trains(caplog, seating, window):
    """chain:4 used to cut every query to 2 of its 4 symbols (a warning) and chain:6 was refused ("context_len=12 is
    too small"): the default window holds a whole query and every answer the last seat reads."""
    torch.set_num_threads(1)
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        assert token_sizes(make_env(0, seating=seating)) == (20, window)
        result = train_and_evaluate(0, episodes=4, eval_episodes=2, episodes_per_update=4, epochs=1,
                                    minibatch_size=16, num_envs=2, num_evals=1, seating=seating)
    assert result["episodes"] == 4 and all(0.0 <= r <= float(seating.split(":")[1]) for _, r in result["curve"])
    assert not [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]


def test_train_and_evaluate_on_another_window():
    torch.set_num_threads(1)
    result = train_and_evaluate(0, episodes=4, eval_episodes=2, episodes_per_update=4, epochs=1, minibatch_size=8,
                                num_envs=2, num_evals=1, context_len=16)
    assert result["episodes"] == 4 and all(0.0 <= r <= 2.0 for _, r in result["curve"])
