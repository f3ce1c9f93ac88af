"""PPOLearner against TRL 0.11.4's published equations (tests/trainers/trl_reference.py) on a tiny model."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agents import LLMAgent, ReferenceModel, ValueHead
from agents.tiny import tiny_causal_lm
from tests.trainers import trl_reference as trl
from trainers.config import PPOConfig
from trainers.learning.ppo import PPOLearner
from tests.trainers.fake_dist import TwoIdenticalProcesses
from trainers.learning.experience import Rollout, pad_sequences

QUERIES = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15]]
RESPONSES = [[20, 21, 22, 23], [24], [25, 26], [27, 28, 29]]


def _rollout(scores):
    query, query_mask = pad_sequences(QUERIES, 0, side="left")
    response, response_mask = pad_sequences(RESPONSES, 0, side="right")
    scores = torch.tensor(scores)
    return Rollout(query, query_mask, response, response_mask, scores, scores.clone())


def _learner(tiny_tok, **cfg):
    torch.manual_seed(0)
    base = tiny_causal_lm(tiny_tok, seed=0)
    policy = copy.deepcopy(base).requires_grad_(True)
    with torch.no_grad():  # make the policy differ from the reference so the KL term is not zero
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    hidden = policy.config.hidden_size
    agent = LLMAgent(policy, tiny_tok, value_head=ValueHead(hidden, dropout=0.0))
    config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=1, **cfg)
    return PPOLearner(agent, ReferenceModel(base), config)


def _trl_forward(model, value_head=None):
    """TRL's batched_forward_pass, one unpadded row at a time: logprobs/values of each response token."""
    logprobs, values = [], []
    width = max(len(r) for r in RESPONSES)
    for q, r in zip(QUERIES, RESPONSES):
        ids = torch.tensor([q + r])
        out = model(input_ids=ids, output_hidden_states=True)
        lp = trl.logprobs_from_logits(out.logits[:, :-1], ids[:, 1:])[0]
        start = len(q) - 1
        row_lp = torch.zeros(width)
        row_lp[: len(r)] = lp[start:start + len(r)]
        logprobs.append(row_lp)
        if value_head is not None:
            v = value_head(out.hidden_states[-1])[0, :-1]
            row_v = torch.zeros(width)
            row_v[: len(r)] = v[start:start + len(r)]
            values.append(row_v)
    return torch.stack(logprobs), (torch.stack(values) if values else None)


def _trl_prepare(learner, rollout, kl_coef, kind, gamma, lam) -> dict[str, torch.Tensor]:
    """TRL's rollout targets for `learner`'s policy, value head and reference: compute_rewards, then GAE."""
    mask = rollout.response_mask.float()
    with torch.no_grad():
        logprobs, values = _trl_forward(learner.agent.model, learner.agent.value_head)
        ref_logprobs, _ = _trl_forward(learner.ref_model.model)
        rewards, _, _ = trl.compute_rewards(rollout.scores, logprobs, ref_logprobs, mask, kl_coef, kind)
        _, advantages, returns, _ = trl.compute_advantages(values, rewards, mask, gamma, lam)
    return {"logprobs": logprobs, "ref_logprobs": ref_logprobs, "rewards": rewards, "advantages": advantages,
            "returns": returns}


def _trl_loss(learner, data, mask, cliprange, cliprange_value, vf_coef):
    """TRL's PPO loss and stats on a fresh forward of `learner`'s policy, against our prepared `data`."""
    new_lp, new_v = _trl_forward(learner.agent.model, learner.agent.value_head)
    return trl.loss(data["logprobs"], data["values"], None, new_v, new_lp, mask.float(), data["advantages"],
                    data["returns"], cliprange, cliprange_value, vf_coef)


@pytest.mark.parametrize("kind", ["kl", "abs", "mse"])
def test_one_step_matches_trl_equations(tiny_tok, kind):
    learner = _learner(tiny_tok, kl_penalty=kind, init_kl_coef=0.2)
    rollout = _rollout([1.0, -0.5, 0.25, 2.0])
    m = rollout.response_mask
    expected = _trl_prepare(learner, rollout, 0.2, kind, 1.0, 0.95)
    data = learner.prepare(rollout)
    for key in ("logprobs", "ref_logprobs", "rewards", "advantages", "returns"):
        torch.testing.assert_close(data[key][m], expected[key][m], atol=1e-5, rtol=0)

    # the first mini-batch loss (all rows, ratio = 1) against TRL's loss on the same forward
    loss, stats = learner._minibatch_loss(rollout, data, torch.arange(4))
    total, trl_stats = _trl_loss(learner, data, m, 0.2, 0.2, 0.1)
    assert loss.item() == pytest.approx(total.item(), abs=1e-5)
    for key in ("policy_loss", "value_loss", "clipfrac", "value_clipfrac", "approx_kl"):
        assert stats[key] == pytest.approx(trl_stats[key].item(), abs=1e-5), key


def test_moved_policy_loss_matches_trl_with_other_hyper_parameters(tiny_tok):
    """Non-default γ, λ, clip ranges, vf_coef and an entropy bonus reach the maths: the policy moves after the
    rollout, so both clips bite (TRL's equations, plus −ent_coef · token-mean entropy)."""
    hyper = dict(cliprange=0.05, cliprange_value=0.05, vf_coef=0.7, gamma=0.9, lam=0.8, ent_coef=0.3)
    learner = _learner(tiny_tok, init_kl_coef=0.2, **hyper)
    rollout = _rollout([1.0, -0.5, 0.25, 2.0])
    mask = rollout.response_mask
    expected = _trl_prepare(learner, rollout, 0.2, "kl", 0.9, 0.8)
    data = learner.prepare(rollout)
    for key in ("advantages", "returns"):
        torch.testing.assert_close(data[key][mask], expected[key][mask], atol=1e-5, rtol=0)
    with torch.no_grad():  # the policy and value head move after the rollout
        gen = torch.Generator().manual_seed(1)
        for p in learner._params:
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    loss, stats = learner._minibatch_loss(rollout, data, torch.arange(4))
    total, trl_stats = _trl_loss(learner, data, mask, 0.05, 0.05, 0.7)
    assert stats["clipfrac"] > 0 and stats["value_clipfrac"] > 0  # both clip ranges are active
    for key in ("policy_loss", "value_loss", "clipfrac", "value_clipfrac"):
        assert stats[key] == pytest.approx(trl_stats[key].item(), abs=1e-5), key
    assert loss.item() == pytest.approx(total.item() - 0.3 * stats["entropy"], abs=1e-5)


def test_step_updates_kl_controller_like_trl(tiny_tok):
    learner = _learner(tiny_tok, init_kl_coef=0.2, target=0.5, horizon=100.0)
    rollout = _rollout([1.0, 0.0, 0.5, -1.0])
    with torch.no_grad():
        lp, _ = _trl_forward(learner.agent.model)
        ref, _ = _trl_forward(learner.ref_model.model)
    mean_kl = float(((lp - ref) * rollout.response_mask).sum(-1).mean())
    expected = trl.AdaptiveKLController(0.2, 0.5, 100.0)
    expected.update(mean_kl, 4)
    stats = learner.step(rollout, generator=torch.Generator().manual_seed(0))
    assert stats["kl"] == pytest.approx(mean_kl, abs=1e-5)
    assert stats["kl_coef"] == pytest.approx(0.2)
    assert learner.kl_ctl.value == pytest.approx(expected.value, rel=1e-5)


def test_rejects_wrong_batch_and_shared_reference(tiny_tok):
    learner = _learner(tiny_tok)
    query, qm = pad_sequences(QUERIES[:2], 0, side="left")
    resp, rm = pad_sequences(RESPONSES[:2], 0, side="right")
    with pytest.raises(ValueError, match="batch_size=4"):
        learner.step(Rollout(query, qm, resp, rm, torch.zeros(2), torch.zeros(2)))
    agent = learner.agent
    same = ReferenceModel(agent.model)  # the policy itself as "reference" (freezes it) ...
    agent.model.requires_grad_(True)  # ... then trained again: the reference would move with the policy
    with pytest.raises(ValueError, match="shares"):
        PPOLearner(agent, same, learner.config)


@pytest.mark.parametrize("accum, epochs, steps", [(1, 1, 2), (2, 1, 1), (2, 3, 3), (1, 2, 4)])
def test_optimizer_steps_follow_accumulation(tiny_tok, accum, epochs, steps):
    """batch 4, mini-batch 2: one Adam step per mini_batch_size * gradient_accumulation_steps samples."""
    learner = _learner(tiny_tok)
    learner.config = PPOConfig(batch_size=4, mini_batch_size=2, gradient_accumulation_steps=accum,
                               ppo_epochs=epochs)
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    adam_steps = {int(s["step"]) for s in learner.optimizer.state.values()}
    assert adam_steps == {steps} and stats["epochs"] == epochs


def test_early_stopping_on_policy_kl(tiny_tok):
    learner = _learner(tiny_tok, learning_rate=0.5)
    learner.config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=4, learning_rate=0.5,
                               early_stopping=True, target_kl=1e-9)
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert stats["early_stopped"] == 1.0 and stats["epochs"] < 4


def test_ratio_threshold_skips_and_counts(tiny_tok):
    learner = _learner(tiny_tok)
    learner.config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, ratio_threshold=1e-6)
    before = [p.detach().clone() for p in learner._params]
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert stats["skipped_batches"] == 2.0
    # zero loss: Adam steps with zero gradients leave the weights unchanged
    assert all(torch.equal(a, b) for a, b in zip(before, learner._params))


def _hand_kl(lp, ref, kind, logits=None, ref_logits=None):
    """Per-token KL estimators written out by hand (Δ = logp − ref_logp)."""
    d = lp - ref
    if kind == "kl":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "mse":
        return 0.5 * d * d
    if kind == "k3":
        return torch.exp(-d) - 1 + d
    p = torch.softmax(logits, -1)
    return (p * (torch.log_softmax(logits, -1) - torch.log_softmax(ref_logits, -1))).sum(-1)


@pytest.mark.parametrize("kind", ["kl", "abs", "mse", "k3", "full"])
def test_logged_kl_and_controller_use_the_reward_estimator(tiny_tok, kind):
    """`kl` and the adaptive controller read the estimator that shapes the reward, not always k1."""
    learner = _learner(tiny_tok, kl_penalty=kind, init_kl_coef=0.2, target=0.05, horizon=20.0)
    rollout = _rollout([1.0, 0.0, 0.5, -1.0])
    mask = rollout.response_mask
    a, r = rollout.query, rollout.response
    with torch.no_grad():
        old = learner.agent.evaluate(a, rollout.query_mask, r, mask, return_logits=True)
        ref = learner.ref_model.evaluate(a, rollout.query_mask, r, mask, return_logits=True)
    per_token = _hand_kl(old.logprobs, ref.logprobs, kind, old.logits, ref.logits)
    expected_kl = float((per_token * mask).sum(-1).mean())
    expected_k1 = float(((old.logprobs - ref.logprobs) * mask).sum(-1).mean())
    expected = trl.AdaptiveKLController(0.2, 0.05, 20.0)
    expected.update(expected_kl, 4)
    stats = learner.step(rollout, generator=torch.Generator().manual_seed(0))
    assert stats["kl"] == pytest.approx(expected_kl, abs=1e-5)
    assert stats["kl_k1"] == pytest.approx(expected_k1, abs=1e-5)
    assert stats["non_score_reward"] == pytest.approx(-0.2 * expected_kl, abs=1e-5)
    assert learner.kl_ctl.value == pytest.approx(expected.value, rel=1e-6)


@pytest.mark.parametrize("kind", ["kl", "abs", "k3", "full"])
def test_eval_kl_uses_the_run_estimator(tiny_tok, kind):
    """`cory eval`'s kl sums the same estimator as the run's training `kl`."""
    from trainers.evaluation.episodes import sequence_kl

    learner = _learner(tiny_tok)
    rollout = _rollout([0.0, 0.0, 0.0, 0.0])
    args = (rollout.query, rollout.query_mask, rollout.response, rollout.response_mask)
    with torch.no_grad():
        old = learner.agent.evaluate(*args, return_logits=True)
        ref = learner.ref_model.evaluate(*args, return_logits=True)
    hand = (_hand_kl(old.logprobs, ref.logprobs, kind, old.logits, ref.logits) * rollout.response_mask).sum(-1)
    torch.testing.assert_close(sequence_kl(learner.agent, learner.ref_model, rollout, kind), hand, atol=1e-5, rtol=0)


def test_one_token_mini_batches_keep_the_logged_statistics_finite(tiny_tok):
    """A mini-batch of one 1-token response has no variance; the logged per-update means skip it
    instead of turning returns_var / values_var into NaN for the whole iteration."""
    import math

    learner = _learner(tiny_tok)
    learner.config = PPOConfig(batch_size=4, mini_batch_size=1, ppo_epochs=1)  # row 1 has a 1-token response
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert all(math.isfinite(v) for v in stats.values()), {k: v for k, v in stats.items() if not math.isfinite(v)}


def _wide_rollout(scores):
    """4 rows, responses up to 6 tokens wide (T = 6 != B = 4, so per-row and per-column means differ)."""
    query, query_mask = pad_sequences(QUERIES, 0, side="left")
    response, response_mask = pad_sequences([[20, 21, 22, 23, 24, 25], [24], [25, 26], [27, 28, 29]], 0,
                                            side="right")
    scores = torch.tensor(scores)
    return Rollout(query, query_mask, response, response_mask, scores, scores.clone())


def test_logged_response_length_and_non_score_reward_are_means_over_rows(tiny_tok):
    learner = _learner(tiny_tok, init_kl_coef=0.3, adap_kl_ctrl=False)
    stats = learner.step(_wide_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert stats["response_len"] == pytest.approx((6 + 1 + 2 + 3) / 4)
    # non_score_reward = −β · (token sum of the penalised KL), averaged over rows = −β · kl
    assert stats["non_score_reward"] == pytest.approx(-0.3 * stats["kl"], rel=1e-5)
    assert stats["kl"] != 0.0


def test_early_stopping_threshold_is_strictly_above_one_and_a_half_target_kl(tiny_tok):
    learner = _learner(tiny_tok, early_stopping=True, target_kl=2.0)
    stop = learner._stop_after_epoch()
    assert not stop({"policy_kl": 3.0})  # 1.5 · 2 = 3: not above (TRL: policykl > 1.5 · target_kl)
    assert stop({"policy_kl": 3.001}) and stop({"policy_kl": 4.0})
    assert _learner(tiny_tok, early_stopping=False, target_kl=2.0)._stop_after_epoch() is None


def test_early_stopping_off_runs_every_epoch(tiny_tok):
    learner = _learner(tiny_tok, learning_rate=0.5)
    learner.config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=3, learning_rate=0.5,
                               early_stopping=False, target_kl=1e-9)
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert stats["early_stopped"] == 0.0 and stats["epochs"] == 3.0


def test_prepare_normalises_the_scores_with_the_running_moments(tiny_tok):
    learner = _learner(tiny_tok, use_score_scaling=True, use_score_norm=True)
    data = learner.prepare(_rollout([1.0, 3.0, 5.0, 7.0]))
    # fresh moments + [1, 3, 5, 7]: mean 4, population variance 5, count 4 -> std sqrt(5 · 4 / 3); (s - 4) / std
    std = math.sqrt(5.0 * 4 / 3)
    torch.testing.assert_close(data["scores"], (torch.tensor([1.0, 3.0, 5.0, 7.0]) - 4.0) / std)


def test_prepare_clips_the_scores(tiny_tok):
    learner = _learner(tiny_tok, use_score_scaling=False, score_clip=1.0)
    data = learner.prepare(_rollout([10.0, -10.0, 0.5, 1.0]))
    torch.testing.assert_close(data["scores"], torch.tensor([1.0, -1.0, 0.5, 1.0]))


def test_whiten_rewards_whitens_the_shaped_rewards_before_gae(tiny_tok):
    from trainers.learning import ppo_math

    learner = _learner(tiny_tok, whiten_rewards=True, use_score_scaling=False, gamma=0.9, lam=0.8)
    rollout = _rollout([1.0, -0.5, 0.25, 2.0])
    mask = rollout.response_mask
    data = learner.prepare(rollout)
    # TRL: rewards = masked_whiten(rewards, mask, shift_mean=False) before the GAE recursion
    whitened = ppo_math.masked_whiten(data["rewards"], mask, shift_mean=False)
    expected, _ = ppo_math.gae_advantages(whitened, data["values"], mask, 0.9, 0.8)
    plain, _ = ppo_math.gae_advantages(data["rewards"], data["values"], mask, 0.9, 0.8)
    torch.testing.assert_close(data["advantages"], expected)
    assert not torch.allclose(expected, plain, atol=1e-3)


def _pooled_learner(tiny_tok, **cfg):
    learner = _learner(tiny_tok, **cfg)
    return PPOLearner(learner.agent, learner.ref_model, learner.config, dist=TwoIdenticalProcesses())


def test_data_parallel_whitening_pools_every_process_tokens(tiny_tok):
    rollout = _rollout([1.0, -0.5, 0.25, 2.0])
    local = _learner(tiny_tok, use_score_scaling=False).prepare(rollout)
    pooled = _pooled_learner(tiny_tok, use_score_scaling=False).prepare(rollout)
    # n real tokens per process; the same advantages twice: the pooled unbiased variance is S / (2n - 1) · 2 against
    # S / (n - 1) locally, so the whitened advantages grow by sqrt((2n - 1) / (2n - 2))
    n = int(rollout.response_mask.sum())
    factor = math.sqrt((2 * n - 1) / (2 * n - 2))
    torch.testing.assert_close(pooled["advantages"], local["advantages"] * factor, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(pooled["returns"], local["returns"])
    # the logged variances of a mini-batch pool too: 2S / (2n - 1) against S / (n - 1)
    _, local_stats = _learner(tiny_tok, use_score_scaling=False)._minibatch_loss(rollout, local, torch.arange(4))
    _, pooled_stats = _pooled_learner(tiny_tok, use_score_scaling=False)._minibatch_loss(rollout, pooled,
                                                                                          torch.arange(4))
    assert pooled_stats["returns_var"] == pytest.approx(local_stats["returns_var"] * (2 * n - 2) / (2 * n - 1),
                                                        rel=1e-5)


def test_a_non_finite_ppo_loss_names_the_algorithm_and_the_fix(tiny_tok):
    from trainers.learning.update import NonFiniteLossError

    learner = _learner(tiny_tok)
    rollout = _rollout([1.0, -0.5, 0.25, 2.0])
    data = learner.prepare(rollout)
    data["advantages"] = torch.full_like(data["advantages"], float("nan"))
    with pytest.raises(NonFiniteLossError, match=r"^PPO loss is not finite .*policy_loss=nan, value_loss=.*; lower "
                                                 r"learning_rate or enable max_grad_norm / score_clip; the last "
                                                 r"checkpoint is intact$"):
        learner._minibatch_loss(rollout, data, torch.arange(4))


def test_data_parallel_step_pools_score_moments_and_the_kl_controller_samples(tiny_tok):
    learner = _pooled_learner(tiny_tok, use_score_scaling=True, init_kl_coef=0.2, target=0.05, horizon=20.0)
    stats = learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
    assert learner.score_moments.count == pytest.approx(8.0)  # 4 scores on each of 2 processes
    # the controller's n_steps is the global batch: 4 rows × 2 processes
    e = max(-0.2, min(0.2, stats["kl"] / 0.05 - 1))
    assert learner.kl_ctl.value == pytest.approx(0.2 * (1 + e * 8 / 20.0), rel=1e-6)
    assert learner.dist.synced == 1  # the gradients are averaged before the one optimiser step


def test_the_mini_batch_order_comes_from_the_step_generator_only(tiny_tok):
    def trained(global_seed):
        learner = _learner(tiny_tok, max_grad_norm=0.5)
        learner.config = PPOConfig(batch_size=4, mini_batch_size=1, ppo_epochs=1, max_grad_norm=0.5,
                                   learning_rate=0.05)
        torch.manual_seed(global_seed)
        learner.step(_rollout([1.0, -0.5, 0.25, 2.0]), generator=torch.Generator().manual_seed(0))
        return [p.detach().clone() for p in learner._params]

    first, second = trained(1), trained(2)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
