"""SamplingConfig validation and one sampling step (processor order, action mask, raw-policy logprobs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.sampling import SamplingConfig, action_mask_tensor, sample_step


@pytest.mark.parametrize(
    "kwargs, match",
    [({"temperature": 0.0}, "temperature"), ({"top_k": -1}, "top_k"), ({"top_p": 0.0}, "top_p"),
     ({"top_p": 1.5}, "top_p"), ({"repetition_penalty": 0.0}, "repetition_penalty")],
)
def test_sampling_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)


def test_defaults_are_plain_sampling_with_no_processors():
    cfg = SamplingConfig()
    assert cfg.is_plain and cfg.top_k == 0
    assert len(cfg.penalty_processors()) == 0 and len(cfg.warpers()) == 0
    names = [type(p).__name__ for p in SamplingConfig(temperature=0.5, top_k=3, top_p=0.9).warpers()]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]


def run(cfg, logits, allowed=None, context=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    context = torch.zeros(logits.shape[0], 1, dtype=torch.long) if context is None else context
    return sample_step(logits, context, allowed, cfg.penalty_processors(), cfg.warpers(), gen)


def test_top_k_one_is_greedy_and_logprob_is_raw():
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]]).repeat(50, 1)
    tokens, logprobs = run(SamplingConfig(top_k=1, temperature=0.3), logits)
    assert (tokens == 1).all()
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, -1)[:, 1])


def test_action_mask_bans_tokens_before_warpers():
    logits = torch.tensor([[5.0, 4.0, 0.0, -3.0]]).repeat(200, 1)
    allowed = torch.tensor([[False, True, True, True]])
    tokens, _ = run(SamplingConfig(top_k=1), logits, allowed)
    assert (tokens == 1).all()  # top-1 of the allowed tokens, not the banned argmax


def test_repetition_penalty_lowers_context_tokens():
    logits = torch.tensor([[1.0, 1.0]]).repeat(400, 1)
    context = torch.zeros(400, 3, dtype=torch.long)  # token 0 already seen
    tokens, _ = run(SamplingConfig(repetition_penalty=10.0), logits, context=context)
    assert (tokens == 1).float().mean() > 0.6


def test_all_banned_row_raises():
    with pytest.raises(ValueError, match="bans every token"):
        run(SamplingConfig(), torch.zeros(2, 3), torch.tensor([[True, False, False], [False, False, False]]))


def test_action_mask_tensor_reads_broadcast_views():
    ones = np.broadcast_to(np.ones((1, 5), np.int8), (4, 5))
    assert action_mask_tensor(ones, torch.device("cpu")) is None
    part = np.broadcast_to(np.array([[1, 0, 1, 1, 1]], np.int8), (4, 5))
    t = action_mask_tensor(part, torch.device("cpu"))
    assert t.shape == (1, 5) and t.dtype == torch.bool and not t[0, 1]


def test_penalty_context_replaces_padding_by_a_real_token_of_the_row():
    from agents.sampling import penalty_context

    ids = np.array([[0, 0, 7, 8], [0, 5, 0, 6]])
    mask = np.array([[0, 0, 1, 1], [0, 1, 0, 1]])
    assert penalty_context(ids, mask).tolist() == [[7, 7, 7, 8], [5, 5, 5, 6]]


def test_repetition_penalty_reads_only_the_real_tokens_of_the_window(tiny_tok, tiny_model):
    """The left-padded window's pad (= EOS) counted as already seen, lowering P(EOS) at the first
    step (SmolLM2, "The end.": 0.042 vs generate's 0.250). The penalised scores must be those of the prompt alone."""
    from transformers import RepetitionPenaltyLogitsProcessor

    from agents import LLMAgent
    from cory_env import BatchedCORYEnv, EnvConfig

    agent = LLMAgent(tiny_model, tiny_tok, sampling=SamplingConfig(repetition_penalty=1.1))
    seen = []

    sampler = agent._sampler_for(agent.sampling)

    class Recorder(type(sampler._penalties)):  # a LogitsProcessorList that keeps what it returned
        def __call__(self, context, scores):
            seen.append(super().__call__(context, scores).clone())
            return seen[-1]

    sampler._penalties = Recorder(sampler._penalties)
    env = BatchedCORYEnv(EnvConfig(context_len=32, min_new_tokens=1, max_new_tokens=1), tiny_tok, batch_size=1,
                         seating="ppo")
    obs, _ = env.reset(seed=0, options={"queries": ["The end."]})
    assert obs["attention_mask"][0, 0] == 0 and obs["input_ids"][0, 0] == tiny_tok.eos_token_id  # padded with EOS
    agent.act_batch(obs, generator=torch.Generator().manual_seed(0))
    prompt = torch.tensor([tiny_tok.encode("The end.", add_special_tokens=False)])
    with torch.no_grad():
        logits = tiny_model(input_ids=prompt).logits[:, -1].float()
    want = RepetitionPenaltyLogitsProcessor(penalty=1.1)(prompt, logits)
    torch.testing.assert_close(seen[0], want, rtol=1e-4, atol=1e-5)
    eos = tiny_tok.eos_token_id
    assert seen[0][0, eos] == pytest.approx(float(logits[0, eos]), abs=1e-5)  # EOS not in the prompt: unpenalised
