"""Mixed precision (`agents.precision`): the choice of `auto`, refusals, and what stays float32 under bf16-mixed."""

from __future__ import annotations

import logging

import pytest
import torch

from agents import precision as precision_module
from agents.precision import autocast, resolve_precision


def test_auto_chooses_bf16_only_with_native_hardware(monkeypatch, caplog):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: True)
    with caplog.at_level(logging.INFO, logger="agents.precision"):
        assert resolve_precision("auto", "cpu") == "bf16-mixed"
    assert "precision auto: bf16-mixed" in caplog.text
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: False)
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", "cpu") == "fp32"


def test_bf16_without_native_hardware_warns_and_fp16_on_a_cpu_is_refused(monkeypatch, caplog):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device: False)
    with caplog.at_level(logging.WARNING, logger="agents.precision"):
        assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
    assert "will be slower than fp32" in caplog.text
    with pytest.raises(ValueError, match="^precision='fp16-mixed' is refused on a CPU: CPU float16 matmuls"):
        resolve_precision("fp16-mixed", "cpu")
    with pytest.raises(ValueError, match="precision='half' is invalid"):
        resolve_precision("half", "cpu")


def test_float16_weights_on_a_cpu_are_refused(tiny_tok, tiny_model):
    from agents import SamplingConfig
    from trainers.config import ModelConfig
    from trainers.loop.build import build_agents

    with pytest.raises(ValueError, match="dtype='float16' is refused on a CPU"):
        build_agents(tiny_model, tiny_tok, ModelConfig(model="tiny", dtype="float16"), SamplingConfig())


def test_autocast_is_bf16_matmuls_and_fp32_otherwise():
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with autocast("bf16-mixed", "cpu"):
        assert layer(x).dtype == torch.bfloat16
    with autocast("fp32", "cpu"):
        assert layer(x).dtype == torch.float32
