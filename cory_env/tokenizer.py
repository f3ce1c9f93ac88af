"""Tokenizer preparation: the one rule every tokenizer in cory goes through (the env's, and the agents').

`prepare_tokenizer` takes a Hugging Face tokenizer object (a name, an alias, ``.gguf`` file, local folder or hub id, is
loaded by `cory_env.hub.as_tokenizer`, which prepares it here) and returns it ready for the env and the agents:

* its EOS token exists and lies inside the vocabulary (a response ends at EOS, and the env's action space is
  ``Discrete(len(tokenizer))``);
* a tokenizer without a pad token pads with EOS (as TRL and ``generate`` do for GPT-2 and Llama);
* ``padding_side="left"``: prompts end where generation starts, so batched prompts are padded on the left
  (``tokenizer(prompts, padding=True)`` then feeds ``generate`` and the agents' KV cache correctly).

The object is modified in place and returned.
"""

from __future__ import annotations

import logging

__all__ = ["prepare_tokenizer"]

logger = logging.getLogger(__name__)


def prepare_tokenizer(tokenizer):
    """Resolve, check and prepare a tokenizer (see the module docstring).

    Args:
        tokenizer: a Hugging Face tokenizer object.

    Returns:
        The tokenizer, with pad = EOS when it had no pad token and ``padding_side="left"`` (modified in place).

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
