"""`agents.forward`: the one implementation of the response forward, log-probabilities and entropy.

These functions run in every rollout score and every PPO/GRPO mini-batch (`LLMAgent.evaluate`,
`ReferenceModel.evaluate`), so they are tested three ways: against hand-computed values, against a naive
log-softmax written out in full (values *and* autograd gradients: a detached logsumexp keeps the values and breaks
the policy gradient), and through `LLMAgent.evaluate` on a real forward pass.
"""

from __future__ import annotations

import math

import pytest
import torch

from agents import LLMAgent, ReferenceModel, SamplingConfig
from agents.forward import (
    check_response_inputs,
    entropy_from_logits,
    logprobs_from_logits,
    policy_logits,
    position_ids_from_mask,
    response_forward,
)
from tests.trainers import trl_reference as trl

TOL = dict(rtol=1e-6, atol=1e-6)


def naive_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log(exp(z) / Σ exp(z)), written out (numerically fine for the small logits used here)."""
    exp = torch.exp(logits.double())
    return torch.log(exp / exp.sum(dim=-1, keepdim=True))


def naive_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = naive_log_softmax(logits)
    return -(logp.exp() * logp).sum(dim=-1)


# ---- hand-computed values ------------------------------------------------------------------------------------------


def test_logprobs_hand_computed():
    # softmax([0, ln 3]) = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    tokens = torch.tensor([[1, 0]])
    torch.testing.assert_close(logprobs_from_logits(logits, tokens), torch.tensor([[math.log(0.75), math.log(0.25)]]))


def test_entropy_hand_computed():
    torch.testing.assert_close(entropy_from_logits(torch.zeros(1, 1, 4)), torch.tensor([[math.log(4.0)]]))
    # softmax([0, ln 3]) = [1/4, 3/4]: H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    two = torch.tensor([[[0.0, math.log(3.0)]]])
    torch.testing.assert_close(entropy_from_logits(two), torch.tensor([[-(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]]))
    # a one-hot distribution has no entropy
    assert float(entropy_from_logits(torch.tensor([[[0.0, -1e4, -1e4]]]))) == pytest.approx(0.0, abs=1e-6)


def test_banned_tokens_have_probability_zero_and_no_entropy():
    # two allowed tokens of four, equally likely: log 2; banned entries (lowest finite value or -inf) give 0 and a
    # finite, zero gradient
    for banned in (torch.finfo(torch.float32).min, -math.inf):
        logits = torch.tensor([[[0.0, 0.0, banned, banned]]], requires_grad=True)
        entropy = entropy_from_logits(logits)
        torch.testing.assert_close(entropy.detach(), torch.tensor([[math.log(2.0)]]))
        entropy.sum().backward()
        assert torch.isfinite(logits.grad).all() and logits.grad[..., 2:].abs().max() == 0
        torch.testing.assert_close(logprobs_from_logits(logits.detach(), torch.tensor([[1]])),
                                   torch.tensor([[math.log(0.5)]]))


def test_policy_logits_hand_values():
    logits = torch.tensor([[2.0, 0.0, -2.0, 1.0]])
    allowed = torch.tensor([True, True, False, True])
    out = policy_logits(logits, temperature=0.5, allowed=allowed)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0, [0, 1, 3]], torch.tensor([4.0, 0.0, 2.0]))
    assert out[0, 2] == torch.finfo(torch.float32).min
    z = math.exp(4) + 1 + math.exp(2)
    probs = torch.tensor([math.exp(4) / z, 1 / z, 0.0, math.exp(2) / z])
    torch.testing.assert_close(torch.softmax(out, -1)[0], probs)
    hand = -sum(float(p) * math.log(float(p)) for p in probs if p > 0)
    torch.testing.assert_close(entropy_from_logits(out), torch.tensor([hand]))
    torch.testing.assert_close(logprobs_from_logits(out[:, None], torch.tensor([[3]])), torch.log(probs[3]).view(1, 1))


def test_policy_logits_default_temperature_is_one_and_two_halves():
    raw = torch.tensor([[2.0, -4.0, 0.5]], dtype=torch.float16)
    out = policy_logits(raw)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[2.0, -4.0, 0.5]]))  # T = 1: unchanged
    torch.testing.assert_close(policy_logits(raw, temperature=2.0), torch.tensor([[1.0, -2.0, 0.25]]))


def test_position_ids_from_mask_hand_values():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert position_ids_from_mask(mask).tolist() == [[1, 1, 0, 1, 2], [0, 1, 2, 3, 1]]


# ---- naive log-softmax: values and gradients -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logprobs_match_a_naive_log_softmax_in_fp32(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(3, 5, 17, generator=gen)).to(dtype)
    tokens = torch.randint(0, 17, (3, 5), generator=gen)
    ours = logprobs_from_logits(logits, tokens)
    assert ours.shape == (3, 5) and ours.dtype == torch.float32  # always fp32, whatever the model dtype
    naive = naive_log_softmax(logits.float()).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours, naive.float(), **TOL)
    torch.testing.assert_close(ours, trl.logprobs_from_logits(logits.float(), tokens), **TOL)


def test_entropy_matches_a_naive_form_and_trl():
    logits = 2 * torch.randn(4, 6, 13, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(entropy_from_logits(logits), naive_entropy(logits).float(), **TOL)
    torch.testing.assert_close(entropy_from_logits(logits), trl.entropy_from_logits(logits), **TOL)


def test_logprob_gradient_matches_a_naive_log_softmax():
    """d/dz of Σ log p(token): 1[v = token] − softmax(z)_v. A detached logsumexp would leave only the first term."""
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 3, 7, generator=gen, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 3), generator=gen)
    weights = torch.rand(2, 3, generator=gen)  # an arbitrary upstream gradient (like an advantage per token)
    (ours,) = torch.autograd.grad((logprobs_from_logits(logits, tokens) * weights).sum(), logits)
    naive = naive_log_softmax(logits).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    (expected,) = torch.autograd.grad((naive * weights.double()).sum(), logits)
    torch.testing.assert_close(ours, expected, **TOL)
    by_hand = weights.unsqueeze(-1) * (torch.nn.functional.one_hot(tokens, 7) - torch.softmax(logits.detach(), -1))
    torch.testing.assert_close(ours, by_hand, **TOL)


def test_entropy_gradient_matches_a_naive_form():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 7, generator=gen, requires_grad=True)
    (ours,) = torch.autograd.grad(entropy_from_logits(logits).sum(), logits)
    (expected,) = torch.autograd.grad(naive_entropy(logits).sum(), logits)
    torch.testing.assert_close(ours, expected, **TOL)
    assert ours.abs().max() > 1e-3  # the entropy bonus has a gradient to give


def test_gradient_through_masked_tempered_logits_matches_a_naive_log_softmax():
    raw = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    allowed = torch.tensor([True, False, True, True, False, True])
    tokens = torch.tensor([[0], [2], [5]])
    ours = logprobs_from_logits(policy_logits(raw, temperature=0.7, allowed=allowed)[:, None], tokens).sum()
    (grad_ours,) = torch.autograd.grad(ours, raw)
    naive = naive_log_softmax((raw / 0.7)[:, allowed])  # the allowed columns only
    index = torch.tensor([[0], [1], [3]])  # positions of tokens 0, 2, 5 among the allowed columns
    (grad_naive,) = torch.autograd.grad(naive.gather(-1, index).sum(), raw)
    torch.testing.assert_close(grad_ours, grad_naive.float())
    assert grad_ours[:, ~allowed].abs().max() == 0


def test_logprobs_reject_bad_input():
    with pytest.raises(TypeError, match="int64"):
        logprobs_from_logits(torch.zeros(1, 2, 3), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="does not fit"):
        logprobs_from_logits(torch.zeros(1, 2, 3), torch.zeros(1, 3, dtype=torch.long))


# ---- through the agent: what the learners read ---------------------------------------------------------------------


def _batch():
    query = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    query_mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    response = torch.tensor([[11, 12, 13], [14, 15, 0]])
    response_mask = torch.tensor([[True, True, True], [True, True, False]])
    return query, query_mask, response, response_mask


def _naive_scores(model, row_ids: list[int], n_response: int, temperature: float, allowed: torch.Tensor | None):
    """Log-probabilities and entropies of the last `n_response` tokens of one unpadded row, from full logits."""
    logits = model(torch.tensor([row_ids])).logits[0, -n_response - 1:-1].double() / temperature
    if allowed is not None:
        logits = logits[:, allowed]
        index = torch.cumsum(allowed.long(), 0) - 1  # token id -> column among the allowed ones
        tokens = index[torch.tensor(row_ids[-n_response:])]
    else:
        tokens = torch.tensor(row_ids[-n_response:])
    logp = naive_log_softmax(logits)
    return logp.gather(-1, tokens[:, None])[:, 0], -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature, masked", [(1.0, False), (0.6, True)])
def test_agent_evaluate_equals_a_naive_computation(tiny_model, tiny_tok, temperature, masked):
    """`LLMAgent.evaluate` (what PPO and GRPO differentiate) gives the naive log-softmax's log-probabilities,
    entropies and parameter gradients; `ReferenceModel.evaluate` the same log-probabilities."""
    torch.manual_seed(0)
    query, query_mask, response, response_mask = _batch()
    V = len(tiny_tok)
    allowed = (torch.arange(V) % 3 != 1) | (torch.arange(V) >= 11) if masked else None
    agent = LLMAgent(tiny_model, tiny_tok, sampling=SamplingConfig(temperature=temperature), value_head_dropout=0.0)
    agent.eval()
    out = agent.evaluate(query, query_mask, response, response_mask, allowed=allowed)
    weights = torch.tensor([[0.3, -1.2, 0.7], [1.1, 0.4, 0.0]])
    loss = (out.logprobs * weights * response_mask).sum() - 0.5 * (out.entropy * response_mask).sum()
    ours = torch.autograd.grad(loss, list(tiny_model.parameters()))
    naive_loss = 0.0
    for b in range(2):
        ids = query[b][query_mask[b]].tolist() + response[b][response_mask[b]].tolist()
        n = int(response_mask[b].sum())
        logp, entropy = _naive_scores(tiny_model, ids, n, temperature, allowed)
        torch.testing.assert_close(out.logprobs[b, :n], logp.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.entropy[b, :n], entropy.float(), rtol=1e-5, atol=1e-5)
        naive_loss = naive_loss + (logp * weights[b, :n].double()).sum() - 0.5 * entropy.sum()
    expected = torch.autograd.grad(naive_loss, list(tiny_model.parameters()))
    for g_ours, g_naive in zip(ours, expected):
        torch.testing.assert_close(g_ours, g_naive.float(), rtol=1e-4, atol=1e-6)
    ref = ReferenceModel(tiny_model).evaluate(query, query_mask, response, response_mask, temperature=temperature,
                                              allowed=allowed)
    torch.testing.assert_close(ref.logprobs[response_mask], out.logprobs.detach()[response_mask])


def test_response_forward_keeps_the_positions_that_predict_the_response(tiny_model):
    query, query_mask, response, response_mask = _batch()
    out = response_forward(tiny_model, query, query_mask, response, response_mask, output_hidden=True)
    assert out.logits.shape == (2, 3, tiny_model.config.vocab_size) and out.hidden.shape[:2] == (2, 3)
    full = tiny_model(torch.tensor([[7, 8, 9, 10, 14, 15]])).logits[0]
    torch.testing.assert_close(out.logits[1, :2], full[3:5], rtol=1e-5, atol=1e-5)


class _RecordingModel(torch.nn.Module):
    """The tiny model, recording the keyword arguments of every forward call."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, []

    def forward(self, **kwargs):
        self.calls.append(kwargs)
        return self.model(**kwargs)


@pytest.mark.parametrize("pad_columns", [0, 1, 2])
def test_response_forward_skips_all_padding_columns_and_computes_only_the_needed_logits(tiny_model, pad_columns):
    # query (2, 2 + pad_columns): the first `pad_columns` columns are padding in both rows; row 0 has one more
    query = torch.tensor([[0] * pad_columns + [0, 5], [0] * pad_columns + [7, 8]])
    query_mask = torch.tensor([[False] * pad_columns + [False, True], [False] * pad_columns + [True, True]])
    response, response_mask = torch.tensor([[11, 12, 13], [14, 15, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()
    spy = _RecordingModel(tiny_model)
    out = response_forward(spy, query, query_mask, response, response_mask)
    (call,) = spy.calls
    assert call["input_ids"].shape == (2, 2 + 3)  # the all-padding columns never reach the model
    # exactly the T positions Q - 1 + t that predict response token t, as an index tensor (one output-layer product)
    assert call["logits_to_keep"].tolist() == [1, 2, 3]
    assert call["use_cache"] is False and call["output_hidden_states"] is False  # default: no hidden states
    assert out.hidden is None and out.logits.shape == (2, 3, tiny_model.config.vocab_size)
    # the same numbers as the untrimmed row alone: row 1 is [7, 8, 14, 15]
    full = tiny_model(torch.tensor([[7, 8, 14, 15]])).logits[0]
    torch.testing.assert_close(out.logits[1, :2], full[1:3], rtol=1e-5, atol=1e-5)


def test_check_response_inputs_errors_name_the_input_and_what_it_got():
    query, query_mask, response, response_mask = _batch()  # query (2, 4), response (2, 3)
    with pytest.raises(TypeError, match=r"^query must be an int64 tensor of shape \(B, length\), got <class 'list'> \(\)$"):
        check_response_inputs(query.tolist(), query_mask, response, response_mask)
    with pytest.raises(TypeError, match=r"^response must be an int64 tensor .*, got torch\.float32 \(2, 3\)$"):
        check_response_inputs(query, query_mask, response.float(), response_mask)
    with pytest.raises(TypeError, match=r"^query must be .*, got torch\.int64 \(4,\)$"):
        check_response_inputs(query[0], query_mask, response, response_mask)
    with pytest.raises(ValueError, match=r"^response_mask must have the shape of its ids \(2, 3\), got \(2, 2\)$"):
        check_response_inputs(query, query_mask, response, response_mask[:, :2])
    with pytest.raises(ValueError, match=r"^query_mask must have the shape of its ids \(2, 4\), got \(\)$"):
        check_response_inputs(query, None, response, response_mask)
    with pytest.raises(ValueError, match=r"^query batch 2 != response batch 1$"):
        check_response_inputs(query, query_mask, response[:1], response_mask[:1])
    with pytest.raises(ValueError, match=r"^query and response need >= 1 column, got Q=4, T=0$"):
        check_response_inputs(query, query_mask, response[:, :0], response_mask[:, :0])
    with pytest.raises(ValueError, match=r"^query and response need >= 1 column, got Q=0, T=3$"):
        check_response_inputs(query[:, :0], query_mask[:, :0], response, response_mask)
