"""Actions are scored under the distribution they were sampled from: temperature and the task's action mask.

Before this was so, the tiny-vocabulary task's action mask shaped sampling while PPO, the KL and the entropy read the
raw softmax over every token: the k1 KL of sampled tokens went negative (−17 nats measured) and rewarded moving
probability onto banned tokens, and single-agent PPO stalled at 0.5 (docs/results/learning_factors.md). The maths of
that distribution (`agents.forward.policy_logits`, its log-probabilities and gradients) is tested in test_forward.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LogitsProcessorList

from agents import LLMAgent, SamplingConfig
from agents.sampling import sample_step
from agents.tiny import tiny_causal_lm
from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.seating import Seating
from cory_env.tasks.tiny_vocab import CONTEXT_LEN, tiny_vocab_tokenizer
from trainers.config import CORYConfig, ModelConfig, PPOConfig, RunConfigs
from trainers.loop.build import build_agents
from trainers.loop.role_exchange import Bundle, RoleExchange
from trainers.rollout import rollout_from_transcript, run_episodes
from trainers.learning.experience import score_rollout


def test_sampled_frequencies_match_the_reported_logprobs():
    logits = torch.tensor([[1.5, 0.3, -0.2, 2.0, 0.0]]).repeat(20_000, 1)
    allowed = torch.tensor([[True, True, False, True, True]])
    sampling = SamplingConfig(temperature=0.6)
    gen = torch.Generator().manual_seed(0)
    tokens, logprobs = sample_step(logits, None, allowed, LogitsProcessorList(), sampling.warpers(), gen,
                                   sampling.temperature)
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    reported = torch.zeros(5).index_put_((tokens,), logprobs.exp(), accumulate=False)
    assert freq[2] == 0
    torch.testing.assert_close(freq, reported, atol=0.012, rtol=0)


def _tiny_vocab_run(temperature: float, top_k: int = 0):
    tok = tiny_vocab_tokenizer()
    model = tiny_causal_lm(tok, seed=3)
    config = CORYConfig()
    ppo = PPOConfig(batch_size=16, mini_batch_size=16, ppo_epochs=1, learning_rate=1e-3)
    agents, ref = build_agents(model, tok, ModelConfig(model="tiny", value_head_dropout=0.0),
                               SamplingConfig(temperature=temperature, top_k=top_k), num_models=2)
    configs = RunConfigs(run=config, update=ppo)
    algorithm = configs.learner_spec.build(agents, ref, configs.update)
    exchange = RoleExchange([Bundle(n, a, algorithm.learners[n]) for n, a in agents.items()], Seating.cory().names,
                            period=config.role_exchange_period)
    env = BatchedCORYEnv(EnvConfig(task="tiny_vocab", context_len=CONTEXT_LEN), tok, batch_size=16)
    return tok, agents, ref, exchange, env


class _Recording:
    """Wraps an agent and keeps the log-probabilities it reports for each sampled token."""

    def __init__(self, agent):
        self.agent, self.logprobs = agent, []

    def act_batch(self, obs, generator=None):
        tokens = self.agent.act_batch(obs, generator=generator)
        self.logprobs.append(self.agent.last_logprobs.clone())
        return tokens

    def reset_cache(self):
        self.agent.reset_cache()


def test_rollout_logprobs_equal_what_the_learner_scores_under_temperature_and_mask():
    tok, agents, ref, exchange, env = _tiny_vocab_run(temperature=0.5)
    seats = {s: _Recording(b.agent) for s, b in exchange.seats.items()}
    transcript = run_episodes(env, seats, seed=0, generator=torch.Generator().manual_seed(0))
    assert transcript.allowed is not None and not transcript.allowed.all()
    for seat, rec in seats.items():
        rollout = rollout_from_transcript(transcript, seat, tok.pad_token_id)
        old, ref_out = score_rollout(rec.agent, ref, rollout)
        sampled = torch.stack(rec.logprobs, dim=1)  # (B, steps); the env ends every answer by step 2
        mask = rollout.response_mask
        torch.testing.assert_close(old.logprobs[mask], sampled[:, : mask.shape[1]][mask], atol=1e-5, rtol=0)
        # the reference is scored the same way: at the start the policy is the reference, KL 0 token by token
        torch.testing.assert_close(old.logprobs[mask], ref_out.logprobs[mask], atol=1e-5, rtol=0)
        assert float(old.entropy[mask].max()) <= math.log(int(transcript.allowed.sum())) + 1e-5


@pytest.mark.parametrize("top_k", [0, 5])
def test_first_ppo_epoch_ratio_is_one_and_kl_zero_under_temperature_and_mask(top_k):
    tok, agents, ref, exchange, env = _tiny_vocab_run(temperature=0.5, top_k=top_k)
    transcript = run_episodes(env, {s: b.agent for s, b in exchange.seats.items()}, seed=1,
                              generator=torch.Generator().manual_seed(1))
    stats = exchange.seats["pioneer"].learner.step(rollout_from_transcript(transcript, "pioneer", tok.pad_token_id),
                                                   generator=torch.Generator().manual_seed(0))
    # one epoch, one mini-batch: the ratio is evaluated before the only optimiser step
    assert abs(stats["ratio"] - 1.0) < 1e-5 and stats["clipfrac"] == 0.0
    assert abs(stats["kl"]) < 1e-5 and np.isfinite(stats["entropy"])


def test_truncated_sampling_warns_that_the_ratio_is_approximate(caplog):
    tok = tiny_vocab_tokenizer()
    with caplog.at_level("WARNING", logger="trainers.loop.build"):
        build_agents(tiny_causal_lm(tok, seed=0), tok, ModelConfig(model="tiny"), SamplingConfig(temperature=0.5),
                     num_models=1)
    assert not caplog.records  # temperature alone is exact
    with caplog.at_level("WARNING", logger="trainers.loop.build"):
        build_agents(tiny_causal_lm(tok, seed=0), tok, ModelConfig(model="tiny"), SamplingConfig(top_k=5), num_models=1)
    assert any("approximate (slightly off-policy)" in r.getMessage() for r in caplog.records)


class _CountingAgent:
    """Counts `evaluate` calls of a wrapped agent (everything else passes through)."""

    def __init__(self, agent):
        self._agent, self.evaluations = agent, 0

    def __getattr__(self, name):
        return getattr(self._agent, name)

    def evaluate(self, *args, **kwargs):
        self.evaluations += 1
        return self._agent.evaluate(*args, **kwargs)


@pytest.mark.parametrize("top_k, reused", [(0, True), (5, False)])
def test_the_rollout_scores_replace_the_old_forward_only_when_exact(top_k, reused):
    """The learner's old log-probabilities and values come from the rollout when they equal its
    recomputation (plain sampling in fp32: 1e-5); with top-k (an approximate sampler) the recomputation stays."""
    from trainers.rollout import ActingScores

    tok, agents, ref, exchange, env = _tiny_vocab_run(temperature=0.5, top_k=top_k)
    acting: dict[str, ActingScores] = {}
    transcript = run_episodes(env, {s: b.agent for s, b in exchange.seats.items()}, seed=1,
                              generator=torch.Generator().manual_seed(1), acting=acting)
    for seat, bundle in exchange.seats.items():
        assert acting[seat].exact is reused
        rollout = rollout_from_transcript(transcript, seat, tok.pad_token_id, acting=acting[seat])
        assert (rollout.logprobs is not None) is reused and (rollout.values is not None) is reused
        mask = rollout.response_mask
        fresh = bundle.agent.evaluate(rollout.query, rollout.query_mask, rollout.response, mask,
                                      allowed=rollout.allowed)
        recorded = acting[seat]
        torch.testing.assert_close(recorded.logprobs[:, : mask.shape[1]][mask], fresh.logprobs[mask].detach(),
                                   atol=1e-5, rtol=0)
        torch.testing.assert_close(recorded.values[:, : mask.shape[1]][mask], fresh.values[mask].detach(),
                                   atol=1e-5, rtol=0)
        counting = _CountingAgent(bundle.agent)
        score_rollout(counting, ref, rollout)
        assert counting.evaluations == (0 if reused else 1)
        learner = bundle.learner
        learner.agent = counting
        stats = learner.step(rollout, generator=torch.Generator().manual_seed(0))
        assert abs(stats["ratio"] - 1.0) < 1e-5  # one epoch, one mini-batch: on-policy either way
        # reused: only the update's own forward; else also the old-score forward (after the one above)
        assert counting.evaluations == (1 if reused else 3)
        learner.agent = bundle.agent
