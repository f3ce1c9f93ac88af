"""Tiny, randomly initialised tokenizers and causal LMs for tests, examples and the `tiny` preset.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained in milliseconds on the first
`TINY_CORPUS_LINES` built-in review openings, so it encodes any unicode text (emoji included) without unknown tokens.
"""

from __future__ import annotations

import importlib.resources

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel,
                          PreTrainedTokenizerFast)

from cory_env.checks import check_number

TINY_EOS = "<|endoftext|>"
#: The tokenizer trains on this many openings only, so openings added to the built-in set leave its merges (and
#: every seeded number of a tiny-model run) as they are.
TINY_CORPUS_LINES = 60


def _corpus() -> list[str]:
    return training_lines(importlib.resources.files("cory_env.tasks").joinpath("imdb_openings.txt").read_text("utf-8"))


def training_lines(text: str) -> list[str]:
    """The tokenizer's training text: the first `TINY_CORPUS_LINES` non-comment lines of an openings file."""
    return [line for line in text.splitlines() if line and not line.startswith("#")][:TINY_CORPUS_LINES]


def tiny_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A byte-level BPE `PreTrainedTokenizerFast` with `vocab_size` tokens (V, including the 256 byte tokens and
    EOS; >= 300), EOS = pad = `<|endoftext|>`, left padding; deterministic for a given `vocab_size`.

    Raises:
        ValueError: if `vocab_size` < 300.
    """
    check_number(vocab_size, "vocab_size", integer=True, low=300, fix="256 bytes + merges + EOS")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[TINY_EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=TINY_EOS, pad_token=TINY_EOS)
    fast.padding_side = "left"
    return fast


def tiny_causal_lm(tokenizer: PreTrainedTokenizerFast, *, arch: str = "llama", hidden_size: int = 32,
                   num_layers: int = 2, num_heads: int = 4, max_positions: int = 1024,
                   seed: int = 0) -> PreTrainedModel:
    """A randomly initialised causal LM whose vocabulary matches `tokenizer` (fp32, eval mode).

    Args:
        tokenizer: gives V = `len(tokenizer)` and the EOS/pad ids.
        arch: "llama" (`LlamaForCausalLM`) or "gpt2" (`GPT2LMHeadModel`).
        hidden_size, num_layers, num_heads: model size; about 40k parameters at the defaults with V=384.
        max_positions: context limit in tokens.
        seed: initialisation seed (the global torch RNG is saved and restored).

    Raises:
        ValueError: for an unknown `arch`.
    """
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    if arch == "llama":
        config = LlamaConfig(vocab_size=vocab, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                             num_hidden_layers=num_layers, num_attention_heads=num_heads,
                             num_key_value_heads=num_heads, max_position_embeddings=max_positions, bos_token_id=eos,
                             eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False)
        cls = LlamaForCausalLM
    elif arch == "gpt2":
        config = GPT2Config(vocab_size=vocab, n_embd=hidden_size, n_layer=num_layers, n_head=num_heads,
                            n_positions=max_positions, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
        cls = GPT2LMHeadModel
    else:
        raise ValueError(f"arch must be 'llama' or 'gpt2', got {arch!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    model.generation_config.pad_token_id = eos
    return model.eval()
