"""Content fingerprints of what a run depends on: the model's weights, the tokenizer, the query data and the reward.

A resume must train against the same inputs as the run it continues. Names are not enough: ``--model`` may point at
a folder whose weights were replaced, and the reference model is rebuilt from them. The functions here hash each
input by content (`INPUTS`); `CORYTrainer` records them in every checkpoint (``trainer_state.json``, key ``inputs``)
and `check_fingerprints` refuses a resume whose inputs changed, naming which.

Hashes are BLAKE2b (16-byte digests, hex). The weights are hashed as loaded (before LoRA or the copies for two
agents), names, dtypes and shapes included: about 1 s for SmolLM2-135M on this machine class. A reward is hashed by
what it computes, not by its text: its code as Python parses it (docstrings, comments and layout left out), the
values of the module constants it reads, and the functions it wraps. A checkpoint that records no fingerprint of an
input is refused like a changed one.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import textwrap
from typing import Any, Callable, Mapping

import torch

from trainers.loop.checkpoint import CheckpointError

__all__ = ["INPUTS", "check_fingerprints", "data_fingerprint", "model_fingerprint", "reward_fingerprint",
           "tokenizer_fingerprint"]

#: What a fingerprint covers, with what a change means to a resume (the keys of `fingerprints`).
INPUTS = {"model": "the policy model's weights (the reference model is rebuilt from them)",
          "tokenizer": "the tokenizer (vocabulary, merges, special tokens, padding)",
          "data": "the task's queries (records after loading and filtering)",
          "reward": "the reward function (its name and, when readable, its code and the module constants it reads)"}

#: Values of module constants a reward's code may read, hashed by `repr` (anything else is hashed by name only).
_CONSTANTS = (bool, int, float, complex, str, bytes, type(None))


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
    """Hash of the reward's recorded `name` and, when Python can read its source, of what it computes (`_computes`):
    its code as Python parses it, so that a docstring, a comment or the layout may change; the module constants it
    reads by name (``ANSWER_LEN``); and the same of the functions its closure or (for a callable object, hashed
    through its class) its attributes hold, e.g. the 2-argument reward function a normalised one wraps
    (`cory_env.rewards.make_reward_fn`). Objects it holds (a lexicon, a classifier) are not hashed.

    Built-ins, C extensions and code typed at a prompt (no readable source) are hashed by name alone.
    """
    h = _hasher()
    h.update(f"code|{name}".encode())
    for part in _computes(reward_fn, depth=3):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _source(obj: Any) -> str | None:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


def _computes(obj: Any, depth: int) -> list[str]:
    """What `obj` computes, as texts to hash (`reward_fingerprint`); `depth` bounds the functions followed."""
    if inspect.ismethod(obj):
        obj = obj.__func__
    if inspect.isfunction(obj):
        source = _source(obj)
        parts = [] if source is None else [_code_text(source), json.dumps(_constants(obj, source), sort_keys=True)]
        held = [cell.cell_contents for cell in obj.__closure__ or () if _has_contents(cell)]
    else:
        source = _source(type(obj))
        parts = [] if source is None else [_code_text(source)]
        held = [value for _, value in sorted(vars(obj).items())] if hasattr(obj, "__dict__") else []
    if depth > 0:  # functions only: an object held (a model, a pipeline) is data, or another library's code
        for value in held:
            if inspect.isfunction(value) or inspect.ismethod(value):
                parts += _computes(value, depth - 1)
    return parts


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _code_text(source: str) -> str:
    """`source` as Python parses it (`ast.unparse`): docstrings, comments and layout left out. A fragment that does
    not parse alone (a lambda cut out of a longer line) is taken as written."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _constants(fn: Callable, source: str) -> dict[str, str]:
    """``{name: repr(value)}`` of the module constants (numbers, strings, None) that `fn` reads by name; its closure's
    values are left out (a builder's arguments may change between a run and its resume)."""
    try:
        names = {node.id for node in ast.walk(ast.parse(textwrap.dedent(source))) if isinstance(node, ast.Name)}
    except SyntaxError:
        names = set(fn.__code__.co_names)
    names -= set(fn.__code__.co_freevars)
    values = {name: fn.__globals__[name] for name in names if name in fn.__globals__}
    return {name: repr(value) for name, value in sorted(values.items()) if type(value) in _CONSTANTS}


def models_fingerprint(fingerprints: Mapping[str, str]) -> str:
    """One fingerprint of the run's models (or tokenizers): the one value when every model has the same, else the
    hash (`_hasher`) of the sorted ``name: fingerprint`` pairs (a model per slot, docs/seats.md)."""
    values = set(fingerprints.values())
    if len(values) == 1:
        return values.pop()
    digest = _hasher()
    digest.update(json.dumps(dict(sorted(fingerprints.items()))).encode("utf-8"))
    return digest.hexdigest()


def check_fingerprints(saved: Mapping[str, Any], current: Mapping[str, str], where: str) -> None:
    """Raise `ValueError` naming every input whose fingerprint differs between a checkpoint and this run.

    Args:
        saved: the checkpoint's ``inputs``.
        current: this run's fingerprints by `INPUTS` key (a subset is compared on its own, e.g. `cory eval`'s model
            and tokenizer).
        where: the checkpoint, for the message.

    Raises:
        trainers.loop.checkpoint.CheckpointError: (a `ValueError`) one or more inputs changed, each named with what
            it covers.
    """
    changed = [key for key in INPUTS if key in current and saved.get(key) != current[key]]
    if changed:
        details = "; ".join(f"{key} ({INPUTS[key]}): {str(saved.get(key))[:12]}.. -> {current[key][:12]}.."
                            for key in changed)
        raise CheckpointError(f"cannot resume {where}: its inputs changed since the run started: {details}. The same "
                         "names now hold other contents; restore them, or start a new --output_dir")
