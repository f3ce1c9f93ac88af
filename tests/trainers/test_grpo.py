"""GRPO: group advantages and loss against hand-computed values; the learner on a tiny model; CORY with GRPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cory_env import BatchedCORYEnv, EnvConfig
from trainers.config import GRPOConfig
from trainers.learning.grpo import STD_EPS, GRPOLearner, group_advantages, grpo_loss
from trainers.loop.cory import CORYTrainer
from trainers.rollout import rollout_from_transcript, run_episodes


def test_group_advantages_std_normalised_and_zero_std_group():
    # group 1: mean 2, unbiased std 1; group 2: all equal -> no signal
    adv = group_advantages(torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 5.0]), 3)
    d = 1.0 / (1.0 + STD_EPS)
    torch.testing.assert_close(adv, torch.tensor([-d, 0.0, d, 0.0, 0.0, 0.0]))


def test_group_advantages_skewed_group_and_centring_only():
    # mean 1, unbiased std sqrt((1 + 1 + 1 + 9) / 3) = 2
    rewards = torch.tensor([0.0, 0.0, 0.0, 4.0])
    scaled = group_advantages(rewards, 4)
    torch.testing.assert_close(scaled, torch.tensor([-1.0, -1.0, -1.0, 3.0]) / (2.0 + STD_EPS))
    torch.testing.assert_close(group_advantages(rewards, 4, scale=False), torch.tensor([-1.0, -1.0, -1.0, 3.0]))
    torch.testing.assert_close(group_advantages(rewards, 2, scale=False), torch.tensor([0.0, 0.0, -2.0, 2.0]))


@pytest.mark.parametrize("rewards, k", [(torch.zeros(4), 1), (torch.zeros(5), 2), (torch.zeros(2, 2), 2)])
def test_group_advantages_rejects_bad_input(rewards, k):
    with pytest.raises(ValueError):
        group_advantages(rewards, k)


def test_group_advantages_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="^rewards must be \\(B,\\), got shape \\(2, 2\\)"):
        group_advantages(torch.zeros(2, 2), 2)
    with pytest.raises(ValueError,
                       match="^group_size=1 is invalid: use an integer >= 2; group-relative advantages need 2"):
        group_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="^5 rows \\(batch_size\\) do not split into groups of group_size=2;"):
        group_advantages(torch.zeros(5), 2)


def test_grpo_loss_default_clip_is_02():
    # ratio 2, A = 1: max(-2, -clip(2, 0.8, 1.2)) = -1.2; pi = pi_ref gives a zero k3 KL
    logp = torch.full((1, 1), math.log(2.0))
    loss, stats = grpo_loss(logp, torch.zeros(1, 1), logp, torch.ones(1), torch.ones(1, 1, dtype=torch.bool))
    assert loss.item() == pytest.approx(-1.2) and stats["clipfrac"] == 1.0 and stats["kl_loss"] == 0.0


def test_grpo_loss_entropy_bonus_clip_range_and_statistics():
    mask = torch.ones(1, 2, dtype=torch.bool)
    z = torch.zeros(1, 2)
    # ratio 1, A = 1: policy loss -1; entropy bonus 0.5 * mean(1, 3) = 1 -> loss -2
    loss, stats = grpo_loss(z, z, z, torch.ones(1), mask, entropy=torch.tensor([[1.0, 3.0]]), ent_coef=0.5)
    assert loss.item() == pytest.approx(-2.0) and stats["entropy"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="^ent_coef > 0 needs the per-token entropy"):
        grpo_loss(z, z, z, torch.ones(1), mask, ent_coef=0.5)
    # the clip range is passed on: ratio 2 clipped at 1 + 0.5
    logp = torch.full((1, 2), math.log(2.0))
    loss, _ = grpo_loss(logp, z, logp, torch.ones(1), mask, cliprange=0.5)
    assert loss.item() == pytest.approx(-1.5)
    # log-ratios +0.2 and -0.2: approx_kl = 0.5 * mean(0.04, 0.04) = 0.02, policy_kl = mean(-0.2, 0.2) = 0,
    # ratio = mean(e^0.2, e^-0.2) = cosh(0.2)
    old = torch.full((1, 2), 0.1)
    _, stats = grpo_loss(torch.tensor([[0.3, -0.1]]), old, z, torch.ones(1), mask)
    assert stats["approx_kl"] == pytest.approx(0.02) and stats["policy_kl"] == pytest.approx(0.0, abs=1e-7)
    assert stats["ratio"] == pytest.approx(math.cosh(0.2))
    with pytest.raises(ValueError, match="^advantages must be \\(B,\\) = \\(1,\\), got \\(3,\\)"):
        grpo_loss(z, z, z, torch.ones(3), mask)


def test_grpo_loss_clips_ratio_and_adds_k3_kl():
    mask = torch.tensor([[True], [True]])
    old = torch.zeros(2, 1)
    new = torch.tensor([[0.5], [-0.5]])           # ratios e^0.5 = 1.649 (clipped to 1.2), e^-0.5 = 0.607
    ref = torch.zeros(2, 1)
    advantages = torch.tensor([1.0, 1.0])
    loss, stats = grpo_loss(new, old, ref, advantages, mask, cliprange=0.2, kl_coef=0.0)
    # row 0: max(-1.649, -1.2) = -1.2 (clipped); row 1: max(-0.607, -0.8) = -0.607
    assert float(loss) == pytest.approx((-1.2 - math.exp(-0.5)) / 2, abs=1e-6)
    assert stats["clipfrac"] == pytest.approx(0.5)
    # k3 with delta = logp - ref: exp(-delta) - 1 + delta
    k3 = [math.exp(-d) - 1 + d for d in (0.5, -0.5)]
    assert stats["kl_loss"] == pytest.approx(sum(k3) / 2, abs=1e-6)
    loss_kl, _ = grpo_loss(new, old, ref, advantages, mask, cliprange=0.2, kl_coef=0.1)
    assert float(loss_kl - loss) == pytest.approx(0.1 * sum(k3) / 2, abs=1e-6)


def test_grpo_loss_ignores_padding_and_broadcasts_sequence_advantage():
    mask = torch.tensor([[True, True, False]])
    new = torch.tensor([[0.1, -0.1, 9.0]], requires_grad=True)
    loss, _ = grpo_loss(new, torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([2.0]), mask, cliprange=10.0)
    loss.backward()
    # d/dlogp of -A * exp(logp) / n_tokens on real tokens only
    torch.testing.assert_close(new.grad, torch.tensor([[-math.exp(0.1), -math.exp(-0.1), 0.0]]))


@pytest.fixture()
def grpo_parts(tiny_tok, tiny_model):
    from agents import LLMAgent, copy_for_agents

    (llm1, _), ref = copy_for_agents(tiny_model)
    agent = LLMAgent(llm1, tiny_tok)
    env = BatchedCORYEnv(EnvConfig(min_new_tokens=2, max_new_tokens=4, context_len=48), tiny_tok, batch_size=4,
                         seating="ppo", group_size=2)
    return agent, ref, env


def test_group_rollout_repeats_each_query(grpo_parts):
    agent, _, env = grpo_parts
    transcript = run_episodes(env, {"pioneer": agent}, seed=3, generator=torch.Generator().manual_seed(0))
    q = transcript.query_ids
    assert q[0] == q[1] and q[2] == q[3] and q[0] != q[2]


def test_learner_updates_and_equal_rewards_leave_the_policy_unchanged(grpo_parts, tiny_tok):
    agent, ref, env = grpo_parts
    # beta = 0: Adam would turn the ~1e-7 KL gradients of batch-shape round-off into full-size steps
    config = GRPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=2, learning_rate=1e-2, group_size=2,
                       init_kl_coef=0.0, adap_kl_ctrl=False)
    learner = GRPOLearner(agent, ref, config)
    transcript = run_episodes(env, {"pioneer": agent}, seed=0, generator=torch.Generator().manual_seed(0))
    rollout = rollout_from_transcript(transcript, "pioneer", tiny_tok.pad_token_id)
    before = [p.detach().clone() for p in agent.trainable_parameters()]
    # equal scores: every advantage is 0, so no gradient
    equal = rollout.__class__(**{**vars(rollout), "scores": torch.ones(4)})
    stats = learner.step(equal, generator=torch.Generator().manual_seed(0))
    assert stats["zero_std_groups"] == 1.0 and stats["policy_loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.trainable_parameters()))
    varied = rollout.__class__(**{**vars(rollout), "scores": torch.tensor([0.0, 1.0, 1.0, 0.0])})
    stats = learner.step(varied, generator=torch.Generator().manual_seed(0))
    assert stats["zero_std_groups"] == 0.0 and stats["reward_std"] == pytest.approx(math.sqrt(0.5))
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.trainable_parameters()))
    assert set(learner.state_dict()) == {"optimizer", "kl_ctl"}


def test_kl_in_reward_is_a_centred_penalty_beside_the_normalised_reward(grpo_parts, tiny_tok):
    agent, ref, env = grpo_parts
    config = GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2, kl_in_loss=False, init_kl_coef=0.5)
    learner = GRPOLearner(agent, ref, config)
    transcript = run_episodes(env, {"pioneer": agent}, seed=0, generator=torch.Generator().manual_seed(0))
    rollout = rollout_from_transcript(transcript, "pioneer", tiny_tok.pad_token_id)
    rollout = rollout.__class__(**{**vars(rollout), "scores": torch.tensor([0.0, 1.0, 2.0, 2.0])})
    with torch.no_grad():  # move the policy away from the reference so the KL is non-zero
        next(iter(agent.trainable_parameters())).add_(0.05)
    data = learner.prepare(rollout)
    seq_kl = data["kl"].sum(dim=-1)
    assert float(seq_kl.abs().sum()) > 0
    torch.testing.assert_close(data["rewards"], rollout.scores)  # the task rewards, no KL mixed in
    # group 1: (r - 0.5) / (std 0.7071 + 1e-4); group 2: no reward spread; minus 0.5 * (KL_i - group mean)
    d = 0.5 / (math.sqrt(0.5) + STD_EPS)
    cost = 0.5 * seq_kl.view(2, 2)
    expected = torch.tensor([[-d, d], [0.0, 0.0]]) - (cost - cost.mean(dim=-1, keepdim=True))
    torch.testing.assert_close(data["advantages"], expected.reshape(-1))


def test_beta_scales_the_kl_penalty_and_equal_task_rewards_are_no_signal(grpo_parts, tiny_tok):
    """Four groups with task rewards all 0.5, policy away from the reference. Before: mean |A|
    0.656 / 0.756 / 0.757 at beta 0.001 / 0.1 / 1.0 and zero_std_groups 0.0."""
    agent, ref, _ = grpo_parts
    rollout = _grpo_rollout(agent, tiny_tok, 8, [0.5] * 8)
    with torch.no_grad():
        next(iter(agent.trainable_parameters())).add_(0.05)
    means = []
    for beta in (0.001, 0.1, 1.0):
        config = GRPOConfig(batch_size=8, mini_batch_size=8, group_size=2, kl_in_loss=False, init_kl_coef=beta,
                           adap_kl_ctrl=False, ppo_epochs=1, learning_rate=1e-9)
        learner = GRPOLearner(agent, ref, config)
        means.append(float(learner.prepare(rollout)["advantages"].abs().mean()))
        assert learner.step(rollout, generator=torch.Generator().manual_seed(0))["zero_std_groups"] == 1.0
    assert means[0] > 0
    assert means[1] / means[0] == pytest.approx(100, rel=1e-3) and means[2] / means[0] == pytest.approx(1000, rel=1e-3)


def test_group_size_one_is_rejected(grpo_parts):
    agent, ref, _ = grpo_parts
    with pytest.raises(ValueError, match="group_size=1 is invalid: GRPO needs at least 2 samples per query"):
        GRPOConfig(batch_size=4, mini_batch_size=2, group_size=1)
    with pytest.raises(ValueError, match="4 rows \\(batch_size\\) do not split into groups of group_size=3"):
        GRPOConfig(batch_size=4, mini_batch_size=2, group_size=3)  # the one group rule, in the config


@pytest.mark.parametrize("algo", ["cory", "ppo"])
def test_trainer_runs_grpo_for_cory_and_the_single_agent_baseline(tiny_run, algo):
    configs = tiny_run(seating=algo, learner="grpo", group_size=2, num_iterations=2)
    trainer = CORYTrainer(configs)
    rows = trainer.train()
    assert type(trainer.exchange.seats["pioneer"].learner) is GRPOLearner
    assert np.isfinite(rows[-1]["pioneer/policy_loss"]) and "pioneer/kl_loss" in rows[-1]
    assert ("observer/kl_loss" in rows[-1]) == (algo == "cory")


@pytest.mark.parametrize("kind, kl_in_loss", [("abs", False), ("mse", False), ("kl", True)])
def test_logged_kl_is_the_penalised_estimator(grpo_parts, tiny_tok, kind, kl_in_loss):
    """`kl` (and the controller) follow the penalised estimator: kl_penalty in the reward, k3 in the loss."""
    agent, ref, env = grpo_parts
    config = GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2, kl_in_loss=kl_in_loss, kl_penalty=kind,
                       init_kl_coef=0.2, target=0.05, horizon=20.0)
    learner = GRPOLearner(agent, ref, config)
    transcript = run_episodes(env, {"pioneer": agent}, seed=0, generator=torch.Generator().manual_seed(0))
    rollout = rollout_from_transcript(transcript, "pioneer", tiny_tok.pad_token_id)
    with torch.no_grad():
        next(iter(agent.trainable_parameters())).add_(0.05)
        args = (rollout.query, rollout.query_mask, rollout.response, rollout.response_mask)
        d = agent.evaluate(*args).logprobs - ref.evaluate(*args).logprobs
    hand = {"abs": d.abs(), "mse": 0.5 * d * d, "kl": torch.exp(-d) - 1 + d}[kind]  # kl_in_loss: k3
    expected = float((hand * rollout.response_mask).sum(-1).mean())
    stats = learner.step(rollout, generator=torch.Generator().manual_seed(0))
    assert stats["kl"] == pytest.approx(expected, abs=1e-5)
    assert stats["kl_k1"] == pytest.approx(float((d * rollout.response_mask).sum(-1).mean()), abs=1e-5)
    e = max(-0.2, min(0.2, expected / 0.05 - 1))
    assert learner.kl_ctl.value == pytest.approx(0.2 * (1 + e * 4 / 20.0), rel=1e-6)


def _grpo_rollout(agent, tiny_tok, batch_size: int, scores=None, *, mask_unused_tokens: bool = False):
    """A real group rollout (group size 2) of `batch_size` rows; optional scores; optionally an action mask that
    forbids every token the responses do not use (the sampled tokens stay allowed)."""
    env = BatchedCORYEnv(EnvConfig(min_new_tokens=2, max_new_tokens=4, context_len=48), tiny_tok,
                         batch_size=batch_size, seating="ppo", group_size=2)
    transcript = run_episodes(env, {"pioneer": agent}, seed=0, generator=torch.Generator().manual_seed(0))
    rollout = rollout_from_transcript(transcript, "pioneer", tiny_tok.pad_token_id)
    fields = dict(vars(rollout))
    if scores is not None:
        fields["scores"] = torch.tensor(scores)
    if mask_unused_tokens:
        allowed = torch.zeros(len(tiny_tok), dtype=torch.bool)
        allowed[rollout.response[rollout.response_mask]] = True
        fields["allowed"] = allowed
    return rollout.__class__(**fields)


def test_group_statistics_are_per_group(grpo_parts, tiny_tok):
    agent, ref, _ = grpo_parts
    config = GRPOConfig(batch_size=6, mini_batch_size=6, group_size=2, init_kl_coef=0.0, adap_kl_ctrl=False)
    # groups [1, 1], [2, 0], [0, 4]: within-group stds 0, √2, 2√2 -> mean √2; one group of three has no signal
    rollout = _grpo_rollout(agent, tiny_tok, 6, [1.0, 1.0, 2.0, 0.0, 0.0, 4.0])
    stats = GRPOLearner(agent, ref, config).step(rollout, generator=torch.Generator().manual_seed(0))
    assert stats["reward_std"] == pytest.approx(math.sqrt(2.0), rel=1e-6)
    assert stats["zero_std_groups"] == pytest.approx(1 / 3)
    assert stats["response_len"] == pytest.approx(float(rollout.response_mask.sum()) / 6)


def test_scale_rewards_false_only_centres_each_group(grpo_parts, tiny_tok):
    agent, ref, _ = grpo_parts
    rollout = _grpo_rollout(agent, tiny_tok, 4, [0.0, 3.0, 1.0, 1.0])
    config = GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2, scale_rewards=False, init_kl_coef=0.0,
                       adap_kl_ctrl=False)
    data = GRPOLearner(agent, ref, config).prepare(rollout)
    torch.testing.assert_close(data["advantages"], torch.tensor([-1.5, 1.5, 0.0, 0.0]))  # r - group mean


@pytest.mark.parametrize("kl_in_loss", [True, False])
def test_minibatch_loss_is_on_policy_under_the_action_mask_and_adds_its_terms(grpo_parts, tiny_tok, kl_in_loss):
    agent, ref, _ = grpo_parts
    with torch.no_grad():  # policy != reference, so the k3 term is not zero
        next(iter(agent.trainable_parameters())).add_(0.05)
    rollout = _grpo_rollout(agent, tiny_tok, 4, [0.0, 1.0, 2.0, 0.0], mask_unused_tokens=True)
    config = GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2, kl_in_loss=kl_in_loss, init_kl_coef=0.3,
                       adap_kl_ctrl=False, ent_coef=0.2)
    learner = GRPOLearner(agent, ref, config)
    data = learner.prepare(rollout)
    loss, stats = learner._minibatch_loss(rollout, data, torch.arange(4))
    # before any update the policy is the one that scored the rollout: ratio 1, no policy KL, nothing clipped; it
    # holds only if both forwards score under the same action mask (the mask changes every log-probability here)
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-6) and stats["policy_kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["kl_loss"] > 1e-6 and stats["entropy"] > 0
    beta = 0.3 if kl_in_loss else 0.0  # with the KL in the reward, the loss has no KL term
    expected = stats["policy_loss"] + beta * stats["kl_loss"] - 0.2 * stats["entropy"]
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("cliprange, clipped", [(1e-6, True), (10.0, False)])
def test_minibatch_loss_uses_the_configured_clip_range(grpo_parts, tiny_tok, cliprange, clipped):
    agent, ref, _ = grpo_parts
    rollout = _grpo_rollout(agent, tiny_tok, 4, [0.0, 1.0, 2.0, 0.0])
    config = GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2, cliprange=cliprange, init_kl_coef=0.0,
                       adap_kl_ctrl=False)
    learner = GRPOLearner(agent, ref, config)
    data = learner.prepare(rollout)
    with torch.no_grad():  # the policy moves a little after the rollout: ratios within 1 ± 0.2 but not 1
        next(iter(agent.trainable_parameters())).add_(0.01)
    _, stats = learner._minibatch_loss(rollout, data, torch.arange(4))
    assert 0.8 < stats["ratio"] < 1.2 and stats["ratio"] != 1.0
    assert (stats["clipfrac"] > 0) == clipped


def test_kl_penalty_full_is_refused_only_in_the_reward(grpo_parts):
    agent, ref, _ = grpo_parts
    with pytest.raises(ValueError, match="kl_penalty='full' is invalid: GRPO's advantage penalty"):
        GRPOConfig(batch_size=4, mini_batch_size=2, group_size=2, kl_penalty="full", kl_in_loss=False)
    GRPOLearner(agent, ref, GRPOConfig(batch_size=4, mini_batch_size=2, group_size=2, kl_penalty="full",
                                      kl_in_loss=True))  # the loss uses k3: accepted


def test_a_non_finite_grpo_loss_names_the_algorithm_and_the_fix(grpo_parts, tiny_tok):
    from trainers.learning.update import NonFiniteLossError

    agent, ref, _ = grpo_parts
    rollout = _grpo_rollout(agent, tiny_tok, 4, [0.0, 1.0, 2.0, 0.0])
    learner = GRPOLearner(agent, ref, GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2))
    data = learner.prepare(rollout)
    data["advantages"] = torch.full((4,), float("nan"))
    with pytest.raises(NonFiniteLossError, match=r"^GRPO loss is not finite .*policy_loss=nan, kl_loss=.*; "
                                                 r"lower learning_rate or set max_grad_norm$"):
        learner._minibatch_loss(rollout, data, torch.arange(4))


def test_data_parallel_over_identical_shards_equals_one_process(grpo_parts, tiny_tok):
    import copy

    from tests.trainers.fake_dist import TwoIdenticalProcesses

    agent, ref, _ = grpo_parts
    twin = copy.deepcopy(agent)
    rollout = _grpo_rollout(agent, tiny_tok, 4, [0.0, 1.0, 2.0, 0.0])
    config = GRPOConfig(batch_size=4, mini_batch_size=2, group_size=2, learning_rate=1e-2, ppo_epochs=1)
    dist = TwoIdenticalProcesses()
    alone = GRPOLearner(agent, ref, config).step(rollout, generator=torch.Generator().manual_seed(0))
    pooled = GRPOLearner(twin, ref, config, dist=dist).step(rollout, generator=torch.Generator().manual_seed(0))
    assert pooled == pytest.approx(alone, rel=1e-5, abs=1e-7)  # token means over both shards = over one
    assert dist.synced == 2  # one gradient averaging per optimiser step (2 mini-batches)
    for a, b in zip(agent.trainable_parameters(), twin.trainable_parameters()):
        torch.testing.assert_close(a, b)
