"""ValueHead: fp32 values per token, dropout only in train mode, clear errors."""

from __future__ import annotations

import pytest
import torch

from agents import ValueHead


def test_one_fp32_value_per_token_from_bf16():
    head = ValueHead(8).eval()
    hidden = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    values = head(hidden)
    assert values.shape == (2, 5) and values.dtype == torch.float32
    expected = hidden.float() @ head.summary.weight[0] + head.summary.bias
    torch.testing.assert_close(values, expected)


def test_dropout_only_in_train_mode():
    torch.manual_seed(0)
    head = ValueHead(64, dropout=0.5)
    hidden = torch.randn(4, 6, 64)
    head.eval()
    torch.testing.assert_close(head(hidden), head(hidden))
    head.train()
    assert not torch.allclose(head(hidden), head(hidden))


@pytest.mark.parametrize("kwargs", [{"hidden_size": 0}, {"hidden_size": 8, "dropout": 1.0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        ValueHead(**kwargs)


def test_wrong_hidden_size_raises():
    with pytest.raises(ValueError, match="expects 8"):
        ValueHead(8)(torch.zeros(1, 2, 4))
