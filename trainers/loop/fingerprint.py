"""Content fingerprints of what a run depends on: the model's weights, the tokenizer, the query data and the reward.

A resume must train against the same inputs as the run it continues. Names are not enough: ``--model`` may point at
a folder whose weights were replaced, and the reference model is rebuilt from them (a resume with
another tiny model of the same shapes, unchecked, logged ``pioneer/kl`` 0.2881 at iteration 2 instead of 0.0125). The functions
here hash each input by content (`INPUTS`); `CORYTrainer` records them in every checkpoint (``trainer_state.json``,
key ``inputs``) and `check_fingerprints` refuses a resume whose inputs changed, naming which.

Hashes are BLAKE2b (16-byte digests, hex). The weights are hashed as loaded (before LoRA or the copies for two
agents), names, dtypes and shapes included: about 1 s for SmolLM2-135M on this machine class.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any, Callable, Mapping

import torch

from trainers.loop.checkpoint import CheckpointError

__all__ = ["INPUTS", "check_fingerprints", "data_fingerprint", "model_fingerprint", "reward_fingerprint",
           "tokenizer_fingerprint"]

#: What a fingerprint covers, with what a change means to a resume (the keys of `fingerprints`).
INPUTS = {
    "model": "the policy model's weights (the reference model is rebuilt from them)",
    "tokenizer": "the tokenizer (vocabulary, merges, special tokens, padding)",
    "data": "the task's queries (records after loading and filtering)",
    "reward": "the reward function (its name and, when readable, its source code)",
}


def _hasher() -> "hashlib._Hash":
    return hashlib.blake2b(digest_size=16)


def model_fingerprint(model: torch.nn.Module) -> str:
    """Hash of every tensor of ``model.state_dict()``: names, dtypes, shapes and bytes, in name order."""
    h = _hasher()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
    return h.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of the tokenizer's full serialisation (fast tokenizers) or its vocabulary, plus special tokens and the
    padding side."""
    h = _hasher()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    extra = {"special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
             "pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id, "side": tokenizer.padding_side}
    h.update(json.dumps(extra, sort_keys=True).encode())
    return h.hexdigest()


def data_fingerprint(records: list[dict]) -> str:
    """Hash of the task's records (queries and any other fields, e.g. GSM8K gold answers), in order."""
    h = _hasher()
    for record in records:
        h.update(json.dumps(record, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def reward_fingerprint(reward_fn: Callable, name: str) -> str:
    """Hash of the reward's recorded `name` and, when Python can read it, its source code (a builder's closure is
    hashed through the function it returns; a callable object through its class)."""
    h = _hasher()
    h.update(name.encode())
    target = reward_fn if inspect.isfunction(reward_fn) or inspect.ismethod(reward_fn) else type(reward_fn)
    try:
        h.update(inspect.getsource(target).encode())
    except (OSError, TypeError):  # built-ins, C extensions, code typed at a prompt: the name alone
        pass
    return h.hexdigest()


def check_fingerprints(saved: Mapping[str, Any] | None, current: Mapping[str, str], where: str) -> list[str]:
    """Raise `ValueError` naming every input whose fingerprint differs between a checkpoint and this run.

    Args:
        saved: the checkpoint's ``inputs`` (None or missing keys: written before fingerprints existed; not checked).
        current: this run's fingerprints by `INPUTS` key (a subset is compared on its own, e.g. `cory eval`'s model
            and tokenizer).
        where: the checkpoint, for the message.

    Returns:
        The inputs of `current` that could not be checked (absent from `saved`).

    Raises:
        trainers.loop.checkpoint.CheckpointError: (a `ValueError`) one or more inputs changed, each named with what
            it covers.
    """
    saved = dict(saved or {})
    changed = [key for key in INPUTS if key in saved and key in current and saved[key] != current[key]]
    if changed:
        details = "; ".join(f"{key} ({INPUTS[key]}): {saved[key][:12]}.. -> {current[key][:12]}.." for key in changed)
        raise CheckpointError(f"cannot resume {where}: its inputs changed since the run started: {details}. The same "
                         "names now hold other contents; restore them, or start a new --output_dir")
    return [key for key in INPUTS if key in current and key not in saved]
