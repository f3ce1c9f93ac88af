"""Fixtures for trainer tests: tiny CORY runs in a temporary folder."""

from __future__ import annotations

import pytest
import torch

from trainers.config import RunConfigs


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models are fastest single-threaded, and 2-thread spin-waits stall on a loaded 2-core machine
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture()
def tiny_run(tmp_path):
    """Factory: the `RunConfigs` of a tiny-model run in tmp_path (``CORYTrainer(configs)``), with flat overrides."""

    def make(name: str = "run", **overrides) -> RunConfigs:
        base = {"model": "tiny", "output_dir": str(tmp_path / name), "num_iterations": 2, "role_exchange_period": 1,
                "tensorboard": False, "log_samples": 2, "batch_size": 4, "mini_batch_size": 2, "ppo_epochs": 2,
                "learning_rate": 1e-3, "min_new_tokens": 2, "max_new_tokens": 5, "context_len": 64}
        try:
            return RunConfigs.from_flat({**base, **overrides}, strict=True)
        except ValueError as err:
            if "unknown option" in str(err):
                raise TypeError(f"unknown overrides: {err}") from err
            raise

    return make
