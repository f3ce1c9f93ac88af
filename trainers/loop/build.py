"""Build a run's pieces from its configs: the tokenizer and models, one bundle per seat (the task, the seating and the
env are `trainers.loop.plan`'s).

Layouts (docs/paper.md §1), for a seating of N seats (`cory_env.seating`; CORY: 2):

* full fine-tuning: N trainable copies of the loaded model (`llm1` … `llmN`); the loaded model is the frozen
  reference model.
* memory-shared LoRA (`use_lora`): one frozen base with N adapters (`llm1` … `llmN`); the reference model is the
  same base with adapters disabled, so there is no extra copy of the weights.

The single-agent seating (``--seating ppo``) builds `llm1` only, in the pioneer seat.
"""

from __future__ import annotations

import logging

import torch

from agents import (
    LLMAgent,
    ReferenceModel,
    SamplingConfig,
    build_shared_lora,
    copy_for_agents,
    load_model_and_tokenizer,
)
from agents.dropout import disable_dropout
from agents.precision import cast_frozen_weights_once, resolve_precision
from agents.tiny import tiny_causal_lm, tiny_tokenizer
from agents.loading import load_model, load_tokenizer
from cory_env.seating import Seating
from cory_env.tasks import task_tokenizer
from trainers.config import DTYPES, CORYConfig, ModelConfig, RunConfigs
from trainers.learning.joint import JointLearner
from trainers.loop.role_exchange import Bundle, RoleExchange

logger = logging.getLogger(__name__)

TINY_MODEL = "tiny"


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
        name: hub id, local folder, ``.gguf`` file or alias (`agents.load_model_and_tokenizer`), or ``"tiny"``: a
            tiny random Llama built for `task_tokenizer` when given (a task with its own vocabulary,
            `cory_env.tasks.task_tokenizer`), else for the tiny BPE tokenizer. A pretrained model keeps its own
            tokenizer.
        seed: the tiny model's initialisation seed.
        dtype: `ModelConfig.dtype`.
        tokenizer: the tokenizer already loaded for this model (`load_run_tokenizer`): only the model is loaded.
    """
    if name == TINY_MODEL:
        if tokenizer is None:
            tokenizer = tiny_tokenizer() if task_tokenizer is None else task_tokenizer
        return tiny_causal_lm(tokenizer, seed=seed).to(torch_dtype(dtype)), tokenizer
    if tokenizer is None:
        return load_model_and_tokenizer(name, dtype=torch_dtype(dtype))
    return load_model(name, tokenizer, dtype=torch_dtype(dtype)), tokenizer


def load_run_tokenizer(configs: RunConfigs):
    """The run's tokenizer, before its model: the task's own for the tiny model (`cory_env.tasks.task_tokenizer`),
    else the tiny BPE tokenizer for ``"tiny"``, else the model's (`agents.loading.load_tokenizer`; a GGUF alias is
    converted into the cache on first use)."""
    if configs.model.model == TINY_MODEL:
        return task_tokenizer(configs.task_spec) or tiny_tokenizer()
    return load_tokenizer(configs.model.model)


def load_run_model(configs: RunConfigs, tokenizer=None):
    """(model, tokenizer) of a run: `load_policy_model` with its model name, dtype and seed, and its task's own
    tokenizer for the tiny model; with `tokenizer` (`load_run_tokenizer`), only the model is loaded."""
    return load_policy_model(configs.model.model, seed=configs.run.seed, dtype=configs.model.dtype,
                             task_tokenizer=task_tokenizer(configs.task_spec), tokenizer=tokenizer)


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
                 num_models: int = 2) -> tuple[dict[str, LLMAgent], ReferenceModel]:
    """`num_models` agents (`llm1` … `llmN`, one per seat: 2 for CORY, 1 for the single-agent seating) and the shared
    frozen reference model, in `model_config`'s layout (full fine-tuning copies, or memory-shared LoRA), sampling
    with `sampling`; the agents are in eval mode (the learners switch to train mode only inside their update), and
    with `ModelConfig.disable_dropout` every dropout in them has probability 0 (`agents.dropout.disable_dropout`).
    Agents and reference compute in `ModelConfig.precision` (resolved for the model's device:
    `agents.precision.resolve_precision`); under a mixed precision the frozen weights' linear layers cast their
    weight once per change instead of at every product (`agents.precision.CastOnceLinear`: the same numbers).

    Raises:
        ValueError: ``dtype="float16"`` on a CPU; ``precision="fp16-mixed"`` on a CPU."""
    names = model_names(num_models)
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

        lora = LoraConfig(
            r=model_config.lora_r, lora_alpha=model_config.lora_alpha, lora_dropout=model_config.lora_dropout,
            target_modules=model_config.lora_modules, bias="none", task_type="CAUSAL_LM",
        )
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


def build_exchange(agents: dict[str, LLMAgent], algorithm: JointLearner, config: CORYConfig,
                   seating: Seating) -> RoleExchange:
    """One bundle per model (its agent and its learner from `algorithm.learners`), `llm1` … `llmN` in the seats in
    order."""
    bundles = [Bundle(name, agent, algorithm.learners[name]) for name, agent in agents.items()]
    return RoleExchange(bundles, seating.names, period=config.role_exchange_period,
                        reset_on_exchange=config.reset_on_exchange)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed torch's global RNG; with `deterministic`, ``torch.use_deterministic_algorithms(True, warn_only=True)``."""
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
