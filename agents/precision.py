"""Mixed precision: which precision a run computes in, and the autocast context every model forward runs under.

``precision`` (`ModelConfig.precision`, ``--precision``):

* ``"fp32"``: everything in float32 (the default; the TRL-parity tests run in it).
* ``"bf16-mixed"``: the model's forward passes (acting, scoring, the update) run under
  ``torch.autocast(device, dtype=torch.bfloat16)``; the parameters, their gradients and the Adam state stay float32.
  Everything read from a forward is cast back to float32 before any RL maths (`agents.forward.policy_logits`: the
  logits; `agents.value_head.ValueHead`: the hidden state), so advantages, ratios, KL estimates and losses are float32.
  bf16 keeps float32's exponent range, so no loss scaling is needed (unlike fp16). Frozen weights (a LoRA base, the
  reference model) are cast once per change (`CastOnceLinear`, applied by `trainers.loop.build.build_agents`).
* ``"auto"``: ``"bf16-mixed"`` where the hardware computes bf16 natively (a CUDA GPU with bf16 support; a CPU with
  AVX512-BF16 or AMX), else ``"fp32"``; the choice is logged (`resolve_precision`).
* ``"fp16-mixed"``: float16 autocast, CUDA only (CPU float16 kernels are missing or slower than float32; refused).

On a CPU without AVX512-BF16/AMX, bf16 is emulated and slower than float32: ``bf16-mixed`` is then allowed with a
warning, never with different maths.
"""

from __future__ import annotations

import contextlib
import logging

import torch

__all__ = ["PRECISIONS", "autocast", "cast_frozen_weights_once", "native_bf16", "resolve_precision"]

logger = logging.getLogger(__name__)

#: `ModelConfig.precision` values.
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "auto")
_AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}


def native_bf16(device: torch.device | str) -> bool:
    """True when `device` computes bfloat16 matmuls natively: a CUDA device with bf16 support, or a CPU whose
    oneDNN kernels have AVX512-BF16 or AMX (as torch reports them)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(bool(check()) for check in checks if check is not None)
    return False


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """The precision a run on `device` computes in: "fp32", "bf16-mixed" or "fp16-mixed" (`precision` "auto"
    chosen by `native_bf16`, and logged).

    Raises:
        ValueError: an unknown name, or "fp16-mixed" on a CPU (names the reason and the fix).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is invalid: use one of {PRECISIONS}")
    device = torch.device(device)
    if precision == "auto":
        chosen = "bf16-mixed" if native_bf16(device) else "fp32"
        logger.info("precision auto: %s on %s (%s)", chosen, device,
                    "native bf16" if chosen != "fp32" else "no native bf16 matmuls: bf16 would be emulated and slower")
        return chosen
    if precision == "fp16-mixed" and device.type != "cuda":
        raise ValueError("precision='fp16-mixed' is refused on a CPU: CPU float16 matmuls are missing or slower than "
                         "float32, and float16 needs loss scaling; use --precision bf16-mixed (or fp32)")
    if precision == "bf16-mixed" and not native_bf16(device):
        logger.warning("precision bf16-mixed on %s without native bf16 (no AVX512-BF16/AMX, or a GPU without bf16): "
                       "bfloat16 is emulated there and will be slower than fp32; the results stay correct", device)
    return precision


def autocast(precision: str, device: torch.device | str):
    """The context a model forward on `device` runs under: ``torch.autocast`` for a mixed `precision` (resolved:
    `resolve_precision`), else a no-op."""
    dtype = _AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


class CastOnceLinear(torch.nn.Linear):
    """An ``nn.Linear`` whose frozen weight is cast to the autocast dtype once, not at every product.

    ``torch.autocast`` caches its casts of leaf tensors that require grad only; a frozen weight (a LoRA base, the
    reference model) is cast again at every call — in generation once per new token. This keeps one cast copy
    (``weight.detach().to(dtype)``, the same rounding autocast applies, so every output is bit-identical) and makes
    it again when the weight changes (its version counter or storage: an in-place update, a LoRA merge, a load).
    Outside autocast, or for a weight that requires grad, it is a plain ``nn.Linear``. Costs one low-precision copy
    of each frozen weight (2 bytes per parameter in bf16).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device_type = self.weight.device.type
        if self.weight.requires_grad or not torch.is_autocast_enabled(device_type):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(device_type)
        key = (dtype, self.weight._version, self.weight.data_ptr())
        cached = self.__dict__.get("_cast_once")
        if cached is None or cached[0] != key:
            with torch.inference_mode(False):  # made during a rollout, used by the update's autograd too
                cached = (key, self.weight.detach().to(dtype))
            self.__dict__["_cast_once"] = cached
        return torch.nn.functional.linear(x, cached[1], self.bias)


def cast_frozen_weights_once(*models: torch.nn.Module, once: bool = True) -> int:
    """Make every plain ``nn.Linear`` of `models` a `CastOnceLinear` (in place; the modules keep their parameters,
    state-dict keys and ``isinstance(m, nn.Linear)``); for a mixed precision, where only frozen weights gain. With
    ``once=False``, turn them back into plain ``nn.Linear`` (a sharded model: its weights exist whole only during a
    layer's forward, and a kept copy would hold them whole). Returns how many modules changed class."""
    source, target = (torch.nn.Linear, CastOnceLinear) if once else (CastOnceLinear, torch.nn.Linear)
    changed = 0
    for model in models:
        for module in model.modules():
            if type(module) is source:
                module.__dict__.pop("_cast_once", None)
                module.__class__ = target
                changed += 1
    return changed
