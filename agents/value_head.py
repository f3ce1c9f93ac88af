"""Scalar value head (critic) on top of a causal LM's last hidden state, TRL style."""

from __future__ import annotations

import torch
from torch import nn

from cory_env.checks import check_number


class ValueHead(nn.Module):
    """Dropout + ``Linear(hidden_size, 1)`` in fp32: one state value per token.

    The linear layer is kept in fp32 whatever the LM dtype, and hidden states are cast to fp32 before it, so
    values and their gradients stay precise under bf16/fp16 LMs.

    Source: TRL ``trl/models/modeling_value_head.py`` (``ValueHead``: dropout, then ``nn.Linear(hidden, 1)``).

    Args:
        hidden_size: H, the LM's hidden size.
        dropout: dropout probability on the hidden state (TRL ``summary_dropout_prob`` default 0.1); active only
            in train mode.

    Raises:
        ValueError: if `hidden_size` < 1 or `dropout` is outside [0, 1).
    """

    def __init__(self, hidden_size: int, dropout: float = 0.1) -> None:
        super().__init__()
        check_number(hidden_size, "hidden_size", integer=True, low=1)
        check_number(dropout, "dropout", low=0, below=1, fix="0.0 disables")
        self.hidden_size = hidden_size
        self.dropout = nn.Dropout(dropout)
        self.summary = nn.Linear(hidden_size, 1, dtype=torch.float32)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Values for every position: float32 (B, T) from `hidden_states`, float (B, T, H) of any float dtype.

        Raises:
            ValueError: if the last dimension is not H.
        """
        if hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(f"hidden_states last dim is {hidden_states.shape[-1]}, the value head expects "
                             f"{self.hidden_size}")
        return self.summary(self.dropout(hidden_states.to(self.summary.weight.dtype))).squeeze(-1)
