"""Tests for `trainers.learning.ppo_math`: hand-computed cases, naive forms, and parity with the TRL 0.11 oracle.

The log-probabilities and entropies these functions read are tested with their one implementation,
`agents.forward` (tests/agents/test_forward.py)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.forward import entropy_from_logits, logprobs_from_logits
from tests.trainers import trl_reference as trl
from tests.trainers.fake_dist import TwoIdenticalProcesses
from trainers.learning.ppo_math import (
    KL_PENALTY_KINDS,
    approx_kl,
    compute_rewards,
    gae_advantages,
    kl_penalty,
    masked_mean,
    masked_var,
    masked_whiten,
    policy_kl,
    policy_loss,
    ppo_loss,
    value_loss,
)
from trainers.learning.score_scaling import SCORE_STD_FLOOR, RunningMoments, scale_scores

TOL = dict(rtol=1e-6, atol=1e-6)


# ---- helpers -------------------------------------------------------------------------------------------------------


def right_padded_mask(lengths: list[int], t: int) -> torch.Tensor:
    return torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def random_mask(gen: torch.Generator, b: int, t: int, pattern: str) -> torch.Tensor:
    """bool (B, T) with at least one True per row (and >= 2 in total)."""
    if pattern == "full":
        return torch.ones(b, t, dtype=torch.bool)
    if pattern == "right":
        lengths = torch.randint(1, t + 1, (b,), generator=gen).tolist()
        lengths[0] = t
        return right_padded_mask(lengths, t)
    mask = torch.rand(b, t, generator=gen) < 0.6  # "holes": arbitrary pattern
    mask[:, 0] = True
    return mask


def masked_close(ours: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> None:
    zero = torch.zeros((), dtype=ours.dtype)
    torch.testing.assert_close(torch.where(mask, ours, zero), torch.where(mask, ref.to(ours.dtype), zero), **TOL)


PATTERNS = ["full", "right", "holes"]


# ---- masked statistics ---------------------------------------------------------------------------------------------


def test_masked_mean_var_hand_computed():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_var(x, mask).item() == pytest.approx(1.0)  # Bessel: 2 / (3 - 1)
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(2.0 / 3.0)
    rows = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    row_mask = torch.tensor([[True, True], [True, False]])
    torch.testing.assert_close(masked_mean(rows, row_mask, dim=-1), torch.tensor([2.0, 5.0]))


@given(seed=st.integers(0, 10_000), b=st.integers(1, 4), t=st.integers(1, 6))
@settings(max_examples=40, deadline=None)
def test_masked_stats_match_the_selected_slice(seed, b, t):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, t, generator=gen) < 0.5
    mask[0, 0] = True
    selected = x[mask]
    torch.testing.assert_close(masked_mean(x, mask), selected.mean())
    torch.testing.assert_close(masked_var(x, mask, unbiased=False), selected.var(unbiased=False))
    if selected.numel() >= 2:
        torch.testing.assert_close(masked_var(x, mask), selected.var(unbiased=True))
        whitened = masked_whiten(x, mask)
        expected = (selected - selected.mean()) / torch.sqrt(selected.var() + 1e-8)
        torch.testing.assert_close(whitened[mask], expected)
        kept = masked_whiten(x, mask, shift_mean=False)
        torch.testing.assert_close(kept[mask].mean(), selected.mean())


def test_masked_whiten_keeps_trl_epsilon():
    # mean 5e-5, unbiased var 5e-9: out = +-5e-5 / sqrt(5e-9 + 1e-8), not +-1 / sqrt(2)
    x = torch.tensor([[0.0, 1e-4]], dtype=torch.float64)
    out = masked_whiten(x, torch.ones(1, 2, dtype=torch.bool))
    expected = 5e-5 / math.sqrt(1.5e-8)
    torch.testing.assert_close(out, torch.tensor([[-expected, expected]], dtype=torch.float64))


def test_masked_stats_reject_bad_masks():
    x = torch.ones(2, 3)
    with pytest.raises(TypeError, match="torch.bool"):
        masked_mean(x, torch.ones(2, 3))
    with pytest.raises(ValueError, match="does not match"):
        masked_mean(x, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="selects no token"):
        masked_mean(x, torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="selects no token"):
        masked_mean(x, torch.tensor([[True, False, False], [False, False, False]]), dim=-1)
    one = torch.tensor([[True, False, False], [False, False, False]])
    with pytest.raises(ValueError, match="at least 2"):
        masked_var(x, one)
    assert masked_var(x, one, unbiased=False).item() == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        masked_whiten(x, one)


def test_masked_mean_error_says_whether_a_row_or_everything_is_empty():
    x = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="^mask selects no token: are all responses empty\\?$"):
        masked_mean(x, torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="^mask selects no token along dim=-1 in some row: are all responses empty\\?$"):
        masked_mean(x, torch.tensor([[True, False], [False, False]]), dim=-1)


def test_full_kl_needs_both_logits_of_the_same_shape():
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="needs logits and ref_logits"):
        kl_penalty(z, z, "full", logits=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="needs logits and ref_logits"):
        kl_penalty(z, z, "full", ref_logits=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="ref_logits shape \\(1, 2, 1\\) does not match logits shape \\(1, 2, 3\\)"):
        kl_penalty(z, z, "full", logits=torch.zeros(1, 2, 3), ref_logits=torch.zeros(1, 2, 1))  # would broadcast


def test_kl_penalty_default_kind_is_k1():
    logp, ref = torch.tensor([[-1.0, -3.0]]), torch.tensor([[-2.0, -1.0]])
    torch.testing.assert_close(kl_penalty(logp, ref), torch.tensor([[1.0, -2.0]]))


def test_masked_var_error_says_how_many_elements_it_needs():
    x = torch.tensor([[1.0, 2.0]])
    with pytest.raises(ValueError, match="^mask selects 1 element\\(s\\); the unbiased variance needs at least 2 \\(PPO"):
        masked_var(x, torch.tensor([[True, False]]))
    with pytest.raises(ValueError, match="^mask selects 0 element\\(s\\); the variance needs at least 1 \\(PPO"):
        masked_var(x, torch.tensor([[False, False]]), unbiased=False)
    assert masked_var(x, torch.tensor([[True, False]]), unbiased=False).item() == 0.0


def test_masked_stats_do_not_edit_inputs():
    x = torch.randn(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    before = x.clone()
    masked_whiten(x, mask, shift_mean=False)
    torch.testing.assert_close(x, before, rtol=0, atol=0)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_masked_stats_match_trl(pattern):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=gen)
    mask = random_mask(gen, 5, 7, pattern)
    torch.testing.assert_close(masked_mean(x, mask), trl.masked_mean(x, mask), **TOL)
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), trl.masked_mean(x, mask, axis=-1), **TOL)
    torch.testing.assert_close(masked_var(x, mask), trl.masked_var(x, mask), **TOL)
    for shift in (True, False):
        torch.testing.assert_close(masked_whiten(x, mask, shift), trl.masked_whiten(x, mask, shift), **TOL)


# ---- KL penalty ----------------------------------------------------------------------------------------------------


def test_kl_penalty_kinds_hand_computed():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    ln2 = math.log(2.0)
    expected = {"kl": ln2, "abs": ln2, "mse": 0.5 * ln2**2, "k3": (0.5 - 1.0) + ln2}
    for kind, value in expected.items():
        assert kl_penalty(logp, ref, kind).item() == pytest.approx(value, rel=1e-6), kind
    assert kl_penalty(ref, logp, "abs").item() == pytest.approx(ln2)
    assert kl_penalty(ref, logp, "kl").item() == pytest.approx(-ln2)
    # full: pi = [1/2, 1/2], pi_ref = [1/4, 3/4]
    logits = torch.log(torch.tensor([[[0.5, 0.5]]]))
    ref_logits = torch.log(torch.tensor([[[0.25, 0.75]]]))
    full = kl_penalty(logp, ref, "full", logits=logits, ref_logits=ref_logits).item()
    assert full == pytest.approx(0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0), rel=1e-6)


def test_k1_and_k3_are_unbiased_for_the_full_kl():
    # E_{v ~ pi}[k(v)] = KL(pi || pi_ref) for k1 and k3: take the expectation exactly over the vocabulary.
    gen = torch.Generator().manual_seed(3)
    logits, ref_logits = torch.randn(2, 3, 9, generator=gen, dtype=torch.float64).unbind(0)
    logits, ref_logits = logits.unsqueeze(0), ref_logits.unsqueeze(0)
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    full = kl_penalty(logp[..., 0], ref_logp[..., 0], "full", logits=logits, ref_logits=ref_logits)
    torch.testing.assert_close(full, trl.naive_full_kl(logits, ref_logits))
    for kind in ("kl", "k3"):
        expectation = (logp.exp() * kl_penalty(logp, ref_logp, kind)).sum(-1)
        torch.testing.assert_close(expectation, full)


def test_full_kl_is_finite_with_masked_vocab_and_zero_for_equal_policies():
    logits = torch.tensor([[[0.0, 1.0, -math.inf]]], requires_grad=True)
    kl = kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "full", logits=logits, ref_logits=torch.zeros(1, 1, 3))
    assert torch.isfinite(kl).all() and kl.item() > 0
    kl.sum().backward()
    assert torch.isfinite(logits.grad).all()
    same = torch.randn(2, 3, 5)
    torch.testing.assert_close(kl_penalty(torch.zeros(2, 3), torch.zeros(2, 3), "full", logits=same,
                                          ref_logits=same.clone()), torch.zeros(2, 3))


def test_kl_penalty_rejects_bad_input():
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="'kl', 'abs', 'mse', 'full', 'k3'"):
        kl_penalty(z, z, "kl2")
    with pytest.raises(ValueError, match="needs logits and ref_logits"):
        kl_penalty(z, z, "full")
    with pytest.raises(ValueError, match="does not match"):
        kl_penalty(z, torch.zeros(1, 3), "kl")
    with pytest.raises(ValueError, match="does not fit"):
        kl_penalty(z, z, "full", logits=torch.zeros(1, 3, 4), ref_logits=torch.zeros(1, 3, 4))


@pytest.mark.parametrize("kind", KL_PENALTY_KINDS)
def test_kl_penalty_matches_trl(kind):
    gen = torch.Generator().manual_seed(4)
    logits, ref_logits = (2 * torch.randn(2, 4, 6, 11, generator=gen)).unbind(0)
    labels = torch.randint(0, 11, (4, 6), generator=gen)
    logp, ref_logp = logprobs_from_logits(logits, labels), logprobs_from_logits(ref_logits, labels)
    ours = kl_penalty(logp, ref_logp, kind, logits=logits, ref_logits=ref_logits)
    if kind == "full":
        ref = trl.kl_penalty(torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1), kind)
    else:
        ref = trl.kl_penalty(logp, ref_logp, kind)
    torch.testing.assert_close(ours, ref, **TOL)


# ---- compute_rewards -----------------------------------------------------------------------------------------------


def test_compute_rewards_hand_computed():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -3.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    scores = torch.tensor([1.0, 2.0], dtype=torch.float64)
    rewards, non_score, kl = compute_rewards(scores, logp, ref, mask, kl_coef=0.1, kind="kl")
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0], [1.0, 0.0, 0.0]]))
    torch.testing.assert_close(non_score, torch.tensor([[-0.05, 0.1, 0.0], [-0.1, 0.0, 0.0]]))
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 1.1, 0.0], [1.9, 0.0, 0.0]]))
    assert rewards.dtype == torch.float32


def test_compute_rewards_rejects_bad_input():
    z = torch.zeros(2, 3)
    full = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="one score per response"):
        compute_rewards(torch.zeros(3), z, z, full, 0.1)
    with pytest.raises(ValueError, match=r"row\(s\) \[1\]"):
        compute_rewards(torch.zeros(2), z, z, torch.tensor([[True, False, False], [False] * 3]), 0.1)
    with pytest.raises(ValueError, match="kl_coef"):
        compute_rewards(torch.zeros(2), z, z, full, -0.1)
    with pytest.raises(TypeError, match="torch.bool"):
        compute_rewards(torch.zeros(2), z, z, full.long(), 0.1)


def test_compute_rewards_with_kl_coef_zero_is_the_score_alone():
    # beta = 0 is allowed (no KL penalty): rewards = score on the last real token, 0 elsewhere
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-3.0, -1.0]])
    rewards, non_score, kl = compute_rewards(torch.tensor([4.0]), logp, ref, torch.ones(1, 2, dtype=torch.bool), 0.0)
    torch.testing.assert_close(rewards, torch.tensor([[0.0, 4.0]]))
    torch.testing.assert_close(kl, torch.tensor([[2.0, -1.0]]))
    assert (non_score == 0).all()


def test_compute_rewards_errors_name_the_input_and_the_batch_size():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="does not match logprobs shape \\(2, 3\\)"):
        compute_rewards(torch.zeros(2), z, z, torch.ones(2, 4, dtype=torch.bool), 0.1)
    with pytest.raises(ValueError, match="scores shape \\(3,\\) does not match batch size 2;"):
        compute_rewards(torch.zeros(3), z, z, torch.ones(2, 3, dtype=torch.bool), 0.1)


@pytest.mark.parametrize("kind", KL_PENALTY_KINDS)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_compute_rewards_matches_trl(kind, pattern):
    gen = torch.Generator().manual_seed(5)
    b, t, v = 5, 7, 13
    logits, ref_logits = (2 * torch.randn(2, b, t, v, generator=gen)).unbind(0)
    labels = torch.randint(0, v, (b, t), generator=gen)
    logp, ref_logp = logprobs_from_logits(logits, labels), logprobs_from_logits(ref_logits, labels)
    mask = random_mask(gen, b, t, pattern)
    scores = torch.randn(b, generator=gen)
    inputs = [x.clone() for x in (scores, logp, ref_logp, mask, logits, ref_logits)]
    ours = compute_rewards(scores, logp, ref_logp, mask, 0.37, kind, logits=logits, ref_logits=ref_logits)
    if kind == "full":
        ref = trl.compute_rewards(scores, torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1), mask,
                                  0.37, kind)
    else:
        ref = trl.compute_rewards(scores, logp, ref_logp, mask, 0.37, kind)
    for our, theirs in zip(ours, ref):
        masked_close(our, theirs, mask)
        assert (our[~mask] == 0).all()
    for before, after in zip(inputs, (scores, logp, ref_logp, mask, logits, ref_logits)):
        assert torch.equal(before, after)


# ---- GAE -----------------------------------------------------------------------------------------------------------


def test_gae_matches_hand_computed():
    # gamma=0.1, lam=1, V=0: A_t = r_t + 0.1 * A_{t+1}
    rewards = torch.tensor([[4.0, 5.0, 6.0, 9.0]])
    mask = torch.tensor([[True, True, True, False]])  # last is padding
    adv, ret = gae_advantages(rewards, torch.zeros(1, 4), mask, gamma=0.1, lam=1.0, whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[4.56, 5.6, 6.0, 0.0]]))
    torch.testing.assert_close(ret, adv)


def test_gae_with_values_hand_computed():
    # gamma=1, lam=0.5, V=[0.5, 1, 1.5]: deltas [1.5, 0.5, 0.5]; A = [1.875, 0.75, 0.5]; R = A + V
    rewards = torch.tensor([[1.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 1.5]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = gae_advantages(rewards, values, mask, 1.0, 0.5, whiten=False)  # gamma, lam may be positional
    torch.testing.assert_close(adv, torch.tensor([[1.875, 0.75, 0.5]]))
    torch.testing.assert_close(ret, torch.tensor([[2.375, 1.75, 2.0]]))
    whitened, _ = gae_advantages(rewards, values, mask, gamma=1.0, lam=0.5)
    torch.testing.assert_close(whitened, masked_whiten(adv, mask))


def test_gae_matches_naive_per_row_and_whitens():
    gen = torch.Generator().manual_seed(6)
    lengths = [1, 4, 6, 3]
    mask = right_padded_mask(lengths, 6)
    rewards = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    values = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    for row, n in enumerate(lengths):
        naive = trl.naive_gae_row(rewards[row, :n].tolist(), values[row, :n].tolist(), 0.9, 0.8)
        torch.testing.assert_close(adv[row, :n], torch.tensor(naive, dtype=torch.float64))
        torch.testing.assert_close(ret[row, :n], adv[row, :n] + values[row, :n])
        assert (adv[row, n:] == 0).all() and (ret[row, n:] == 0).all()
    white, _ = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(masked_mean(white, mask), torch.zeros((), dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(masked_var(white, mask), torch.ones((), dtype=torch.float64), atol=1e-6, rtol=0)


def test_gae_defaults_are_gamma_one_and_lambda_095():
    # V = 0: A_2 = 2, A_1 = 0 + 1 * 0.95 * 2 = 1.9, A_0 = 1 + 0.95 * 1.9 = 2.805 (PPOConfig's gamma=1, lam=0.95)
    rewards = torch.tensor([[1.0, 0.0, 2.0]])
    adv, _ = gae_advantages(rewards, torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool), whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[2.805, 1.9, 2.0]]))
    # with values gamma enters the TD error too: V = 1 everywhere, gamma = 1: deltas [1, 0, 1], A_0 = 1 + 0.95 * 0.95
    adv_v, ret_v = gae_advantages(rewards, torch.ones(1, 3), torch.ones(1, 3, dtype=torch.bool), whiten=False)
    torch.testing.assert_close(adv_v, torch.tensor([[1.9025, 0.95, 1.0]]))
    torch.testing.assert_close(ret_v, adv_v + 1.0)


def test_gae_on_one_token_responses():
    # T = 1: no bootstrap value, A = r - V, R = r
    adv, ret = gae_advantages(torch.tensor([[3.0], [5.0]]), torch.tensor([[1.0], [2.0]]),
                              torch.ones(2, 1, dtype=torch.bool), whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[2.0], [3.0]]))
    torch.testing.assert_close(ret, torch.tensor([[3.0], [5.0]]))


def test_gae_rejects_mismatched_inputs_by_name():
    mask = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="values shape \\(1, 1\\) does not match rewards shape"):
        gae_advantages(torch.zeros(1, 3), torch.zeros(1, 1), mask)  # (1, 1) would broadcast silently
    with pytest.raises(ValueError, match="does not match rewards shape \\(1, 2\\)"):
        gae_advantages(torch.zeros(1, 2), torch.zeros(1, 2), mask)


def test_gae_whitens_rewards_with_the_pooled_statistics():
    # rewards 1, 2, 3 on this process and the same on another: mean 2, pooled variance 4 / 6 * 6 / 5 = 0.8;
    # whiten_rewards keeps the mean: r' = (r - 2) / sqrt(0.8) + 2. gamma = lam = 1, V = 0: A_t = sum of r'_k, k >= t
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    adv, _ = gae_advantages(rewards, torch.zeros(1, 3), mask, gamma=1.0, lam=1.0, whiten=False, whiten_rewards=True,
                            reduce_sum=_two_identical_processes)
    k = 1 / math.sqrt(0.8 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[6.0, 4.0 + k, 2.0 + k]]))


def test_whitened_rewards_of_a_row_do_not_depend_on_its_padding():
    # one row [1, 3]: mean 2, unbiased variance 2; r' = (r - 2) / sqrt(2) + 2 = [2 - 1/√2, 2 + 1/√2]
    # gamma = lam = 1, V = 0: A = [r'_1 + r'_2, r'_2] = [4, 2 + 1/√2], with or without padding columns after it
    k = 1 / math.sqrt(2.0 + 1e-8)
    expected = torch.tensor([[4.0, 2.0 + k]])
    for width in (2, 4):
        rewards = torch.zeros(1, width)
        rewards[0, :2] = torch.tensor([1.0, 3.0])
        mask = torch.arange(width)[None] < 2
        adv, _ = gae_advantages(rewards, torch.zeros(1, width), mask, gamma=1.0, lam=1.0, whiten=False,
                                whiten_rewards=True)
        torch.testing.assert_close(adv[:, :2], expected)
        assert (adv[:, 2:] == 0).all()


def test_gae_outputs_are_detached():
    values = torch.randn(2, 3, requires_grad=True)
    adv, ret = gae_advantages(torch.randn(2, 3), values, torch.ones(2, 3, dtype=torch.bool))
    assert not adv.requires_grad and not ret.requires_grad


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("whiten_rewards", [False, True])
def test_gae_matches_trl(pattern, whiten_rewards):
    gen = torch.Generator().manual_seed(7)
    mask = random_mask(gen, 6, 9, pattern)
    rewards, values = torch.randn(2, 6, 9, generator=gen).unbind(0)
    adv, ret = gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95, whiten_rewards=whiten_rewards)
    raw, _ = gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95, whiten=False, whiten_rewards=whiten_rewards)
    if whiten_rewards:  # TRL >= 0.12 sets the whitened padding back to 0 (0.11.4 did not): whiten first, then
        # 0.11.4's recursion on those rewards
        rewards = trl.masked_whiten(rewards * mask, mask.float(), shift_mean=False) * mask
    _, trl_adv, trl_ret, trl_raw = trl.compute_advantages(values, rewards, mask, 1.0, 0.95, False)
    masked_close(adv, trl_adv, mask)
    masked_close(ret, trl_ret, mask)
    masked_close(raw, trl_raw, mask)


# ---- losses --------------------------------------------------------------------------------------------------------


def test_policy_loss_hand_computed():
    # ratios 1.5, 0.5, 1.1 with advantages 1, -1, 1 and eps 0.2
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 7.0]]))
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, 1.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])
    loss, clipfrac = policy_loss(logp, old, adv, mask, cliprange=0.2)
    # per token: max(-1.5, -1.2) = -1.2; max(0.5, 0.8) = 0.8; max(-1.1, -1.1) = -1.1
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 1.1) / 3, rel=1e-6)
    assert clipfrac.item() == pytest.approx(2 / 3)


def test_value_loss_hand_computed():
    values = torch.tensor([[1.0, 0.6]])
    old = torch.tensor([[0.5, 0.5]])
    returns = torch.tensor([[2.0, 0.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, clipfrac = value_loss(values, old, returns, mask, cliprange_value=0.2)
    # token 0: clipped 0.7 -> max(1.0, 1.69) = 1.69; token 1: within range -> 0.36
    assert loss.item() == pytest.approx(0.5 * (1.69 + 0.36) / 2, rel=1e-6)
    assert clipfrac.item() == pytest.approx(0.5)


def test_policy_loss_default_clip_is_02_and_checks_every_input():
    # ratio 2, A = 1: max(-2, -clip(2, 0.8, 1.2)) = -1.2 with the default eps = 0.2, clipfrac 1
    mask1, mask2 = torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    loss, clipfrac = policy_loss(torch.full((1, 1), math.log(2.0)), torch.zeros(1, 1), torch.ones(1, 1), mask1)
    assert loss.item() == pytest.approx(-1.2) and clipfrac.item() == 1.0
    _, frac64 = policy_loss(*(torch.zeros(1, 1, dtype=torch.float64) for _ in range(3)), mask1)
    assert frac64.dtype == torch.float64  # the clip fraction has the log-probabilities' dtype
    one, two = torch.zeros(1, 1), torch.zeros(1, 2)
    with pytest.raises(ValueError, match="does not match logprobs shape \\(1, 2\\)"):
        policy_loss(two, two, two, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="old_logprobs shape \\(1, 2\\) does not match logprobs shape \\(1, 1\\)"):
        policy_loss(one, two, two, mask1)
    with pytest.raises(ValueError, match="old_logprobs shape \\(1, 1\\)"):
        policy_loss(two, one, two, mask2)
    with pytest.raises(ValueError, match="advantages shape \\(1, 1\\)"):
        policy_loss(two, two, one, mask2)


def test_value_loss_default_clip_is_02_and_errors_name_values():
    # V = 0, V_old = 1, R = 0: clipped V = 0.8 (default c = 0.2), max(0, 0.64) = 0.64, loss 0.32, clipfrac 1
    loss, clipfrac = value_loss(torch.zeros(1, 1), torch.ones(1, 1), torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool))
    assert loss.item() == pytest.approx(0.32) and clipfrac.item() == 1.0
    with pytest.raises(ValueError, match="does not match values shape"):
        value_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 3, dtype=torch.bool))
    # each of the three (B, T) inputs is checked against the others (a (1, 1) one would broadcast silently)
    one, two = torch.zeros(1, 1), torch.zeros(1, 2)
    mask1, mask2 = torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="old_values shape \\(1, 2\\) does not match values shape \\(1, 1\\)"):
        value_loss(one, two, two, mask1)
    with pytest.raises(ValueError, match="old_values shape \\(1, 1\\)"):
        value_loss(two, one, two, mask2)
    with pytest.raises(ValueError, match="returns shape \\(1, 1\\)"):
        value_loss(two, two, one, mask2)
    # the clip fraction has the values' dtype
    _, frac64 = value_loss(two.double(), two.double(), two.double(), mask2)
    assert frac64.dtype == torch.float64


def test_approx_kl_and_policy_kl_hand_computed():
    logp = torch.tensor([[-1.0, -2.0, 0.0]])
    old = torch.tensor([[-1.5, -1.0, 9.0]])
    mask = torch.tensor([[True, True, False]])
    assert approx_kl(logp, old, mask).item() == pytest.approx(0.5 * (0.25 + 1.0) / 2)
    assert policy_kl(logp, old, mask).item() == pytest.approx((-0.5 + 1.0) / 2)


def test_kl_statistics_reject_broadcastable_shapes():
    one, three = torch.zeros(1, 1), torch.zeros(1, 3)
    mask = torch.ones(1, 3, dtype=torch.bool)
    for fn in (approx_kl, policy_kl):
        with pytest.raises(ValueError, match="old_logprobs shape \\(1, 3\\) does not match logprobs shape \\(1, 1\\)"):
            fn(one, three, mask)
        with pytest.raises(ValueError, match="old_logprobs shape \\(1, 1\\) does not match logprobs shape \\(1, 3\\)"):
            fn(three, one, mask)


def test_ppo_loss_combines_and_backpropagates():
    gen = torch.Generator().manual_seed(8)
    mask = right_padded_mask([4, 2, 3], 4)
    logp = (-torch.rand(3, 4, generator=gen)).requires_grad_()
    values = torch.randn(3, 4, generator=gen).requires_grad_()
    old_logp, old_values, adv, ret = (torch.randn(3, 4, generator=gen) * 0.1 for _ in range(4))
    old_logp = logp.detach() + old_logp
    loss, stats = ppo_loss(logp, old_logp, values, old_values, adv, ret, mask, vf_coef=0.25,
                           entropy=torch.ones(3, 4))
    pg, _ = policy_loss(logp, old_logp, adv, mask)
    vf, _ = value_loss(values, old_values, ret, mask)
    torch.testing.assert_close(loss, pg + 0.25 * vf)
    assert stats["entropy"] == pytest.approx(1.0)
    assert stats["skipped"] == 0.0
    assert all(type(value) is float for value in stats.values())
    loss.backward()
    assert logp.grad is not None and values.grad is not None
    assert (logp.grad[~mask] == 0).all() and (values.grad[~mask] == 0).all()


def test_ppo_loss_skips_batch_above_ratio_threshold(caplog):
    mask = torch.ones(1, 3, dtype=torch.bool)
    logp = torch.full((1, 3), math.log(20.0), requires_grad=True)
    args = (logp, torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3), mask)
    with caplog.at_level(logging.WARNING, logger="trainers.learning.ppo_math"):
        loss, stats = ppo_loss(*args, ratio_threshold=10.0)
    assert loss.item() == 0.0 and stats["policy_loss"] == 0.0 and stats["skipped"] == 1.0
    assert stats["ratio"] == pytest.approx(20.0)
    assert "ratio_threshold" in caplog.text
    loss.backward()  # still a graph: the learner may backpropagate the zero loss
    loss_kept, stats_kept = ppo_loss(*args)  # default: never skip
    assert loss_kept.item() != 0.0 and stats_kept["skipped"] == 0.0


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("threshold", [10.0, 1.05])
def test_ppo_loss_matches_trl(pattern, threshold):
    gen = torch.Generator().manual_seed(9)
    b, t, v = 4, 6, 10
    mask = random_mask(gen, b, t, pattern)
    logits = torch.randn(b, t, v, generator=gen)
    logp = -torch.rand(b, t, generator=gen)
    old_logp = logp + 0.3 * torch.randn(b, t, generator=gen)
    values, old_values, adv, ret = torch.randn(4, b, t, generator=gen).unbind(0)
    loss, stats = ppo_loss(logp, old_logp, values, old_values, adv, ret, mask, cliprange=0.2, cliprange_value=0.2,
                           vf_coef=0.1, entropy=entropy_from_logits(logits), ratio_threshold=threshold)
    ref_loss, ref_stats = trl.loss(old_logp, old_values, logits, values, logp, mask, adv, ret, 0.2, 0.2, 0.1,
                                   ratio_threshold=threshold)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    assert set(ref_stats) <= set(stats)
    for name, value in ref_stats.items():
        assert stats[name] == pytest.approx(float(value), rel=1e-6, abs=1e-6), name
    assert stats["skipped"] == float(stats["ratio"] > threshold)


# ---- data-parallel pooling (reduce_sum), in-process --------------------------------------------------------------
# `reduce_sum` sums a tensor over processes; these fakes stand for other processes so the pooled maths is checked
# without spawning any (the DDP subprocess tests check the real all-reduce end to end).


_two_identical_processes = TwoIdenticalProcesses().sum  # another process holding exactly the same tokens


def test_pooled_whitening_hand_computed():
    x = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    mask = torch.tensor([[True, True, True, False]])
    # one process: mean 2, squared deviations 1 + 0 + 1 = 2 over n = 3 -> unbiased variance 2 / 2 = 1
    torch.testing.assert_close(masked_whiten(x, mask, reduce_sum=lambda t: t), masked_whiten(x, mask))
    # two identical processes: n = 6, squared deviations 4 -> unbiased variance 4 / 5 = 0.8 (mean still 2)
    expected = (x - 2.0) / math.sqrt(0.8 + 1e-8)
    torch.testing.assert_close(masked_whiten(x, mask, reduce_sum=_two_identical_processes), expected)
    torch.testing.assert_close(masked_whiten(x, mask, shift_mean=False, reduce_sum=_two_identical_processes),
                               expected + 2.0)


def test_pooled_whitening_counts_tokens_over_all_processes():
    x, one = torch.tensor([[5.0, 7.0]]), torch.tensor([[True, False]])
    with pytest.raises(ValueError, match="over all processes"):
        masked_whiten(x, one, reduce_sum=lambda t: t)  # 1 token in all: no unbiased variance
    # 1 token here + the same token on another process = 2 tokens, both 5: variance 0, whitened value 0
    out = masked_whiten(x, one, reduce_sum=_two_identical_processes)
    assert out[0, 0].item() == pytest.approx(0.0)


def test_pooled_gae_whitens_with_the_global_statistics():
    rewards = torch.tensor([[0.0, 3.0], [1.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    # gamma = lam = 1, V = 0: A = [[3, 3], [1, 0]]; real tokens 3, 3, 1: mean 7/3, squared deviations 8/3
    adv, _ = gae_advantages(rewards, torch.zeros(2, 2), mask, gamma=1.0, lam=1.0, reduce_sum=_two_identical_processes)
    var = (2 * 8 / 3) / 5  # pooled over 6 tokens, Bessel n / (n - 1) with n = 6
    expected = (torch.tensor([[3.0, 3.0], [1.0, 0.0]]) - 7 / 3) / math.sqrt(var + 1e-8)
    masked_close(adv, expected, mask)
    assert adv[1, 1].item() == 0.0


def test_ppo_loss_takes_the_skip_decision_on_every_process_ratio():
    mask = torch.ones(1, 2, dtype=torch.bool)
    logp = torch.zeros(1, 2)  # ratio 1 on this process's 2 tokens
    args = (logp, torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), mask)

    def other_process_has_ratio_4_on_4_tokens(t: torch.Tensor) -> torch.Tensor:
        return t + torch.tensor([16.0, 4.0]) if t.shape == (2,) else t  # (Σ ratio, n) of the other process

    # pooled mean ratio (2 + 16) / (2 + 4) = 3 > 2: every process skips, although this one's mean is 1
    loss, stats = ppo_loss(*args, ratio_threshold=2.0, reduce_sum=other_process_has_ratio_4_on_4_tokens)
    assert stats["skipped"] == 1.0 and loss.item() == 0.0
    assert stats["ratio"] == pytest.approx(1.0)  # the logged ratio stays this process's own
    _, local = ppo_loss(*args, ratio_threshold=2.0)
    assert local["skipped"] == 0.0
    # pooled mean (2 + 4) / (2 + 4) = 1 <= 2: kept
    _, kept = ppo_loss(*args, ratio_threshold=2.0, reduce_sum=lambda t: t + torch.tensor([4.0, 4.0])
                       if t.shape == (2,) else t)
    assert kept["skipped"] == 0.0


def test_ppo_loss_pooled_variances_and_nan_below_two_tokens():
    mask = torch.tensor([[True, True, False]])
    ret = torch.tensor([[1.0, 3.0, 50.0]])
    old_values = torch.tensor([[0.0, 4.0, 50.0]])
    z = torch.zeros(1, 3)
    _, stats = ppo_loss(z, z, z, old_values, z, ret, mask, reduce_sum=_two_identical_processes)
    # returns 1, 3 twice: mean 2, squared deviations 4 over n = 4 -> 4 / 3; old values 0, 4: 16 / 3
    assert stats["returns_var"] == pytest.approx(4 / 3)
    assert stats["values_var"] == pytest.approx(16 / 3)
    _, local = ppo_loss(z, z, z, old_values, z, ret, mask)
    assert local["returns_var"] == pytest.approx(2.0) and local["values_var"] == pytest.approx(8.0)
    one = torch.tensor([[True, False, False]])
    _, single = ppo_loss(z, z, z, old_values, z, ret, one, reduce_sum=lambda t: t)
    assert math.isnan(single["returns_var"]) and math.isnan(single["values_var"])
    _, single_local = ppo_loss(z, z, z, old_values, z, ret, one)
    assert math.isnan(single_local["returns_var"]) and single_local["returns_mean"] == 1.0


def _one_clipped_token(**kwargs):
    # one real token (and one padding token): ratio exp(log 1.5) = 1.5, advantage 1; value 1 from old value 0,
    # return 2
    mask = torch.tensor([[True, False]])
    logp = torch.tensor([[math.log(1.5), 7.0]])
    values = torch.tensor([[1.0, 9.0]])
    z = torch.zeros(1, 2)
    return ppo_loss(logp, z, values, z, torch.ones(1, 2), torch.full((1, 2), 2.0), mask, **kwargs)


def test_ppo_loss_defaults_clip_both_ranges_at_02_and_weigh_the_value_loss_01():
    loss, stats = _one_clipped_token()
    # policy: max(-1 · 1.5, -1 · clamp(1.5, 0.8, 1.2)) = -1.2
    # value: clipped prediction 0 + clamp(1, -0.2, 0.2) = 0.2; 0.5 · max((1 - 2)², (0.2 - 2)²) = 0.5 · 3.24 = 1.62
    assert stats["policy_loss"] == pytest.approx(-1.2)
    assert stats["value_loss"] == pytest.approx(1.62)
    assert stats["clipfrac"] == 1.0 and stats["value_clipfrac"] == 1.0
    assert loss.item() == pytest.approx(-1.2 + 0.1 * 1.62)


def test_ppo_loss_passes_its_clip_ranges_on():
    loss, stats = _one_clipped_token(cliprange=0.4, cliprange_value=0.5, vf_coef=1.0)
    # policy: clamp(1.5, 0.6, 1.4) = 1.4 -> -1.4; value: 0.5 · max(1, (0.5 - 2)²) = 0.5 · 2.25 = 1.125
    assert stats["policy_loss"] == pytest.approx(-1.4)
    assert stats["value_loss"] == pytest.approx(1.125)
    assert loss.item() == pytest.approx(-1.4 + 1.125)


def test_ppo_loss_keeps_a_mean_ratio_equal_to_the_threshold():
    mask = torch.ones(1, 2, dtype=torch.bool)
    z = torch.zeros(1, 2)
    # ratio exp(0) = 1 exactly: TRL skips only when the mean ratio is strictly above the threshold
    _, stats = ppo_loss(z, z, z, z, torch.ones(1, 2), torch.ones(1, 2), mask, ratio_threshold=1.0)
    assert stats["skipped"] == 0.0
    _, pooled = ppo_loss(z, z, z, z, torch.ones(1, 2), torch.ones(1, 2), mask, ratio_threshold=1.0,
                         reduce_sum=lambda t: t)
    assert pooled["skipped"] == 0.0


def test_ppo_loss_pooled_skip_decision_ignores_padding():
    # padding token with ratio e^7 ≈ 1097: a pooled mean over real tokens only is 1.5 <= 2, so nothing is skipped
    _, stats = _one_clipped_token(ratio_threshold=2.0, reduce_sum=lambda t: t)
    assert stats["skipped"] == 0.0 and stats["ratio"] == pytest.approx(1.5)


def test_ppo_loss_refuses_an_entropy_of_another_shape_and_a_bonus_without_entropy():
    mask = torch.ones(1, 2, dtype=torch.bool)
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="entropy shape \\(1, 1\\) does not match logprobs shape \\(1, 2\\)"):
        ppo_loss(z, z, z, z, z, z, mask, entropy=torch.zeros(1, 1))  # logged only, still checked
    with pytest.raises(ValueError, match="ent_coef > 0 needs the per-token entropy"):
        ppo_loss(z, z, z, z, z, z, mask, ent_coef=0.1)


# ---- score scaling -------------------------------------------------------------------------------------------------


def test_scale_scores_default_divides_by_the_running_std_without_centring():
    # fresh moments + [1, 3]: mean 2, running var 1 (count ~2), std = sqrt(1 * 2 / 1) = sqrt(2); default: x / std
    out = scale_scores(torch.tensor([1.0, 3.0]), RunningMoments())
    torch.testing.assert_close(out, torch.tensor([1.0, 3.0]) / math.sqrt(2.0))


def test_scale_scores_pools_the_moments_over_processes():
    # two identical processes with scores [1, 3]: n = 4, mean 2, population variance 1; Bessel n / (n - 1) = 4 / 3
    moments = RunningMoments()
    out = scale_scores(torch.tensor([1.0, 3.0]), moments, reduce_sum=_two_identical_processes)
    assert moments.count == pytest.approx(4.0) and moments.std == pytest.approx(2 / math.sqrt(3.0))
    torch.testing.assert_close(out, torch.tensor([1.0, 3.0]) / (2 / math.sqrt(3.0)))


def test_scale_scores_constant_batch_is_divided_by_the_floor_not_by_round_off(caplog):
    """Equal scores have a running std of round-off (~3e-12); TRL divides by it (+ float32 eps),
    turning 2.0 into 1.7e7. The floor is 0.1 x the running RMS (here 2): 2 / 0.2 = 10, and the log says so."""
    moments = RunningMoments()
    with caplog.at_level("WARNING", logger="trainers.learning.score_scaling"):
        out = scale_scores(torch.tensor([2.0, 2.0]), moments)
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(out, torch.full((2,), 2.0 / (0.2 + eps)))
    assert "below the floor 0.2" in caplog.text and caplog.text.count("score scaling") == 1
    normed = scale_scores(torch.tensor([2.0, 2.0]), RunningMoments(), use_score_norm=True)
    torch.testing.assert_close(normed, torch.zeros(2), atol=1e-6, rtol=0)
    caplog.clear()
    with caplog.at_level("WARNING", logger="trainers.learning.score_scaling"):  # warned once per moments
        scale_scores(torch.tensor([2.0, 2.0]), moments)
    assert caplog.text == ""
    assert SCORE_STD_FLOOR == 0.1


def test_scale_scores_floor_is_inactive_for_spread_scores():
    # [1, 3]: std sqrt(2) = 1.41 > 0.1 x RMS sqrt(4 + 1) = 0.22: TRL's division exactly
    out = scale_scores(torch.tensor([1.0, 3.0]), RunningMoments())
    torch.testing.assert_close(out, torch.tensor([1.0, 3.0]) / (math.sqrt(2.0) + torch.finfo(torch.float32).eps))


def test_constant_scores_keep_ppo_targets_in_range(tiny_tok):
    """Before the floor: a first batch of scores all 1.0 gave returns_mean 7.6e6 and value_loss 2.9e13."""
    from tests.trainers.test_ppo_learner import _learner, _rollout

    learner = _learner(tiny_tok, use_score_scaling=True)
    for _ in range(3):
        stats = learner.step(_rollout([1.0, 1.0, 1.0, 1.0]), generator=torch.Generator().manual_seed(0))
        assert abs(stats["returns_mean"]) < 20 and stats["value_loss"] < 200 and stats["score"] == 1.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_scale_scores_keeps_the_scores_dtype_through_the_clip(dtype):
    out = scale_scores(torch.tensor([1.0, -5.0], dtype=dtype), None, score_clip=2.0)
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.tensor([1.0, -2.0], dtype=dtype))


def test_scale_scores_keeps_float64_precision():
    # float64 scores [1, 2, 4]: mean 7/3, population variance 14/9, count 3 -> std sqrt(14/9 · 3/2) = sqrt(7/3);
    # the running moments are python floats: computed in float64 throughout, no float32 rounding (~1e-8)
    scores = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    eps = torch.finfo(torch.float64).eps
    out = scale_scores(scores, RunningMoments(), use_score_norm=True)
    expected = (scores - 7 / 3) / (math.sqrt(7 / 3) + eps)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_running_moments_hand_computed_and_checkpointable():
    moments = RunningMoments()
    batch_mean, batch_std = moments.update(torch.tensor([1.0, 3.0]))
    assert (batch_mean, batch_std) == pytest.approx((2.0, math.sqrt(2.0)))
    assert (moments.mean, moments.std, moments.var) == pytest.approx((2.0, math.sqrt(2.0), 1.0))
    state = moments.state_dict()
    assert all(type(v) is float for v in state.values())
    restored = RunningMoments()
    restored.load_state_dict(state)
    assert restored == moments
    with pytest.raises(ValueError, match="state keys"):
        restored.load_state_dict({"mean": 0.0})


def test_running_moments_equal_statistics_of_all_scores():
    gen = torch.Generator().manual_seed(10)
    batches = [torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 1 for n in (5, 1, 8, 2)]
    moments = RunningMoments()
    for batch in batches:
        moments.update(batch)
    everything = torch.cat(batches)
    assert moments.mean == pytest.approx(everything.mean().item(), rel=1e-12)
    assert moments.std == pytest.approx(everything.std().item(), rel=1e-12)
    assert moments.count == pytest.approx(everything.numel())


def test_running_moments_rejects_empty_and_single_first_batch():
    with pytest.raises(ValueError, match="empty"):
        RunningMoments().update(torch.zeros(0))
    with pytest.raises(ValueError, match="at least 2"):
        RunningMoments().update(torch.zeros(1))


def test_scale_scores_hand_computed():
    scores = torch.tensor([1.0, 3.0])
    eps = torch.finfo(torch.float32).eps
    scaled = scale_scores(scores, RunningMoments(), use_score_norm=False)
    torch.testing.assert_close(scaled, scores / (math.sqrt(2.0) + eps))
    normed = scale_scores(scores, RunningMoments(), use_score_norm=True)
    torch.testing.assert_close(normed, torch.tensor([-1.0, 1.0]) / (math.sqrt(2.0) + eps))
    clipped = scale_scores(torch.tensor([-5.0, 0.5, 5.0]), None, use_score_norm=True, score_clip=1.0)
    torch.testing.assert_close(clipped, torch.tensor([-1.0, 0.5, 1.0]))
    torch.testing.assert_close(scores, torch.tensor([1.0, 3.0]))  # not edited
    untouched = RunningMoments()
    torch.testing.assert_close(scale_scores(scores, untouched, use_score_scaling=False), scores)
    assert untouched == RunningMoments()
    with pytest.raises(TypeError, match="float"):
        scale_scores(torch.tensor([1, 2]), None)
    with pytest.raises(ValueError, match="score_clip"):
        scale_scores(scores, None, score_clip=0.0)


@pytest.mark.parametrize("use_score_norm", [False, True])
@pytest.mark.parametrize("score_clip", [None, 0.8])
def test_scale_scores_matches_trl_over_steps(use_score_norm, score_clip):
    gen = torch.Generator().manual_seed(11)
    ours, theirs = RunningMoments(), trl.RunningMoments()
    for _ in range(5):
        scores = torch.randn(6, generator=gen) * 2 + 0.5
        a = scale_scores(scores, ours, use_score_norm=use_score_norm, score_clip=score_clip)
        b = trl.step_score_block(scores.clone(), theirs, True, use_score_norm, score_clip)
        torch.testing.assert_close(a, b, **TOL)
        assert ours.mean == pytest.approx(theirs.mean, rel=1e-6, abs=1e-6)
        assert ours.std == pytest.approx(theirs.std, rel=1e-6)


# ---- padding never reaches an overflowing computation --------------------------------------------------------------


def _losses_and_grads(garbage: float):
    """PPO and GRPO losses, the k3 KL and the shaped rewards on a batch whose padded positions hold `garbage`
    log-probabilities (0 = clean); returns the values and the gradient of the policy log-probabilities."""
    from trainers.learning.grpo import grpo_loss

    mask = torch.tensor([[True, True, False], [True, False, False]])
    clean = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    pad = torch.where(mask, torch.zeros(()), torch.tensor(garbage))
    logprobs = (clean + pad).requires_grad_(True)
    old = clean - 0.1 * mask
    ref = clean - 0.2 * mask
    adv = torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.0, 0.0]])
    values = torch.zeros(2, 3, requires_grad=True)
    ppo, _ = ppo_loss(logprobs, old, values, torch.zeros(2, 3), adv, adv, mask, ratio_threshold=10.0)
    grpo, _ = grpo_loss(logprobs, old, ref, torch.tensor([1.0, -1.0]), mask, kl_coef=0.1)
    k3 = kl_penalty(logprobs, ref, "k3", mask=mask)
    rewards, _, _ = compute_rewards(torch.ones(2), logprobs.detach(), ref, mask, 0.1, "k3")
    (ppo + grpo + k3.sum()).backward()
    return [ppo.detach(), grpo.detach(), k3.detach(), rewards, masked_mean(k3.detach(), mask)], logprobs.grad


@pytest.mark.parametrize("garbage", [-200.0, 200.0, float("inf")])
def test_padded_positions_cannot_overflow_a_loss_or_its_gradient(garbage):
    """Padded log-probabilities of -200 made k3's exp(200) overflow (inf · 0 = NaN in the sum and the gradient),
    +200 the PPO ratio's; now padding is set to 0 before any exp."""
    want, want_grad = _losses_and_grads(0.0)
    got, got_grad = _losses_and_grads(garbage)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert torch.isfinite(got_grad).all()
    torch.testing.assert_close(got_grad, want_grad)
    assert (got[2][~torch.tensor([[True, True, False], [True, False, False]])] == 0).all()
