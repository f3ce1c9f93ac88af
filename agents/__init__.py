"""LLM agents for CORY: model loading, value heads, KV-cached acting, evaluation, reference model."""

from agents.loading import DEFAULT_MODEL, load_model_and_tokenizer, load_tokenizer
from agents.policy import EvalOutput, LLMAgent
from agents.reference import ReferenceModel, ReferenceOutput, build_shared_lora, copy_for_agents
from agents.sampling import SamplingConfig
from agents.value_head import ValueHead

__all__ = [
    "DEFAULT_MODEL",
    "EvalOutput",
    "LLMAgent",
    "ReferenceModel",
    "ReferenceOutput",
    "SamplingConfig",
    "ValueHead",
    "build_shared_lora",
    "copy_for_agents",
    "load_model_and_tokenizer",
    "load_tokenizer",
]
