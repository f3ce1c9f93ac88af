"""LLM agents for CORY: model loading, value heads, KV-cached acting, evaluation, reference model.

Names are imported when first used, so ``import agents.precision`` (or a config that names a precision) does not load
transformers' model code.
"""

from __future__ import annotations

from cory_env.lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_MODEL": "agents.loading", "load_model_and_tokenizer": "agents.loading", "load_tokenizer": "agents.loading",
    "EvalOutput": "agents.policy", "LLMAgent": "agents.policy",
    "ReferenceModel": "agents.reference", "ReferenceOutput": "agents.reference",
    "build_shared_lora": "agents.reference", "copy_for_agents": "agents.reference",
    "SamplingConfig": "cory_env.generation", "ValueHead": "agents.value_head",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports("agents", _EXPORTS)
