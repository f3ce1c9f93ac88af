"""Atomic, resumable checkpoints of a CORY (or PPO baseline) run.

Layout of `<output_dir>/checkpoints/iter-000010/` (iteration 10 done):

```
trainer_state.json          iteration, seat assignment, config, model identity, vocabulary size
rng.pt                      torch RNG state (loaded with weights_only=True)
llm1/trainable.safetensors  the bundle's trainable tensors (full model, or its LoRA adapter) + value head
llm1/learner.pt             optimizer state (weights_only=True)
llm1/learner.json           KL controller and score statistics
llm2/...
```

A checkpoint is written into a temporary folder and renamed into place (`os.replace`), then the `latest` pointer
file is replaced atomically: a crash or a full disk mid-write leaves the previous checkpoint loadable. Only
safetensors and `torch.load(weights_only=True)` are used to read, so a checkpoint cannot execute code.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, unsafe, or does not match the run it is loaded into."""


def trainable_state(agent) -> dict[str, torch.Tensor]:
    """The agent's trainable tensors by parameter name (shared tensors once), contiguous CPU copies."""
    wanted = {id(p) for p in agent.trainable_parameters()}
    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, param in agent.named_parameters():
        if id(param) in wanted and id(param) not in seen:
            seen.add(id(param))
            state[name] = param.detach().to("cpu").contiguous().clone()
    return state


def load_trainable_state(agent, state: dict[str, torch.Tensor], *, where: str) -> None:
    """Copy `state` into the agent's trainable parameters in place.

    Raises:
        CheckpointError: if names or shapes differ (a checkpoint of another model or vocabulary).
    """
    params = dict(agent.named_parameters())
    own = set(trainable_state_names(agent))
    missing, unexpected = own - set(state), set(state) - own
    if missing or unexpected:
        raise CheckpointError(
            f"{where} does not match this model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}; "
            "was it written by a run with another model or use_lora setting?"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            if params[name].shape != tensor.shape:
                raise CheckpointError(
                    f"{where}: parameter {name} has shape {tuple(tensor.shape)} in the checkpoint but "
                    f"{tuple(params[name].shape)} in the model (another model or vocabulary?)"
                )
            params[name].copy_(tensor)


def trainable_state_names(agent) -> list[str]:
    wanted = {id(p) for p in agent.trainable_parameters()}
    names, seen = [], set()
    for name, param in agent.named_parameters():
        if id(param) in wanted and id(param) not in seen:
            seen.add(id(param))
            names.append(name)
    return names


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True), encoding="utf-8")


def save_checkpoint(output_dir: str | os.PathLike, iteration: int, *, bundles: dict, exchange_state: dict,
                    run_state: dict[str, Any], keep: int = 2) -> Path:
    """Write the checkpoint for `iteration` (0-based, done) atomically and point `latest` at it.

    Args:
        output_dir: run directory.
        iteration: the last completed iteration.
        bundles: name -> `Bundle` (agent + learner).
        exchange_state: `RoleExchange.state_dict()`.
        run_state: JSON-able run identity (config, model name, vocab size, ...).
        keep: how many checkpoints to keep (older ones are deleted after the new one is in place).

    Returns:
        The checkpoint folder.

    Raises:
        OSError: if writing fails (e.g. disk full); the previous checkpoint and `latest` are untouched.
    """
    root = Path(output_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter-{iteration:06d}"
    tmp = root / f".tmp-iter-{iteration:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        for name, bundle in bundles.items():
            sub = tmp / name
            sub.mkdir()
            save_file(trainable_state(bundle.agent), str(sub / "trainable.safetensors"))
            learner_state = bundle.learner.state_dict()
            torch.save(learner_state.pop("optimizer"), sub / "learner.pt")
            _write_json(sub / "learner.json", learner_state)
        torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
        _write_json(tmp / "trainer_state.json",
                    {"iteration": iteration, "exchange": exchange_state, **run_state})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = root / f".{LATEST}.tmp"
        pointer_tmp.write_text(final.name, encoding="utf-8")
        os.replace(pointer_tmp, root / LATEST)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = sorted(p for p in root.glob("iter-*") if p.is_dir() and p != final)
    for stale in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    logger.info("checkpoint written: %s", final)
    return final


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The folder `latest` points at, or None when the run has no checkpoint."""
    root = Path(output_dir) / CHECKPOINT_DIR
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text(encoding="utf-8").strip()
    return path if path.is_dir() else None


def read_trainer_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    path = Path(checkpoint) / "trainer_state.json"
    if not path.exists():
        raise CheckpointError(f"{checkpoint} is not a cory checkpoint: {path.name} is missing")
    return json.loads(path.read_text(encoding="utf-8"))


def _safe_torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle payloads that weights_only refuses land here
        raise CheckpointError(
            f"refusing to load {path}: it is not a plain tensor/state file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}). cory only loads weights_only checkpoints."
        ) from exc


def load_bundle(checkpoint: str | os.PathLike, bundle, *, with_learner: bool = True) -> None:
    """Restore one bundle (agent weights, and optionally the learner's state) from `checkpoint/<bundle.name>`."""
    sub = Path(checkpoint) / bundle.name
    weights = sub / "trainable.safetensors"
    if not weights.exists():
        raise CheckpointError(f"{weights} is missing: incomplete checkpoint or another run's folder")
    load_trainable_state(bundle.agent, load_file(str(weights)), where=str(weights))
    if with_learner:
        state = json.loads((sub / "learner.json").read_text(encoding="utf-8"))
        state["optimizer"] = _safe_torch_load(sub / "learner.pt")
        bundle.learner.load_state_dict(state)


def load_checkpoint(checkpoint: str | os.PathLike, *, bundles: dict, exchange) -> dict[str, Any]:
    """Restore every bundle, the seat assignment and the torch RNG; returns the trainer state."""
    state = read_trainer_state(checkpoint)
    for bundle in bundles.values():
        load_bundle(checkpoint, bundle)
    exchange.load_state_dict(state["exchange"])
    rng = _safe_torch_load(Path(checkpoint) / "rng.pt")
    torch.set_rng_state(rng["torch"])
    return state
