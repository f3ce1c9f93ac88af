"""LLM agents for CORY: model loading, value heads, KV-cached acting, evaluation, reference model."""
