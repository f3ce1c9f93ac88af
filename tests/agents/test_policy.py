"""LLMAgent: KV-cached acting, evaluate alignment, padding invariance, persistence and input checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from agents import LLMAgent, ReferenceModel, SamplingConfig, ValueHead
from agents.forward import position_ids_from_mask
from agents.tiny import tiny_causal_lm
from tests.agents.window import left_pad, play

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16]]


def full_forward_logits(model, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.no_grad():
        out = model(input_ids=ids_t, attention_mask=mask_t, position_ids=position_ids_from_mask(mask_t))
    return out.logits[:, -1].float()


def count_prefills(model) -> list[int]:
    """Record the sequence length of every forward call of `model`."""
    lengths: list[int] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: lengths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    return lengths


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_kv_cached_acting_matches_full_forward(tiny_tok, arch):
    model = tiny_causal_lm(tiny_tok, arch=arch, seed=1)
    agent = LLMAgent(model, tiny_tok, seed=0)
    eos = tiny_tok.eos_token_id
    gen = torch.Generator().manual_seed(3)
    # Rows stop at EOS, so later steps feed pad columns with mask 0 like the env.
    lengths = count_prefills(model)
    observed = []

    def on_step(ids, mask):
        observed.append((ids.copy(), mask.copy()))

    agent_logits = []
    orig = agent.act_batch

    def act_and_keep(obs, generator=None):
        out = orig(obs, generator=generator)
        agent_logits.append(agent.last_logits.clone())
        return out

    agent.act_batch = act_and_keep
    play(agent, PROMPTS, steps=8, context_len=20, pad_id=eos, vocab_size=len(tiny_tok), eos_id=eos,
         generator=gen, on_step=on_step)
    # One prefill over the longest prompt (all-padding columns skipped), then one token per step.
    assert lengths[0] == max(map(len, PROMPTS)) and all(n == 1 for n in lengths[1:])
    for (ids, mask), logits in zip(observed, agent_logits):
        torch.testing.assert_close(logits, full_forward_logits(model, ids, mask), atol=1e-4, rtol=0)


def test_finished_rows_match_full_forward(tiny_tok):
    model = tiny_causal_lm(tiny_tok, seed=2)
    agent = LLMAgent(model, tiny_tok)
    pad = tiny_tok.pad_token_id
    ids, mask = left_pad(PROMPTS, 12, pad)
    am = np.ones((3, len(tiny_tok)), dtype=np.int8)
    for step in range(5):
        tokens = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
        torch.testing.assert_close(agent.last_logits, full_forward_logits(model, ids, mask), atol=1e-4, rtol=0)
        finished = np.array([False, step >= 1, step >= 2])  # rows 1 and 2 end early
        ids = np.concatenate([ids[:, 1:], np.where(finished, pad, tokens)[:, None]], axis=1)
        mask = np.concatenate([mask[:, 1:], (~finished).astype(np.int64)[:, None]], axis=1)


def test_new_episode_rebuilds_cache(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok)
    lengths = count_prefills(tiny_model)
    am = np.ones((1, len(tiny_tok)), dtype=np.int8)
    ids, mask = left_pad([[5, 6, 7]], 8, 0)
    agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
    ids2, mask2 = left_pad([[9, 10, 11, 12]], 8, 0)  # not a one-column shift of the first window
    agent.act_batch({"input_ids": ids2, "attention_mask": mask2, "action_mask": am})
    assert lengths == [3, 4]
    torch.testing.assert_close(agent.last_logits, full_forward_logits(tiny_model, ids2, mask2), atol=1e-4, rtol=0)


def test_real_token_leaving_window_forces_prefill(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok)
    lengths = count_prefills(tiny_model)
    am = np.ones((1, len(tiny_tok)), dtype=np.int8)
    ids = np.array([[5, 6, 7, 8]])
    mask = np.ones((1, 4), dtype=np.int64)
    tok = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
    ids2 = np.concatenate([ids[:, 1:], tok[:, None]], axis=1)
    agent.act_batch({"input_ids": ids2, "attention_mask": mask, "action_mask": am})
    assert lengths == [4, 4]
    torch.testing.assert_close(agent.last_logits, full_forward_logits(tiny_model, ids2, mask), atol=1e-4, rtol=0)


def test_act_aec_equals_act_batch_row(tiny_tok, tiny_model):
    ids, mask = left_pad([[5, 6, 7]], 10, 0)
    am = np.ones(len(tiny_tok), dtype=np.int8)
    a1 = LLMAgent(tiny_model, tiny_tok, seed=7)
    a2 = LLMAgent(copy.deepcopy(tiny_model), tiny_tok, seed=7)
    for _ in range(4):
        t1 = a1.act({"input_ids": ids[0], "attention_mask": mask[0], "action_mask": am})
        t2 = a2.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am[None]})
        assert isinstance(t1, int) and t1 == int(t2[0])
        ids = np.concatenate([ids[:, 1:], [[t1]]], axis=1)
        mask = np.concatenate([mask[:, 1:], [[1]]], axis=1)


def test_seeded_agents_are_reproducible(tiny_tok, tiny_model):
    runs = []
    for _ in range(2):
        agent = LLMAgent(copy.deepcopy(tiny_model), tiny_tok, seed=11)
        runs.append(play(agent, PROMPTS, steps=6, context_len=16, pad_id=0, vocab_size=len(tiny_tok))[2])
    assert torch.equal(runs[0], runs[1])


def test_action_mask_is_respected(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok, sampling=SamplingConfig(temperature=2.0), seed=0)
    ids, mask = left_pad(PROMPTS, 8, 0)
    am = np.zeros((3, len(tiny_tok)), dtype=np.int8)
    allowed = [3, 17, 250]
    am[:, allowed] = 1
    for _ in range(10):
        tokens = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
        assert set(tokens.tolist()) <= set(allowed)
        assert tokens.dtype == np.int64 and tokens.shape == (3,)


def test_sampling_logprobs_equal_evaluate_and_kl_is_zero(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok, seed=0)
    ref = ReferenceModel(copy.deepcopy(tiny_model))
    eos = tiny_tok.eos_token_id
    query, qmask, response, rmask, step_lp = play(
        agent, PROMPTS, steps=10, context_len=20, pad_id=eos, vocab_size=len(tiny_tok), eos_id=eos)
    with torch.no_grad():
        out = agent.evaluate(query, qmask, response, rmask)
    torch.testing.assert_close(out.logprobs[rmask], step_lp[rmask], atol=1e-5, rtol=0)
    kl = (out.logprobs - ref.logprobs(query, qmask, response, rmask))[rmask].mean()
    assert abs(kl.item()) < 1e-5


def test_sampling_logprob_is_the_tempered_policy_even_with_penalties(tiny_tok, tiny_model):
    sampling = SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.3)
    agent = LLMAgent(tiny_model, tiny_tok, sampling=sampling, seed=0)
    query, qmask, response, rmask, step_lp = play(agent, PROMPTS, steps=5, context_len=12, pad_id=0,
                                                  vocab_size=len(tiny_tok))
    with torch.no_grad():
        out = agent.evaluate(query, qmask, response, rmask)
    torch.testing.assert_close(out.logprobs[rmask], step_lp[rmask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_padding_does_not_change_logprobs(tiny_tok, arch):
    model = tiny_causal_lm(tiny_tok, arch=arch, seed=4)
    agent = LLMAgent(model, tiny_tok)
    queries = [[5, 6, 7, 8, 9, 10], [11, 12]]
    responses = [[20, 21], [22, 23, 24, 25, 26]]
    pad = 0
    q, qm = left_pad(queries, 9, pad)  # extra left padding beyond the longest query
    r = np.full((2, 7), pad, dtype=np.int64)
    rm = np.zeros((2, 7), dtype=bool)
    for i, resp in enumerate(responses):
        r[i, :len(resp)] = resp
        rm[i, :len(resp)] = True
    with torch.no_grad():
        batched = agent.evaluate(torch.from_numpy(q), torch.from_numpy(qm).bool(), torch.from_numpy(r),
                                 torch.from_numpy(rm))
        for i, (qi, ri) in enumerate(zip(queries, responses)):
            single = agent.evaluate(torch.tensor([qi]), torch.ones(1, len(qi), dtype=torch.bool),
                                    torch.tensor([ri]), torch.ones(1, len(ri), dtype=torch.bool))
            n = len(ri)
            torch.testing.assert_close(batched.logprobs[i, :n], single.logprobs[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(batched.values[i, :n], single.values[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(batched.entropy[i, :n], single.entropy[0], atol=1e-5, rtol=0)


def test_evaluate_shapes_and_gradients(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok)
    agent.train()
    q = torch.tensor([[0, 5, 6], [7, 8, 9]])
    qm = q != 0
    r = torch.tensor([[10, 11, 0, 0], [12, 13, 14, 15]])
    rm = torch.tensor([[True, True, False, False], [True, True, True, True]])
    out = agent.evaluate(q, qm, r, rm, return_logits=True)
    assert out.logprobs.shape == out.values.shape == out.entropy.shape == (2, 4)
    assert out.logprobs.dtype == out.values.dtype == torch.float32
    assert out.logits.shape == (2, 4, len(tiny_tok))
    assert (out.logprobs <= 0).all() and (out.entropy >= 0).all()
    ((out.logprobs + out.values) * rm).sum().backward()
    assert agent.value_head.summary.weight.grad is not None
    assert tiny_model.get_output_embeddings().weight.grad.abs().sum() > 0


def test_evaluate_rejects_bad_inputs(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok)
    q = torch.tensor([[5, 6]])
    with pytest.raises(TypeError, match="int64"):
        agent.evaluate(q.float(), q > 0, q, q > 0)
    with pytest.raises(ValueError, match="shape"):
        agent.evaluate(q, torch.ones(1, 3, dtype=torch.bool), q, q > 0)


def test_vocab_mismatch_refused_with_both_sizes(tiny_tok, tiny_model):
    with pytest.raises(ValueError, match=r"1000.*384|384.*1000"):
        LLMAgent(tiny_model, tiny_tok, vocab_size=1000)
    agent = LLMAgent(tiny_model, tiny_tok)
    ids, mask = left_pad([[5, 6]], 4, 0)
    with pytest.raises(ValueError, match=r"500.*384"):
        agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": np.ones((1, 500), np.int8)})


def test_non_finite_logits_raise_naming_the_step(tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok, seed=0)
    ids, mask = left_pad([[5, 6, 7]], 8, 0)
    am = np.ones((1, len(tiny_tok)), dtype=np.int8)
    for _ in range(2):
        tok = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
        ids = np.concatenate([ids[:, 1:], tok[:, None]], axis=1)
        mask = np.concatenate([mask[:, 1:], [[1]]], axis=1)
    with torch.no_grad():
        tiny_model.get_output_embeddings().weight[3, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite logits at acting step 2"):
        agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})


def test_value_head_survives_save_and_load(tmp_path, tiny_tok, tiny_model):
    agent = LLMAgent(tiny_model, tiny_tok, sampling=SamplingConfig(top_k=5))
    agent.eval()
    with torch.no_grad():
        agent.value_head.summary.weight.normal_()
        agent.value_head.summary.bias.fill_(3.0)
    q, qm = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.bool)
    r, rm = torch.tensor([[8, 9]]), torch.ones(1, 2, dtype=torch.bool)
    with torch.no_grad():
        before = agent.evaluate(q, qm, r, rm)
    agent.save_pretrained(tmp_path / "agent")
    loaded = LLMAgent.from_pretrained(tmp_path / "agent")
    loaded.eval()
    with torch.no_grad():
        after = loaded.evaluate(q, qm, r, rm)
    torch.testing.assert_close(after.values, before.values)
    torch.testing.assert_close(after.logprobs, before.logprobs)
    assert loaded.sampling == SamplingConfig(top_k=5)
    assert not list((tmp_path / "agent").glob("*.bin"))


def test_load_refuses_missing_or_mismatched_value_head(tmp_path, tiny_tok, tiny_model):
    LLMAgent(tiny_model, tiny_tok).save_pretrained(tmp_path / "a")
    from safetensors.torch import save_file

    save_file({"summary.weight": torch.zeros(1, 7), "summary.bias": torch.zeros(1)},
              str(tmp_path / "a" / "value_head.safetensors"))
    with pytest.raises(ValueError, match="value head"):
        LLMAgent.from_pretrained(tmp_path / "a")
    (tmp_path / "a" / "value_head.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="value_head"):
        LLMAgent.from_pretrained(tmp_path / "a")


def test_constructor_checks(tiny_tok, tiny_model):
    with pytest.raises(TypeError, match="SamplingConfig"):
        LLMAgent(tiny_model, tiny_tok, sampling={"top_k": 0})
    with pytest.raises(ValueError, match="PeftModel"):
        LLMAgent(tiny_model, tiny_tok, adapter_name="llm1")
    with pytest.raises(ValueError, match="hidden size"):
        LLMAgent(tiny_model, tiny_tok, value_head=ValueHead(7))
