"""Fixtures for trainer tests: tiny CORY runs in a temporary folder."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cory_env import EnvConfig
from trainers.config import CORYConfig, PPOConfig


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models are fastest single-threaded, and 2-thread spin-waits stall on a loaded 2-core machine
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture()
def tiny_run(tmp_path):
    """Factory: (CORYConfig, PPOConfig, EnvConfig) for a tiny-model run in tmp_path, with overrides."""

    def make(name: str = "run", **overrides):
        cory = CORYConfig(model="tiny", output_dir=str(tmp_path / name), num_iterations=2, role_exchange_period=1,
                          tensorboard=False, log_samples=2)
        ppo = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=2, learning_rate=1e-3)
        env = EnvConfig(min_new_tokens=2, max_new_tokens=5, context_len=64)
        out = []
        for cfg in (cory, ppo, env):
            names = {f.name for f in dataclasses.fields(cfg)}
            out.append(dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in names}))
        unknown = set(overrides) - {f.name for c in out for f in dataclasses.fields(c)}
        if unknown:
            raise TypeError(f"unknown overrides {unknown}")
        return tuple(out)

    return make
