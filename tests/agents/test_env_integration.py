"""The agent on the real CORY env (tiny tokenizer/model): KV cache over the env's windows, logprob alignment."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from agents import LLMAgent, ReferenceModel
from agents.forward import position_ids_from_mask
from cory_env import BatchedCORYEnv, raw_env


def pad(rows, pad_id, side):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, sl] = torch.tensor(r, dtype=torch.long)
        mask[i, sl] = True
    return ids, mask


def test_batched_env_rollout_matches_full_forward_and_evaluate(tiny_tok, tiny_model):
    env = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=3, min_new_tokens=2, max_new_tokens=6, context_len=48)
    agent = LLMAgent(tiny_model, tiny_tok, vocab_size=env.vocab_size, seed=0)
    ref = ReferenceModel(copy.deepcopy(tiny_model))
    obs, _ = env.reset(seed=5)
    step_lp = {"pioneer": [[] for _ in range(3)], "observer": [[] for _ in range(3)]}
    while not env.done:
        seat, active = env.agent_selection, env.active
        ids, mask = np.array(obs["input_ids"]), np.array(obs["attention_mask"])
        actions = agent.act_batch(obs)
        with torch.no_grad():
            ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
            full = tiny_model(input_ids=ids_t, attention_mask=mask_t,
                              position_ids=position_ids_from_mask(mask_t)).logits[:, -1]
        rows = torch.from_numpy(active)
        torch.testing.assert_close(agent.last_logits[rows], full[rows], atol=1e-4, rtol=0)
        for i in np.flatnonzero(active):
            step_lp[seat][i].append(float(agent.last_logprobs[i]))
        obs, *_ = env.step(actions)
    tr = env.transcript()
    for seat in ("pioneer", "observer"):
        query, qmask = pad(tr.seats[seat].prompt_ids, tiny_tok.pad_token_id, "left")
        response, rmask = pad(tr.seats[seat].response_ids, tiny_tok.pad_token_id, "right")
        with torch.no_grad():
            out = agent.evaluate(query, qmask, response, rmask)
        sampled = torch.zeros_like(out.logprobs)
        for i, lps in enumerate(step_lp[seat]):
            sampled[i, :len(lps)] = torch.tensor(lps)
        torch.testing.assert_close(out.logprobs[rmask], sampled[rmask], atol=1e-5, rtol=0)
        kl = (out.logprobs - ref.logprobs(query, qmask, response, rmask))[rmask].mean()
        assert abs(kl.item()) < 1e-5


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_aec_episode_prefills_once_per_seat(tiny_tok, tiny_model):
    env = raw_env(tokenizer=tiny_tok, min_new_tokens=3, max_new_tokens=5, context_len=48)
    agent = LLMAgent(tiny_model, tiny_tok, seed=1)
    lengths: list[int] = []
    tiny_model.register_forward_pre_hook(lambda _m, _a, kw: lengths.append(kw["input_ids"].shape[1]),
                                         with_kwargs=True)
    env.reset(seed=3)
    acts = 0
    for _ in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        action = None if term or trunc else agent.act(obs)
        acts += action is not None
        env.step(action)
    assert len(lengths) == acts and sum(n > 1 for n in lengths) == 2
