"""Loading a run's models and tokenizers by name: a hub id, a local folder, a ``.gguf`` file, the offline alias
(`cory_env.hub`, `agents.loading`), or a tiny random model for tests and the toys (`TINY_MODELS`)."""

from __future__ import annotations

import torch

from agents import load_model_and_tokenizer
from agents.loading import load_model, load_tokenizer
from agents.tiny import tiny_causal_lm, tiny_tokenizer
from cory_env.tasks import task_tokenizer
from trainers.config import DTYPES, RunConfigs

__all__ = ["TINY_MODELS", "load_model_tokenizer", "load_policy_model", "load_run_model", "load_run_tokenizers",
           "run_model_names", "tiny_variant", "torch_dtype"]

#: The tiny random models (`tiny_variant`): ``tiny`` (Llama), ``tiny-gpt2`` (GPT-2), each over the task's own
#: tokenizer when it has one (else the tiny byte-level BPE), and ``tiny-bpe`` / ``tiny-gpt2-bpe`` over the tiny BPE
#: whatever the task: a second model with another architecture and another tokenizer (docs/seats.md).
TINY_MODELS = ("tiny", "tiny-gpt2", "tiny-bpe", "tiny-gpt2-bpe")


def tiny_variant(name: str) -> tuple[str, bool] | None:
    """``(arch, bpe)`` of a tiny model name (`TINY_MODELS`): its architecture (``"llama"``, ``"gpt2"``) and whether
    it brings the tiny BPE tokenizer whatever the task; None for any other name."""
    if name not in TINY_MODELS:
        return None
    return ("gpt2" if "gpt2" in name else "llama"), name.endswith("-bpe")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for `ModelConfig.dtype` ("float32", "bfloat16", "float16").

    Raises:
        ValueError: for another name (lists the valid ones).
    """
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}")
    return getattr(torch, name)


def load_policy_model(name: str, *, seed: int = 0, dtype: str = "float32", task_tokenizer=None, tokenizer=None):
    """(model, tokenizer) for `ModelConfig.model` with parameters in `dtype`.

    Args:
        name: hub id, local folder, ``.gguf`` file or alias (`agents.load_model_and_tokenizer`), or a tiny random
            model (`TINY_MODELS`): ``"tiny"`` is a tiny Llama built for `task_tokenizer` when given (a task with its
            own vocabulary, `cory_env.tasks.task_tokenizer`), else for the tiny BPE tokenizer; ``"tiny-gpt2"`` the
            same as GPT-2; ``"tiny-bpe"`` / ``"tiny-gpt2-bpe"`` always over the tiny BPE. A pretrained model keeps
            its own tokenizer.
        seed: the tiny model's initialisation seed.
        dtype: `ModelConfig.dtype`.
        tokenizer: the tokenizer already loaded for this model (`load_model_tokenizer`): only the model is loaded.
    """
    tiny = tiny_variant(name)
    if tiny is not None:
        arch, bpe = tiny
        if tokenizer is None:
            tokenizer = tiny_tokenizer() if task_tokenizer is None or bpe else task_tokenizer
        return tiny_causal_lm(tokenizer, arch=arch, seed=seed).to(torch_dtype(dtype)), tokenizer
    if tokenizer is None:
        return load_model_and_tokenizer(name, dtype=torch_dtype(dtype))
    return load_model(name, tokenizer, dtype=torch_dtype(dtype)), tokenizer


def load_model_tokenizer(name: str, task_spec):
    """The tokenizer of model `name` before the model: for a tiny model the task's own (`cory_env.tasks.
    task_tokenizer`) unless the variant brings the tiny BPE (`tiny_variant`), else the model's
    (`agents.loading.load_tokenizer`; a GGUF alias is converted into the cache on first use)."""
    tiny = tiny_variant(name)
    if tiny is not None:
        return (None if tiny[1] else task_tokenizer(task_spec)) or tiny_tokenizer()
    return load_tokenizer(name)


def load_run_tokenizers(configs: RunConfigs) -> dict[str, object]:
    """Every model the run names (`run_model_names`: ``--model``'s and each slot's own) -> its tokenizer, loaded
    before the models (`load_model_tokenizer`); models of one tokenizer share the object (their seats splice ids, no
    text channel)."""
    from trainers.loop.fingerprint import tokenizer_fingerprint
    names = run_model_names(configs)
    if len(names) == 1:
        return {names[0]: load_model_tokenizer(names[0], configs.task_spec)}
    out, seen = {}, {}
    for name in names:
        tok = load_model_tokenizer(name, configs.task_spec)
        out[name] = seen.setdefault(tokenizer_fingerprint(tok), tok)
    return out


def run_model_names(configs: RunConfigs) -> list[str]:
    """Every model name of the run, once each: ``--model``'s (when a slot keeps it) and each slot's own
    (`ModelConfig.models`), ``--model``'s first."""
    own = [slot["model"] for slot in (configs.model.models or {}).values() if "model" in slot]
    return list(dict.fromkeys([configs.model.model, *own]))


def load_run_model(configs: RunConfigs, tokenizer=None):
    """(model, tokenizer) of a run's ``--model``: `load_policy_model` with its model name, dtype and seed, and its
    task's own tokenizer for the tiny model; with `tokenizer` (`load_run_tokenizers`), only the model is loaded."""
    return load_policy_model(configs.model.model, seed=configs.run.seed, dtype=configs.model.dtype,
                             task_tokenizer=task_tokenizer(configs.task_spec), tokenizer=tokenizer)


