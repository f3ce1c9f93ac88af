"""Built-in CORY tasks and the task registry.

`make_task(name, config, tokenizer)` builds a `Task` by name; builders are imported lazily, so a task whose
module is missing or needs extra data costs nothing until it is asked for.

| name | builder | queries | reward |
|---|---|---|---|
| ``"imdb"`` | `cory_env.tasks.imdb.make_imdb_task` | IMDB review openings (2-7 tokens) | `EnvConfig.reward` |
| ``"gsm8k"`` | `cory_env.tasks.gsm8k.make_gsm8k_task` | GSM8K questions (whole) | answer correctness |
| ``"tiny_vocab"`` | `cory_env.tasks.tiny_vocab.make_tiny_vocab_task` | 4 of 16 symbols | split them with the partner |
| ``"relay"`` | `cory_env.tasks.relay.make_relay_task` | 4 of 16 symbols, seen by the pioneer only | the observer repeats the pioneer's valid symbols |
| ``"chain_relay"`` | `cory_env.tasks.chain_relay.make_chain_relay_task` | 4 of 16 symbols, seen by the first of 3 seats only | every seat names query symbols it can only learn down the chain |

`task_tokenizer(name)` gives a task's own tokenizer (the toy tasks' 20-token vocabulary), None for tasks that use
the model's.
"""

from __future__ import annotations

import importlib

from cory_env.tasks.base import Task

__all__ = ["TASK_BUILDERS", "TASK_TOKENIZERS", "Task", "make_task", "task_tokenizer"]

#: Task name -> "module:function" of its builder ``builder(config, tokenizer) -> Task``.
TASK_BUILDERS: dict[str, str] = {
    "imdb": "cory_env.tasks.imdb:make_imdb_task",
    "gsm8k": "cory_env.tasks.gsm8k:make_gsm8k_task",
    "tiny_vocab": "cory_env.tasks.tiny_vocab:make_tiny_vocab_task",
    "relay": "cory_env.tasks.relay:make_relay_task",
    "chain_relay": "cory_env.tasks.chain_relay:make_chain_relay_task",
}
#: Task name -> "module:function" of the tokenizer the task brings with it (its own vocabulary): what a tiny random
#: model is built for, and the Gymnasium view's default tokenizer. Tasks not listed use the model's tokenizer.
TASK_TOKENIZERS: dict[str, str] = {
    "tiny_vocab": "cory_env.tasks.tiny_vocab:tiny_vocab_tokenizer",
    "relay": "cory_env.tasks.tiny_vocab:tiny_vocab_tokenizer",
    "chain_relay": "cory_env.tasks.tiny_vocab:tiny_vocab_tokenizer",
}


def _load(spec: str):
    module_name, func_name = spec.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def task_tokenizer(name: str):
    """A fresh copy of the tokenizer task `name` brings with it (`TASK_TOKENIZERS`), or None when the task works
    with any tokenizer."""
    return _load(TASK_TOKENIZERS[name])() if name in TASK_TOKENIZERS else None


def make_task(name: str, config, tokenizer) -> Task:
    """Build a registered task.

    Args:
        name: a key of `TASK_BUILDERS`.
        config: the `EnvConfig` the builder reads (data path, lengths, reward name, templates).
        tokenizer: the env's tokenizer (a builder may use it, e.g. for an action mask).

    Returns:
        The `Task`.

    Raises:
        ValueError: for an unknown name.
        ImportError: if the builder's module cannot be imported.
    """
    if name not in TASK_BUILDERS:
        raise ValueError(f"unknown task {name!r}; use one of {sorted(TASK_BUILDERS)} or pass a Task object")
    return _load(TASK_BUILDERS[name])(config, tokenizer)
