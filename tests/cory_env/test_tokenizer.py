"""`cory_env.tokenizer.prepare_tokenizer`: one rule for every tokenizer, whether the env gets it as an object or by
name, or the agents load it with their model."""

from __future__ import annotations

import copy

import pytest

from agents.loading import load_model_and_tokenizer
from cory_env import BatchedCORYEnv, EnvConfig, hub
from cory_env.token_env import raw_env
from cory_env.tokenizer import prepare_tokenizer


def _right_padded(tok, *, pad: bool):
    tok = copy.deepcopy(tok)
    if not pad:
        tok.pad_token = None
    tok.padding_side = "right"
    return tok


@pytest.mark.parametrize("pad", [True, False])
def test_one_rule_pad_is_eos_when_missing_and_padding_is_left(tiny_tok, pad):
    out = prepare_tokenizer(_right_padded(tiny_tok, pad=pad))
    assert out.padding_side == "left" and out.pad_token_id is not None
    if not pad:
        assert out.pad_token_id == out.eos_token_id
    for env_tok in (raw_env(tokenizer=_right_padded(tiny_tok, pad=pad)).tokenizer,
                    BatchedCORYEnv(EnvConfig(), _right_padded(tiny_tok, pad=pad), batch_size=2).tokenizer):
        assert (env_tok.pad_token_id, env_tok.padding_side) == (out.pad_token_id, "left")


def test_a_tokenizer_by_name_and_one_loaded_with_its_model_follow_the_same_rule(tmp_path, tiny_tok, tiny_model):
    saved = _right_padded(tiny_tok, pad=False)
    saved.save_pretrained(tmp_path / "m")
    tiny_model.save_pretrained(tmp_path / "m")
    by_name = BatchedCORYEnv(EnvConfig(), str(tmp_path / "m"), batch_size=1).tokenizer
    _, with_model = load_model_and_tokenizer(str(tmp_path / "m"))
    for tok in (by_name, with_model, hub.load_tokenizer(str(tmp_path / "m"))):
        assert (tok.pad_token_id, tok.padding_side) == (tok.eos_token_id, "left")


class _Tokenizer:
    pad_token_id = 0
    padding_side = "right"
    name_or_path = "fake"

    def __init__(self, eos):
        self.eos_token_id = eos

    def __len__(self) -> int:
        return 384


def test_eos_must_exist_inside_the_vocabulary():
    with pytest.raises(ValueError, match="'fake' has no EOS token; set tokenizer.eos_token"):
        prepare_tokenizer(_Tokenizer(None))
    with pytest.raises(ValueError, match=r"tokenizer EOS id 384 is outside the vocabulary \[0, 384\)"):
        prepare_tokenizer(_Tokenizer(384))
    with pytest.raises(ValueError, match="needs a tokenizer"):
        prepare_tokenizer(None)
    assert prepare_tokenizer(_Tokenizer(383)).padding_side == "left"
