"""Tokenizer preparation: the one rule every tokenizer in cory goes through (the env's, and the agents').

`prepare_tokenizer` takes a Hugging Face tokenizer object (a name, an alias, ``.gguf`` file, local folder or hub id, is
loaded by `cory_env.hub.as_tokenizer`, which prepares it here) and returns it ready for the env and the agents:

* its EOS token exists and lies inside the vocabulary (a response ends at EOS, and the env's action space is
  ``Discrete(len(tokenizer))``);
* a tokenizer without a pad token pads with EOS (as TRL and ``generate`` do for GPT-2 and Llama);
* ``padding_side="left"``: prompts end where generation starts, so batched prompts are padded on the left
  (``tokenizer(prompts, padding=True)`` then feeds ``generate`` and the agents' KV cache correctly).

The object is modified in place and returned.

`encode_text` is the one way text that comes from outside a template becomes token ids — a query from the data, the
answer of another seat read through the text channel, a query re-encoded for a seat of another tokenizer: as plain
text, so a string that spells a special token (``<|im_end|>``, ``<eos>``) never becomes that control token.
"""

from __future__ import annotations

import logging

__all__ = ["encode_text", "prepare_tokenizer"]

logger = logging.getLogger(__name__)


def prepare_tokenizer(tokenizer):
    """Check and prepare a Hugging Face tokenizer object in place, and return it (see the module docstring).

    Raises:
        ValueError: if it is missing, has no EOS token, or its EOS id is outside [0, len(tokenizer)).
        TypeError: a name instead of a tokenizer object (load it with `cory_env.hub.as_tokenizer`).
    """
    if tokenizer is None:
        raise ValueError("the env needs a tokenizer: pass a tokenizer object or a name (alias such as "
                         "'smollm2-135m-instruct', .gguf file, local folder or hub id)")
    if isinstance(tokenizer, (str, bytes)) or hasattr(tokenizer, "__fspath__"):
        raise TypeError(f"prepare_tokenizer takes a tokenizer object, got the name {tokenizer!r}; load it with "
                        "cory_env.hub.as_tokenizer (or pass the name to the env, which does)")
    eos, vocab = tokenizer.eos_token_id, len(tokenizer)
    if eos is None:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r} has no "
                         "EOS token; set tokenizer.eos_token")
    if not 0 <= eos < vocab:
        raise ValueError(f"tokenizer EOS id {eos} is outside the vocabulary [0, {vocab}); use a tokenizer whose "
                         "eos_token is one of its tokens")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
        logger.info("tokenizer has no pad token: using EOS (%r, id %d) with left padding", tokenizer.eos_token, eos)
    tokenizer.padding_side = "left"
    return tokenizer


def encode_text(tokenizer, texts):
    """Token ids of `texts` (one str, or a list of them) as plain text: no special token is added, and a special
    token's spelling inside the text is encoded as the characters it is (``split_special_tokens``); a tokenizer whose
    vocabulary holds the spelling as a word (a word-level one) gets its unknown token there (none: the id is dropped).
    Returns list[int] for a str, list[list[int]] for a list; `tokenizer` is a prepared one (`prepare_tokenizer`).

    >>> from agents.tiny import tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> tok.eos_token_id in encode_text(tok, "fine" + tok.eos_token)
    False
    """
    rows = tokenizer([texts] if isinstance(texts, str) else list(texts), add_special_tokens=False,
                     split_special_tokens=True)["input_ids"]
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    if any(i in special for row in rows for i in row):
        unk = tokenizer.unk_token_id
        rows = [[unk if i in special else i for i in row if i not in special or unk is not None] for row in rows]
    return rows[0] if isinstance(texts, str) else rows
