"""Build a run's pieces from its configs: tokenizer and models, the two bundles (or one), the batched env.

Layouts (PAPER.md §1, issue "LLM agents"):

* full fine-tuning: the loaded model becomes `llm1`; `llm2` and the frozen reference model are copies of it.
* memory-shared LoRA (`use_lora`): one frozen base with two adapters (`llm1`, `llm2`); the reference model is the
  same base with adapters disabled, so there is no third copy of the weights.

The single-agent baseline (`algo="ppo"`) builds `llm1` only, in the pioneer seat.
"""

from __future__ import annotations

import copy
import logging

import torch

from agents import (
    LLMAgent,
    ReferenceModel,
    SamplingConfig,
    build_shared_lora,
    copy_for_two_agents,
    load_model_and_tokenizer,
)
from agents.tiny import tiny_causal_lm, tiny_tokenizer
from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.tasks import task_tokenizer
from trainers.config import DTYPES, CORYConfig, PPOConfig
from trainers.learners import make_learner
from trainers.role_exchange import Bundle, RoleExchange

logger = logging.getLogger(__name__)

TINY_MODEL = "tiny"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for `CORYConfig.dtype` ("float32", "bfloat16", "float16").

    Raises:
        ValueError: for another name (lists the valid ones).
    """
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}")
    return getattr(torch, name)


def load_policy_model(name: str, *, seed: int = 0, task: str | None = None, dtype: str = "float32"):
    """(model, tokenizer) for `CORYConfig.model` with parameters in `dtype`; `"tiny"` is a tiny random Llama with
    the task's own tokenizer when it has one (`cory_env.tasks.task_tokenizer`: the 20-token toy vocabulary), else
    the tiny BPE tokenizer."""
    if name == TINY_MODEL:
        tokenizer = task_tokenizer(task) or tiny_tokenizer()
        return tiny_causal_lm(tokenizer, seed=seed).to(torch_dtype(dtype)), tokenizer
    return load_model_and_tokenizer(name, dtype=torch_dtype(dtype))


def sampling_from(config: CORYConfig) -> SamplingConfig:
    return SamplingConfig(
        temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
        repetition_penalty=config.repetition_penalty,
    )


def enable_activation_checkpointing(model) -> None:
    """transformers' activation (gradient) checkpointing on every decoder layer, non-reentrant (works with a frozen
    LoRA base, whose inputs need no gradient, and with dropout). transformers >= 5.2 names it
    ``activation_checkpointing_enable``; older versions ``gradient_checkpointing_enable``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def build_agents(model, tokenizer, config: CORYConfig) -> tuple[dict[str, LLMAgent], ReferenceModel]:
    """Two agents (`llm1`, `llm2`; one for the PPO baseline) and the shared frozen reference model; the agents are in
    eval mode (the learners switch to train mode only inside their update)."""
    names = ("llm1", "llm2") if config.algo == "cory" else ("llm1",)
    sampling = sampling_from(config)
    if not sampling.is_exact:
        logger.warning("top_k=%s / top_p=%s / repetition_penalty=%s: tokens are drawn from a truncated or penalised "
                       "softmax, while the learners score them under logits / temperature (the action mask "
                       "included): the PPO ratio and the KL are then approximate (slightly off-policy); use top_k 0, "
                       "top_p 1, repetition_penalty 1 for exact on-policy updates", config.top_k, config.top_p,
                       config.repetition_penalty)
    head_dropout = config.value_head_dropout
    if config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if config.dtype != "float32" and not config.use_lora:
        logger.warning("dtype=%s with full fine-tuning: Adam updates the %s weights directly (no float32 master "
                       "copy), so updates smaller than the weights' rounding step are lost; prefer float32 for full "
                       "fine-tuning, or --use_lora true (adapters stay float32)", config.dtype, config.dtype)
    if config.use_lora:
        from peft import LoraConfig

        lora = LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
            target_modules=[m.strip() for m in config.lora_target_modules.split(",") if m.strip()],
            bias="none", task_type="CAUSAL_LM",
        )
        shared = build_shared_lora(model, adapter_names=names, lora_config=lora)
        agents = {n: LLMAgent(shared, tokenizer, sampling=sampling, adapter_name=n, value_head_dropout=head_dropout)
                  for n in names}
        ref = ReferenceModel(shared, disable_adapters=True)
    elif len(names) == 2:
        llm1, llm2, ref = copy_for_two_agents(model)
        agents = {"llm1": LLMAgent(llm1, tokenizer, sampling=sampling, value_head_dropout=head_dropout),
                  "llm2": LLMAgent(llm2, tokenizer, sampling=sampling, value_head_dropout=head_dropout)}
    else:
        agents = {"llm1": LLMAgent(copy.deepcopy(model).requires_grad_(True), tokenizer, sampling=sampling,
                                   value_head_dropout=head_dropout)}
        ref = ReferenceModel(model)
    for agent in agents.values():  # peft leaves a LoRA model in train mode: dropout must not touch rollouts/scoring
        agent.eval()
    return agents, ref


def build_exchange(agents: dict[str, LLMAgent], ref: ReferenceModel, config: CORYConfig,
                   ppo_config: PPOConfig, learner: str = "ppo", dist=None) -> RoleExchange:
    """Bundles with fresh learners (data-parallel over `dist` when given), `llm1` in the pioneer seat."""
    bundles = [Bundle(name, agent, make_learner(learner, agent, ref, ppo_config, dist=dist))
               for name, agent in agents.items()]
    observer = bundles[1] if len(bundles) > 1 else None
    return RoleExchange(bundles[0], observer, period=config.role_exchange_period,
                        reset_on_exchange=config.reset_on_exchange)


def build_env(env_config: EnvConfig, tokenizer, config: CORYConfig, ppo_config: PPOConfig,
              reward_fn=None) -> BatchedCORYEnv:
    """The batched env with B = `ppo_config.batch_size` rows (the pioneer seat only for the PPO baseline)."""
    return BatchedCORYEnv(
        env_config, tokenizer, batch_size=ppo_config.batch_size, reward_fn=reward_fn,
        single_agent=config.algo == "ppo",
    )


def seed_everything(seed: int, deterministic: bool) -> None:
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
