"""Fixtures for the env tests: small env settings and a scripted reward (SmolLM2 tokenizer: tests/conftest.py)."""

from __future__ import annotations

import pytest


def char_count_reward(queries: list[str], responses: list[str]) -> list[float]:
    """Deterministic scripted reward: the number of characters of the response text."""
    return [float(len(r)) for r in responses]


@pytest.fixture()
def tiny_env_kwargs(tiny_tok) -> dict:
    """Keyword arguments for a fast env: tiny tokenizer, built-in openings, VADER reward, default lengths."""
    return {"tokenizer": tiny_tok}
