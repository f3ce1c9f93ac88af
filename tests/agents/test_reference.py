"""ReferenceModel and the two memory layouts: full copies and the shared-LoRA PeftModel."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from agents import LLMAgent, ReferenceModel, build_shared_lora, copy_for_agents

Q = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
QM = Q != 0
R = torch.tensor([[20, 21, 22], [23, 24, 0]])
RM = torch.tensor([[True, True, True], [True, True, False]])


def lora_cfg() -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                      task_type="CAUSAL_LM")


def train_one_step(agent: LLMAgent) -> None:
    opt = torch.optim.SGD(agent.trainable_parameters(), lr=1.0)
    out = agent.evaluate(Q, QM, R, RM)
    (-(out.logprobs * RM).sum() + out.values.pow(2).sum()).backward()
    opt.step()
    opt.zero_grad()


@pytest.fixture()
def shared(tiny_tok, tiny_model):
    base_logits = ReferenceModel(tiny_model).logits(Q, QM, R, RM)  # freezes the base, as the layout expects
    peft_model = build_shared_lora(tiny_model, lora_config=lora_cfg())
    a1 = LLMAgent(peft_model, tiny_tok, adapter_name="llm1")
    a2 = LLMAgent(peft_model, tiny_tok, adapter_name="llm2")
    return peft_model, a1, a2, ReferenceModel(peft_model), base_logits


def test_reference_is_frozen_and_evaluates(tiny_model):
    tiny_model.train()
    ref = ReferenceModel(tiny_model)
    assert not tiny_model.training
    assert not any(p.requires_grad for p in ref.parameters())
    out = ref.evaluate(Q, QM, R, RM, return_logits=True)
    assert out.logprobs.shape == (2, 3) and out.logprobs.dtype == torch.float32
    assert out.logits.shape == (2, 3, tiny_model.config.vocab_size)
    assert not out.logprobs.requires_grad
    torch.testing.assert_close(out.logprobs, ref.logprobs(Q, QM, R, RM))


def test_reference_refuses_disable_adapters_for_plain_model(tiny_model):
    with pytest.raises(ValueError, match="PeftModel"):
        ReferenceModel(tiny_model, disable_adapters=True)


def test_copy_for_agents_makes_independent_copies(tiny_tok, tiny_model):
    (p1, p2), ref = copy_for_agents(tiny_model)
    assert ref.model is tiny_model and not any(p.requires_grad for p in ref.parameters())
    ptrs = [{p.data_ptr() for p in m.parameters()} for m in (p1, p2, tiny_model)]
    assert not (ptrs[0] & ptrs[1]) and not (ptrs[0] & ptrs[2]) and not (ptrs[1] & ptrs[2])
    a1 = LLMAgent(p1, tiny_tok)
    before = ref.logits(Q, QM, R, RM)
    other = LLMAgent(p2, tiny_tok).evaluate(Q, QM, R, RM).logprobs.detach()
    train_one_step(a1)
    torch.testing.assert_close(ref.logits(Q, QM, R, RM), before)
    torch.testing.assert_close(LLMAgent(p2, tiny_tok).evaluate(Q, QM, R, RM).logprobs.detach(), other)


def test_copy_for_agents_makes_one_policy_per_seat(tiny_model):
    policies, ref = copy_for_agents(tiny_model, 3)
    assert len(policies) == 3 and len({id(p) for p in policies}) == 3
    assert all(all(q.requires_grad for q in p.parameters()) for p in policies)
    assert ref.model is tiny_model
    with pytest.raises(ValueError, match="^n=0 is invalid: use an integer >= 1"):
        copy_for_agents(tiny_model, 0)


def test_lora_reference_equals_base_after_training(shared):
    _, a1, a2, ref, base_logits = shared
    train_one_step(a1)
    train_one_step(a2)
    torch.testing.assert_close(ref.logits(Q, QM, R, RM), base_logits, atol=1e-6, rtol=0)
    assert not torch.allclose(a1.evaluate(Q, QM, R, RM, return_logits=True).logits, base_logits)


def test_lora_adapters_are_independent(shared):
    _, a1, a2, ref, _ = shared
    train_one_step(a2)  # make llm2 differ from the base first
    with torch.no_grad():
        llm2_before = a2.evaluate(Q, QM, R, RM, return_logits=True).logits
        llm1_before = a1.evaluate(Q, QM, R, RM, return_logits=True).logits
    train_one_step(a1)
    with torch.no_grad():
        torch.testing.assert_close(a2.evaluate(Q, QM, R, RM, return_logits=True).logits, llm2_before)
        assert not torch.allclose(a1.evaluate(Q, QM, R, RM, return_logits=True).logits, llm1_before)


def test_switching_adapters_keeps_both_trainable(shared):
    peft_model, a1, a2, ref, _ = shared
    a1.evaluate(Q, QM, R, RM)
    ref.logprobs(Q, QM, R, RM)
    a2.evaluate(Q, QM, R, RM)
    assert all(p.requires_grad for p in a1.trainable_parameters())
    assert all(p.requires_grad for p in a2.trainable_parameters())
    assert not any(p.requires_grad for p in ref.parameters())


def test_lora_trainable_parameters_are_own_adapter_and_value_head(shared):
    peft_model, a1, a2, ref, _ = shared
    names = {id(p): n for n, p in peft_model.named_parameters()}
    own = [names[id(p)] for p in a1.trainable_parameters() if id(p) in names]
    assert own and all(".llm1." in n and "lora_" in n for n in own)
    vh = {id(p) for p in a1.value_head.parameters()}
    assert vh <= {id(p) for p in a1.trainable_parameters()}
    assert not ({id(p) for p in a1.trainable_parameters()} & {id(p) for p in a2.trainable_parameters()})
    assert not ({id(p) for p in a1.trainable_parameters()} & {id(p) for p in ref.parameters()})


def test_lora_layout_has_no_third_copy(shared, tiny_model):
    peft_model, a1, a2, ref, _ = shared
    base = {p.data_ptr() for p in peft_model.get_base_model().parameters() if p.requires_grad is False}
    ref_ptrs = {p.data_ptr() for p in ref.parameters()}
    assert ref_ptrs <= base
    assert a1.model is a2.model is ref.model
    # Unique storage: the base once plus two small adapters.
    unique: dict[int, int] = {}
    for module in (a1, a2):
        for p in module.parameters():
            unique[p.data_ptr()] = p.numel()
    for p in ref.parameters():
        unique[p.data_ptr()] = p.numel()
    base_numel = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" not in n)
    adapters = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    heads = sum(p.numel() for p in a1.value_head.parameters()) * 2
    assert sum(unique.values()) == base_numel + adapters + heads


def test_lora_agent_save_and_load_into_shared_model(tmp_path, tiny_tok, shared):
    peft_model, a1, a2, ref, _ = shared
    train_one_step(a1)
    a1.eval()
    with torch.no_grad():
        before = a1.evaluate(Q, QM, R, RM)
    a1.save_pretrained(tmp_path / "llm1")
    from agents.tiny import tiny_causal_lm

    fresh = build_shared_lora(tiny_causal_lm(tiny_tok, seed=0), adapter_names=("llm2",), lora_config=lora_cfg())
    loaded = LLMAgent.from_pretrained(tmp_path / "llm1", model=fresh)
    loaded.eval()
    with torch.no_grad():
        after = loaded.evaluate(Q, QM, R, RM)
    torch.testing.assert_close(after.logprobs, before.logprobs)
    torch.testing.assert_close(after.values, before.values)
    assert all(p.requires_grad for p in loaded.trainable_parameters())
