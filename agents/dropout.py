"""`disable_dropout`: switch off every dropout of a policy, so that scoring a rollout and updating on it evaluate one
function of the weights.

PPO's importance ratio π_θ/π_old must be exactly 1 on the data the rollout just produced. The rollout scores old
log-probabilities and values in eval mode (no dropout) while the update runs in train mode (activation checkpointing
and peft need it); with any dropout active, the two forwards are different networks and the ratio and the value
clipping see noise instead of policy change. TRL does the same (``disable_dropout=True``,
`trl.trainer.utils.disable_dropout_in_model`); CleanRL's policies have no dropout.
"""

from __future__ import annotations

from torch import nn

__all__ = ["disable_dropout"]

#: Float attributes that transformers' attention modules read as a functional dropout probability in train mode
#: (Llama-family ``attention_dropout``; the dropout layers of GPT-2-style models are `nn.Dropout` modules).
FUNCTIONAL_DROPOUT_ATTRIBUTES = ("attention_dropout",)


def disable_dropout(*modules: nn.Module) -> int:
    """Set every dropout probability inside `modules` to 0, in place: `nn.Dropout`-family modules (LoRA dropout,
    a value head's dropout, GPT-2's residual and attention dropout) and the float `attention_dropout` of attention
    modules (and the model config's copy of it). `modules`: models, value heads, `agents.LLMAgent` objects.
    Returns the number of dropout sites whose probability was above 0."""
    changed = 0
    for root in modules:
        for module in root.modules():
            if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
                module.p = 0.0
                changed += 1
            for name in FUNCTIONAL_DROPOUT_ATTRIBUTES:
                value = getattr(module, name, None)
                if isinstance(value, float) and value > 0:
                    setattr(module, name, 0.0)
                    changed += 1
            config = getattr(module, "config", None)
            for name in FUNCTIONAL_DROPOUT_ATTRIBUTES:
                if isinstance(getattr(config, name, None), float) and getattr(config, name) > 0:
                    setattr(config, name, 0.0)
    return changed
