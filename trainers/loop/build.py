"""The agents of one loaded base model in one layout (`build_agents`), their frozen copies (a population's snapshots:
`freeze_bundle`, `discard_snapshot`), the context check and the run's seeding; the cast of a run is built from them
(`trainers.loop.cast`). The two layouts (full fine-tuning copies, memory-shared LoRA) are `agents.reference`'s.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping

import torch

from agents import LLMAgent, ReferenceModel, SamplingConfig, build_shared_lora, copy_for_agents
from agents.dropout import disable_dropout
from agents.precision import cast_frozen_weights_once, resolve_precision
from trainers.config import ModelConfig
from trainers.learning.joint import FrozenLearner
from trainers.loop.role_exchange import Bundle

logger = logging.getLogger(__name__)

def enable_activation_checkpointing(model) -> None:
    """transformers' activation (gradient) checkpointing on every decoder layer, non-reentrant (works with a frozen
    LoRA base, whose inputs need no gradient, and with dropout). transformers >= 5.2 names it
    ``activation_checkpointing_enable``; older versions ``gradient_checkpointing_enable``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def model_names(num_models: int) -> tuple[str, ...]:
    """``("llm1", …, "llmN")``: the model identities (the paper's plot labels), one per seat."""
    return tuple(f"llm{k}" for k in range(1, num_models + 1))


def build_agents(model, tokenizer, model_config: ModelConfig, sampling: SamplingConfig, *,
                 num_models: int = 2, slots: Mapping[str, ModelConfig] | None = None
                 ) -> tuple[dict[str, LLMAgent], ReferenceModel]:
    """`num_models` agents (`llm1` … `llmN`, one per seat: 2 for CORY, 1 for the single-agent seating) and the shared
    frozen reference model, in `model_config`'s layout (full fine-tuning copies, or memory-shared LoRA), sampling
    with `sampling`; the agents are in eval mode (the learners switch to train mode only inside their update), and
    with `ModelConfig.disable_dropout` every dropout in them has probability 0 (`agents.dropout.disable_dropout`).
    Agents and reference compute in `ModelConfig.precision` (resolved for the model's device:
    `agents.precision.resolve_precision`); under a mixed precision the frozen weights' linear layers cast their
    weight once per change instead of at every product (`agents.precision.CastOnceLinear`: the same numbers).

    `slots` (model name -> its `ModelConfig`, `trainers.loop.cast.build_cast`): build those names instead of ``llm1`` …
    ``llmN``, each LoRA adapter with its slot's rank, alpha, dropout and targets (the rest of the layout is
    `model_config`'s).

    Raises:
        ValueError: ``dtype="float16"`` on a CPU; ``precision="fp16-mixed"`` on a CPU."""
    names = tuple(slots) if slots is not None else model_names(num_models)
    slots = dict(slots) if slots is not None else dict.fromkeys(names, model_config)
    device = next(model.parameters()).device
    if device.type == "cpu" and model_config.dtype == "float16":
        raise ValueError("dtype='float16' is refused on a CPU: CPU float16 matmuls are missing or slower than "
                         "float32, and float16 updates need loss scaling; use --dtype float32 (with --precision "
                         "bf16-mixed for speed) or bfloat16")
    precision = resolve_precision(model_config.precision, device)
    if not sampling.is_exact:
        logger.warning("top_k=%s / top_p=%s / repetition_penalty=%s: tokens are drawn from a truncated or penalised "
                       "softmax, while the learners score them under logits / temperature (the action mask "
                       "included): the PPO ratio and the KL are then approximate (slightly off-policy); use top_k 0, "
                       "top_p 1, repetition_penalty 1 for exact on-policy updates", sampling.top_k, sampling.top_p,
                       sampling.repetition_penalty)
    head_dropout = model_config.value_head_dropout
    if model_config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if model_config.dtype != "float32" and not model_config.use_lora:
        logger.warning("dtype=%s with full fine-tuning: Adam updates the %s weights directly (no float32 master "
                       "copy), so updates smaller than the weights' rounding step are lost; prefer float32 for full "
                       "fine-tuning, or --use_lora true (adapters stay float32)", model_config.dtype,
                       model_config.dtype)
    if model_config.use_lora:
        from peft import LoraConfig
        lora = {n: LoraConfig(r=c.lora_r, lora_alpha=c.lora_alpha, lora_dropout=c.lora_dropout,
                              target_modules=c.lora_modules, bias="none", task_type="CAUSAL_LM")
                for n, c in slots.items()}
        shared = build_shared_lora(model, adapter_names=names, lora_config=lora)
        agents = {n: LLMAgent(shared, tokenizer, sampling=sampling, adapter_name=n, value_head_dropout=head_dropout,
                              precision=precision) for n in names}
        ref = ReferenceModel(shared, disable_adapters=True, precision=precision)
    else:
        policies, ref = copy_for_agents(model, len(names))
        ref.precision = precision
        agents = {n: LLMAgent(policy, tokenizer, sampling=sampling, value_head_dropout=head_dropout,
                              precision=precision) for n, policy in zip(names, policies)}
    for agent in agents.values():  # peft leaves a LoRA model in train mode: dropout must not touch rollouts/scoring
        agent.eval()
    if model_config.disable_dropout:  # rollout scoring (eval mode) and update (train mode): one function
        disable_dropout(*agents.values())
    if precision != "fp32":  # frozen weights (LoRA base, reference copy) cast to bf16/fp16 once, not per product
        cast_frozen_weights_once(ref.model)
    return agents, ref


def check_model_context(agents: Mapping[str, LLMAgent], window: int) -> None:
    """Refuse a model whose context (``max_position_embeddings`` / ``n_positions`` of its config) is shorter than
    the env's window, `window` tokens (``context_len``: a seat's prompt and answer together): they would not fit it.

    Raises:
        ValueError: naming the model, its context and the fix.
    """
    for name, agent in agents.items():
        config = getattr(agent.model, "config", None)
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if limit is not None and int(limit) < window:
            raise ValueError(f"model {name} holds {int(limit)} positions, but a seat's window (context_len) is "
                             f"{window} tokens; lower context_len to <= {int(limit)}, or seat a model with a longer "
                             "context")


def freeze_bundle(bundle: Bundle, name: str) -> Bundle:
    """A frozen copy of `bundle` named `name` (a snapshot partner, never updated: its learner is a
    `trainers.learning.joint.FrozenLearner`): for a LoRA agent a new adapter `name` in its shared ``PeftModel``
    holding a copy of the source adapter's weights (the base stays shared), else a deep copy of the model; a copy of
    the value head; the same tokenizer, sampling and precision. `discard_snapshot` frees it."""
    agent = bundle.agent
    if agent.adapter_name is not None:
        from agents.reference import is_adapter_parameter, preserved_requires_grad
        shared = agent.model
        with preserved_requires_grad(shared):
            shared.add_adapter(name, copy.deepcopy(shared.peft_config[agent.adapter_name]))
        params = dict(shared.named_parameters())
        with torch.no_grad():
            for n, p in params.items():
                if is_adapter_parameter(n, agent.adapter_name):
                    target = ".".join(name if part == agent.adapter_name else part for part in n.split("."))
                    params[target].copy_(p)
        frozen = LLMAgent(shared, agent.tokenizer, value_head=copy.deepcopy(agent.value_head),
                          sampling=agent.sampling, adapter_name=name, precision=agent.precision)
    else:
        frozen = LLMAgent(copy.deepcopy(agent.model), agent.tokenizer, value_head=copy.deepcopy(agent.value_head),
                          sampling=agent.sampling, precision=agent.precision)
    frozen.eval()
    return Bundle(name, frozen, FrozenLearner())


def discard_snapshot(bundle: Bundle) -> None:
    """Free a retired snapshot (`freeze_bundle`): its LoRA adapter leaves the shared ``PeftModel``, so the model holds
    one adapter per model in the pool, not one per snapshot ever taken (a full copy is freed with the bundle)."""
    agent = bundle.agent
    if agent.adapter_name is not None and agent.adapter_name in agent.model.peft_config:
        from agents.reference import preserved_requires_grad
        with preserved_requires_grad(agent.model):  # peft would make the next active adapter trainable, others not
            agent.model.delete_adapter(agent.adapter_name)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed torch's global RNG; with `deterministic`, ``torch.use_deterministic_algorithms(True, warn_only=True)``
    without torch's filling of every new tensor's memory (``torch.utils.deterministic.fill_uninitialized_memory``).

    That fill (NaN into every ``torch.empty``) is a debugging aid that torch's documentation says to turn off for
    speed in a program that never reads memory before writing it: every op here writes its output first, so the
    results are the same with it off (docs/results/performance.md). The setting stays for the rest of the process.
    """
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
