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


def _lora_pair(tiny_tok, tiny_model):
    """Two agents on one memory-shared LoRA model in bf16-mixed (`build_agents`), and their reference."""
    from agents import SamplingConfig
    from trainers.config import ModelConfig
    from trainers.loop.build import build_agents

    config = ModelConfig(model="tiny", use_lora=True, lora_r=4, lora_alpha=8, precision="bf16-mixed")
    return build_agents(tiny_model, tiny_tok, config, SamplingConfig())


def test_frozen_weights_are_cast_once_with_bit_identical_outputs(tiny_tok, tiny_model):
    """`CastOnceLinear` under bf16 autocast: the LoRA base's logits and the adapters' gradients are exactly those of
    autocast's own per-product cast, and the cast copy is made again after the frozen weight changes in place."""
    from agents.precision import CastOnceLinear

    x = torch.randint(1, 384, (3, 7))

    def run(model):
        model.zero_grad()
        with autocast("bf16-mixed", "cpu"):
            logits = model(input_ids=x).logits
        logits.float().square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]  # the active adapter's
        assert grads
        return logits.detach(), grads

    agents, ref = _lora_pair(tiny_tok, tiny_model)
    model = ref.model
    with torch.inference_mode(), autocast("bf16-mixed", "cpu"):  # a rollout makes the copies first
        model(input_ids=x)
    swapped = [m for m in model.modules() if isinstance(m, CastOnceLinear)]
    assert swapped and all(isinstance(m, torch.nn.Linear) for m in swapped)
    with_cache, grads = run(model)
    frozen = next(m for m in swapped if not m.weight.requires_grad)
    assert frozen.__dict__["_cast_once"][1].dtype == torch.bfloat16  # the copy was made and kept
    for m in swapped:  # the same model with every module back to autocast's own casting
        m.__class__ = torch.nn.Linear
    plain, plain_grads = run(model)
    assert torch.equal(with_cache, plain) and all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    for m in swapped:
        m.__class__ = CastOnceLinear
    with torch.no_grad():  # an in-place change of a frozen weight (a merge, a load) must not leave a stale copy
        frozen.weight.mul_(1.5)
    changed, _ = run(model)
    for m in swapped:
        m.__class__ = torch.nn.Linear
    assert torch.equal(changed, run(model)[0]) and not torch.equal(changed, plain)


def test_fp32_builds_keep_plain_linear_layers_and_cast_once_is_plain_outside_autocast(tiny_tok, tiny_model):
    from agents import SamplingConfig
    from agents.precision import CastOnceLinear
    from trainers.config import ModelConfig
    from trainers.loop.build import build_agents

    _, ref = build_agents(tiny_model, tiny_tok, ModelConfig(model="tiny", use_lora=True, lora_r=4, lora_alpha=8),
                          SamplingConfig())
    assert not any(isinstance(m, CastOnceLinear) for m in ref.model.modules())
    layer = torch.nn.Linear(4, 4).requires_grad_(False)
    x = torch.randn(2, 4)
    want = layer(x)
    layer.__class__ = CastOnceLinear
    assert torch.equal(layer(x), want) and "_cast_once" not in layer.__dict__  # fp32: no copy
