"""Sharded training on PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and Adam state
split over the data-parallel processes (``--sharding fsdp``).

What is sharded (`shard_agents`): every policy LM is wrapped with ``fully_shard`` per decoder layer (the classes its
``_no_split_modules`` names, as accelerate's FSDP auto-wrap picks them) and at the root, its value head on its own,
and the frozen reference model the same way (no gradient, no optimizer). Each process then holds 1/W of every
weight as a ``DTensor`` shard; the optimizer (built after sharding) holds 1/W of the Adam moments. The same code
runs on GPUs (NCCL) and on CPUs (gloo), on the process group the launcher started.

Who does what:

* FSDP2 all-gathers a layer's weights before its forward and frees them after it (``reshard_after_forward``), and in
  backward reduce-scatters the gradients, averaged over the processes: the engine's averaging replaces the
  replicated mode's bucketed all-reduce (`DataParallel.sync_gradients` skips ``DTensor`` parameters). The learners'
  token-weighted loss scaling (`trainers.learning.update.step_loss_weights`) stays as it is, so the averaged gradient
  is the gradient of the token mean over the whole step, as in the replicated mode.
* Rollouts (`gathered_for_generation`): each process generates until its own batch is done, so processes take
  different numbers of forward steps, and per-layer all-gathers at every step would wait forever or fail. The acting
  agent's weights are therefore gathered once when it starts acting (``FSDPModule.unshard``, kept through the
  episode's steps) and freed when the next agent acts or the rollout ends: the memory of one full policy during
  generation, as TRL's ``unwrap_model_for_generation`` does for DeepSpeed ZeRO-3.
* Checkpoints (`full_tensor`, `full_state`, `shard_like`): gathered into full tensors (a collective on every
  process; only the main process keeps them) and written in the replicated mode's format, so ``cory eval``,
  ``cory export`` and ``from_pretrained`` read them as any other checkpoint; a resume reads the full tensors on
  every process and keeps each process's shard (``distribute_tensor(..., src_data_rank=None)``: no communication).

Supported: full fine-tuning (fp32 or bf16 weights) of CORY and the single-agent baseline, with the built-in
learners (``ppo``, ``grpo``; a registered factory opts in with ``factory.supports_sharding = True``: its learner
keeps its ``torch.optim`` optimizer as ``learner.optimizer``, whose state is ``state_dict()["optimizer"]``), role
exchange (each model keeps its shards when the seats swap), activation checkpointing. Refused (`check_sharding`): one
process, and memory-shared LoRA (its one frozen base serves both policies and the reference model: sharding it would
gather the whole base for every adapter's forward; with LoRA the trainable state is small and the replicated mode
already holds the base once per process).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from agents.precision import cast_frozen_weights_once
from trainers.config import SHARDINGS
from trainers.distributed import full_tensor, is_sharded

logger = logging.getLogger(__name__)

__all__ = ["SHARDINGS", "check_sharding", "full_state", "full_tensor", "gathered_for_generation", "is_sharded",
           "shard_agents", "shard_like", "shard_model", "sharded_optimizer_state"]


def check_sharding(sharding: str, *, world_size: int, use_lora: bool) -> None:
    """Refuse a `CORYConfig.sharding` this run (`world_size` processes, `ModelConfig.use_lora`) cannot use.

    Raises:
        ValueError: an unknown name, ``fsdp`` with one process, or ``fsdp`` with memory-shared LoRA; each message
            says what to do instead.
    """
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    if sharding == "none":
        return
    if world_size < 2:
        raise ValueError("--sharding fsdp splits the models over processes and needs at least 2: launch with "
                         "`cory train --num_processes N` (or torchrun / accelerate launch --multi_gpu), or use "
                         "--sharding none")
    if use_lora:
        raise ValueError("--sharding fsdp shards full fine-tuning only: memory-shared LoRA keeps one frozen base for "
                         "both policies and the reference model; use --use_lora true with --sharding none (the base "
                         "is held once per process), or --use_lora false to shard a full fine-tune")


def full_state(state: Any) -> Any:
    """`state` (nested dicts, lists, tuples) with every ``DTensor`` replaced by its full tensor (`full_tensor`; a
    collective per ``DTensor``, in the nesting's order, which is the same on every process)."""
    if isinstance(state, Mapping):
        return {key: full_state(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(full_state(value) for value in state)
    return full_tensor(state) if isinstance(state, torch.Tensor) else state


def shard_like(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """A full tensor (from a checkpoint) laid out as `param`: its shard of it when `param` is a ``DTensor`` (taken
    locally, no communication: every process holds the same full `value`), else `value` itself.

    Raises:
        ValueError: `value`'s shape differs from `param`'s global shape.
    """
    if not is_sharded(param):
        return value
    if tuple(value.shape) != tuple(param.shape):
        raise ValueError(f"a tensor of shape {tuple(value.shape)} cannot fill a parameter of shape "
                         f"{tuple(param.shape)}")
    from torch.distributed.tensor import distribute_tensor
    return distribute_tensor(value.to(param.dtype), param.device_mesh, param.placements, src_data_rank=None)


def sharded_optimizer_state(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A ``torch.optim`` state dict with whole tensors (a checkpoint) laid out for `optimizer`'s parameters: each
    per-parameter tensor of a parameter's shape becomes that parameter's FSDP2 shard (`shard_like`; scalars such
    as Adam's ``step`` and anything of another shape stay as they are). The identity when no parameter is sharded.

    Raises:
        ValueError: the state names more parameters than `optimizer` has.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    ids = [i for group in state.get("param_groups", []) for i in group["params"]]
    if len(ids) > len(params):
        raise ValueError(f"the optimizer state holds {len(ids)} parameters, this optimizer {len(params)}")
    by_id = dict(zip(ids, params))
    out = dict(state)
    out["state"] = {
        key: {name: shard_like(value, by_id[key]) if isinstance(value, torch.Tensor) and key in by_id
              and value.shape == by_id[key].shape else value for name, value in per_param.items()}
        for key, per_param in state.get("state", {}).items()}
    return out


def _layer_classes(model: nn.Module) -> set[str]:
    return set(getattr(model, "_no_split_modules", None) or [])


def shard_model(model: nn.Module, mesh) -> nn.Module:
    """``fully_shard`` `model` in place: each decoder layer (the classes of ``model._no_split_modules``), then the
    root (embeddings, final norm, output head: tied embeddings stay one parameter). ``reshard_after_forward=True``:
    a layer's full weights exist only during its forward and backward.

    Args:
        model: a ``transformers`` causal LM (or a value head: then only the root).
        mesh: a 1-D ``DeviceMesh`` over the data-parallel processes.

    Returns:
        `model` (now also an ``FSDPModule``).
    """
    from torch.distributed.fsdp import fully_shard
    cast_frozen_weights_once(model, once=False)  # a kept bf16 copy of a gathered weight would undo the sharding
    classes = _layer_classes(model)
    for module in model.modules():
        if module is not model and type(module).__name__ in classes:
            fully_shard(module, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model


def shard_agents(agents: Mapping[str, Any], ref_model, dist) -> None:
    """Shard every agent's LM and value head and the reference model over `dist`'s processes (`shard_model`),
    before any optimizer is built; the main process's weights are broadcast first.

    Args:
        agents: name -> `agents.LLMAgent` (full fine-tuning: each with its own LM).
        ref_model: the `agents.ReferenceModel` (a separate frozen copy).
        dist: the run's `trainers.distributed.DataParallel` (``world_size`` >= 2).
    """
    mesh = dist.device_mesh()
    for agent in agents.values():
        dist.broadcast_parameters(agent.parameters())
        shard_model(agent.model, mesh)
        shard_model(agent.value_head, mesh)
    dist.broadcast_parameters(ref_model.model.parameters())
    shard_model(ref_model.model, mesh)
    logger.info("sharded %s and the reference model over %d processes (FSDP2)", ", ".join(agents), dist.world_size)


def _fsdp_modules(agent) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule
    return [m for m in agent.modules() if isinstance(m, FSDPModule)]


class _GatheredAgent:
    """An agent whose full weights are gathered when it acts (see `gathered_for_generation`)."""

    def __init__(self, agent, gather) -> None:
        self._agent, self._gather = agent, gather

    def act_batch(self, obs, generator=None, **kwargs):
        self._gather.activate(self._agent)
        return self._agent.act_batch(obs, generator=generator, **kwargs)

    def __getattr__(self, name: str):  # last_logprobs, last_values, acting_scores_exact, reset_cache, ...
        return getattr(self._agent, name)


class _Gather:
    def __init__(self) -> None:
        self.active: list[nn.Module] = []
        self.agent = None

    def activate(self, agent) -> None:
        if agent is self.agent:
            return
        self.release()
        modules = _fsdp_modules(agent)
        for module in modules:
            module.set_reshard_after_forward(False)
        for module in modules:
            module.unshard()  # an all-gather: every process reaches it in the same seat order
        self.active, self.agent = modules, agent

    def release(self) -> None:
        for module in self.active:
            module.reshard()
            module.set_reshard_after_forward(True)
        self.active, self.agent = [], None


@contextlib.contextmanager
def gathered_for_generation(agents: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Seat -> agent for `trainers.rollout.run_episodes`, acting on gathered weights when they are sharded (the
    module docstring's "Rollouts"); without sharded agents the mapping is returned as it is."""
    if not any(_fsdp_modules(agent) for agent in agents.values()):
        yield agents
        return
    gather = _Gather()
    try:
        yield {seat: _GatheredAgent(agent, gather) for seat, agent in agents.items()}
    finally:
        gather.release()
