"""The cast of a run: its models, each with its agent, frozen reference model, tokenizer, fingerprint and `ModelConfig`,
built by one builder for training, ``--resume``, ``cory eval``, ``cory export`` and ``cory crossplay``.

A run's models are the slots ``llm1`` … ``llmN`` (one per seat, or ``--population N``); each slot has a
`ModelConfig`: the run's, with the slot's own options over it (`ModelConfig.models`, `slot_configs`). A run of one
model is N identical slots. `build_cast` loads each base model (name and dtype) once; within a base, the slots of one
layout (`ModelConfig.layout`: LoRA or full copies, precision, dropout, checkpointing) are built together by
`trainers.loop.build.build_agents` (LoRA: one frozen base with an adapter per slot; full fine-tuning: a copy per slot
and one frozen reference copy). A model's frozen reference is its own base. `load_cast` rebuilds a run's cast from a
checkpoint with the same builder and loads each model's trained weights.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import LLMAgent, ReferenceModel, SamplingConfig
from cory_env.tasks import task_tokenizer
from trainers.config import ModelConfig, RunConfigs
from trainers.loop import checkpoint as ckpt
from trainers.loop.build import build_agents, model_names
from trainers.loop.fingerprint import check_fingerprints, model_fingerprint, models_fingerprint, tokenizer_fingerprint
from trainers.loop.loading import load_policy_model, load_run_tokenizers

__all__ = ["Cast", "Member", "build_cast", "load_cast", "slot_configs"]


def slot_configs(configs: RunConfigs, num_models: int) -> dict[str, ModelConfig]:
    """Model name (``llm1`` … ``llmN``) -> that slot's `ModelConfig`: the run's, with the slot's own options
    (`ModelConfig.models`) over it.

    Raises:
        ValueError: a slot the run does not have (the run's slots named), or a slot value a `ModelConfig` refuses
            (the slot named).
    """
    names = model_names(num_models)
    own = configs.model.models or {}
    if not own:  # one model for every slot: the run's own config, built once
        return dict.fromkeys(names, configs.model)
    unknown = sorted(set(own) - set(names))
    if unknown:
        raise ValueError(f"models names the slot(s) {unknown}, which this run does not have: its seating has "
                         f"{num_models} model slot(s) {list(names)}; name one of them")
    base = dataclasses.replace(configs.model, models=None)
    out = {}
    for name in names:
        try:
            out[name] = dataclasses.replace(base, **own.get(name, {}))
        except ValueError as err:
            raise ValueError(f"models {name}: {err}") from None
    return out


@dataclass
class Member:
    """One model of the cast: `name` (``llm1``), its `agent`, its frozen reference model `ref` (its own base), its
    `tokenizer`, its `config` and `fingerprint` (`trainers.loop.fingerprint.model_fingerprint` of its base as
    loaded, before any adapter)."""

    name: str
    agent: LLMAgent
    ref: ReferenceModel
    tokenizer: Any
    config: ModelConfig
    fingerprint: str


class Cast:
    """The models of a run by name, in slot order (`build_cast`, `load_cast`)."""

    def __init__(self, members: Mapping[str, Member]) -> None:
        self.members = dict(members)

    @property
    def agents(self) -> dict[str, LLMAgent]:
        return {name: m.agent for name, m in self.members.items()}

    @property
    def refs(self) -> dict[str, ReferenceModel]:
        """Model name -> its frozen reference model (models of one base share it)."""
        return {name: m.ref for name, m in self.members.items()}

    @property
    def tokenizers(self) -> dict[str, Any]:
        return {name: m.tokenizer for name, m in self.members.items()}

    def inputs(self) -> dict[str, str]:
        """The ``model`` and ``tokenizer`` fingerprints a checkpoint records (`trainers.loop.fingerprint`)."""
        return {"model": models_fingerprint({n: m.fingerprint for n, m in self.members.items()}),
                "tokenizer": models_fingerprint({n: d["tokenizer"] for n, d in self.describe().items()})}

    def describe(self) -> dict[str, dict[str, Any]]:
        """Model name -> what a checkpoint records of it: its base, dtype, layout, vocabulary size and tokenizer
        fingerprint (computed once per tokenizer, then kept)."""
        if not hasattr(self, "_described"):
            once = {id(m.tokenizer): tokenizer_fingerprint(m.tokenizer) for m in self.members.values()}
            self._described = {name: {"model": m.config.model, "dtype": m.config.dtype, "use_lora": m.config.use_lora,
                                      "vocab_size": len(m.tokenizer), "tokenizer": once[id(m.tokenizer)]}
                               for name, m in self.members.items()}
        return {name: dict(d) for name, d in self._described.items()}


def build_cast(slots: Mapping[str, ModelConfig], tokenizers: Mapping[str, Any], sampling: SamplingConfig, *,
               seed: int, device, task_tok=None, model=None) -> Cast:
    """The cast of `slots`, built as the module docstring says (a LoRA adapter per slot with its own rank and targets).

    Args:
        slots: model name -> its `ModelConfig` (`slot_configs`).
        tokenizers: the model's name as given (``--model``'s spelling, e.g. ``"tiny-bpe"``) -> its tokenizer
            (`trainers.loop.loading.load_run_tokenizers`).
        sampling: every agent's default sampling (a seat's own settings are an argument of the rollout).
        seed: the tiny models' initialisation seed.
        device: where the models live.
        task_tok: the task's own tokenizer (tiny models over it).
        model: an already loaded policy model for the slots' one base (`CORYTrainer(model=...)`); None loads it.

    Raises:
        ValueError: `model` with slots of several bases; a LoRA target module one architecture lacks (the slot and
            the fix named); what `build_agents` refuses.
    """
    bases: dict[tuple, list[str]] = {}
    for name, config in slots.items():
        bases.setdefault((config.model, config.dtype), []).append(name)
    if model is not None and len(bases) > 1:
        raise ValueError("a model given to the trainer (CORYTrainer(model=...)) serves every slot, but this run names "
                         "a model per slot (ModelConfig.models); leave model=None (each slot loads its own)")
    members: dict[str, Member] = {}
    for (model_name, dtype), names in bases.items():
        tok = tokenizers[model_name]
        base = model if model is not None else load_policy_model(model_name, seed=seed, dtype=dtype,
                                                                 task_tokenizer=task_tok, tokenizer=tok)[0]
        base.to(device)
        fingerprint = model_fingerprint(base)  # as loaded: the reference model is built from it
        layouts: dict[tuple, list[str]] = {}
        for name in names:
            layouts.setdefault(slots[name].layout, []).append(name)
        for k, group in enumerate(layouts.values()):
            own = base if k == len(layouts) - 1 else copy.deepcopy(base)  # each layout its own base
            try:
                agents, ref = build_agents(own, tok, slots[group[0]], sampling, slots={n: slots[n] for n in group})
            except ValueError as err:
                if "Target modules" in str(err) or "target_modules" in str(err):
                    raise ValueError(f"models {', '.join(group)} ({model_name}): a LoRA target module is not in "
                                     f"this architecture ({err}); set {group[0]}.lora_target_modules to its module "
                                     "names (Llama: q_proj,v_proj; GPT-2: c_attn)") from None
                raise
            for name in group:
                members[name] = Member(name, agents[name], ref, tok, slots[name], fingerprint)
    return Cast({name: members[name] for name in slots})


def load_cast(checkpoint: str | Path, *, only: str | None = None, extra_of: str | None = None, device="cpu"):
    """(the cast of the run a checkpoint belongs to, with every model's trained weights; its configs; the
    checkpoint's trainer state; the checkpoint folder): rebuilt from the run's recorded configs by `build_cast`, as
    the run built it, and refused when the base models or tokenizers behind the recorded names changed.

    Args:
        checkpoint: a checkpoint folder, or a run directory (its latest checkpoint).
        only: load this model's trained weights alone (``cory eval``, ``cory export``); None: every model's.
        extra_of: also build one model of this slot's layout that is never loaded (``"base"`` in the cast): the
            model before training (a fresh LoRA adapter is the base model; a full copy its weights).
        device: where the models live.

    Raises:
        FileNotFoundError: no checkpoint there. CheckpointError: another checkpoint format, changed inputs, a
            damaged file. ValueError: `extra_of` not a model of the run.
    """
    path = ckpt.find_checkpoint(checkpoint)
    state = ckpt.read_trainer_state(path)
    configs = RunConfigs.from_flat(state["config"])
    slots = slot_configs(configs, len(state["models"]))
    if extra_of is not None and extra_of not in slots:
        raise ValueError(f"{extra_of!r} is not a model of this run; choose one of {list(slots)}")
    built = build_cast({**slots, **({"base": slots[extra_of]} if extra_of else {})}, load_run_tokenizers(configs),
                       configs.sampling, seed=configs.run.seed, device=device,
                       task_tok=task_tokenizer(configs.task_spec))
    trained = Cast({name: built.members[name] for name in slots})
    check_fingerprints(state["inputs"], trained.inputs(), str(path))
    for name, member in trained.members.items():
        if only is None or name == only:
            ckpt.load_agent(path, name, member.agent)
    return built, configs, state, path
