"""A LoRA on an embedding layer (``--lora_target_modules ...,embed_tokens``) is trained like one on a linear layer:
peft names its weights ``lora_embedding_A.<adapter>`` (no ``.weight`` suffix), and each agent's optimizer and
checkpoint take them (`agents.reference.is_adapter_parameter`)."""

from __future__ import annotations

from peft import LoraConfig

from agents import LLMAgent, build_shared_lora


def test_an_embedding_lora_is_trainable_and_owned_by_its_agent(tiny_model, tiny_tok):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "embed_tokens"], task_type="CAUSAL_LM")
    shared = build_shared_lora(tiny_model, adapter_names=("llm1", "llm2"), lora_config=lora)
    names = {n for n, _ in shared.named_parameters()}
    for adapter in ("llm1", "llm2"):
        agent = LLMAgent(shared, tiny_tok, adapter_name=adapter)
        owned = {id(p) for p in agent.trainable_parameters()}
        embedding = [n for n in names if "lora_embedding_" in n and n.endswith(f".{adapter}")]
        assert len(embedding) == 2  # A and B
        for n, p in shared.named_parameters():
            mine = "lora_" in n and adapter in n.split(".")
            assert (id(p) in owned) == mine, n
            if "lora_" in n:
                assert p.requires_grad, n
            else:
                assert not p.requires_grad, n  # the base stays frozen
