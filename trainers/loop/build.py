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

import dataclasses
import logging
from collections.abc import Mapping

import copy

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


def load_run_tokenizer(configs: RunConfigs):
    """The run's tokenizer, before its model: `load_model_tokenizer` of ``configs.model.model``; with a model per
    slot (`ModelConfig.models`), model name -> tokenizer for every model the run names (`run_model_names`)."""
    from trainers.loop.fingerprint import tokenizer_fingerprint

    names = run_model_names(configs)
    if len(names) == 1:
        return load_model_tokenizer(configs.model.model, configs.task_spec)
    out, seen = {}, {}
    for name in names:  # models of one tokenizer share the object: their seats splice ids, no text channel
        tok = load_model_tokenizer(name, configs.task_spec)
        out[name] = seen.setdefault(tokenizer_fingerprint(tok), tok)
    return out


def tokenizers_by_model(configs: RunConfigs, tokenizer) -> dict:
    """Model name -> tokenizer for every model the run names (`run_model_names`): `tokenizer` as
    `load_run_tokenizer` returns it (one object for a run of one model name, else a mapping)."""
    if isinstance(tokenizer, Mapping):
        return dict(tokenizer)
    return dict.fromkeys(run_model_names(configs), tokenizer)


def run_model_names(configs: RunConfigs) -> list[str]:
    """Every model name of the run, once each: ``--model``'s (when a slot keeps it) and each slot's own
    (`ModelConfig.models`), ``--model``'s first."""
    own = [slot["model"] for slot in (configs.model.models or {}).values() if "model" in slot]
    return list(dict.fromkeys([configs.model.model, *own]))


def load_run_model(configs: RunConfigs, tokenizer=None):
    """(model, tokenizer) of a run: `load_policy_model` with its model name, dtype and seed, and its task's own
    tokenizer for the tiny model; with `tokenizer` (`load_run_tokenizer`), only the model is loaded."""
    return load_policy_model(configs.model.model, seed=configs.run.seed, dtype=configs.model.dtype,
                             task_tokenizer=task_tokenizer(configs.task_spec), tokenizer=tokenizer)


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


def is_heterogeneous(slots: Mapping[str, ModelConfig]) -> bool:
    """True when the slots do not all hold the same model options (a model per slot, docs/seats.md)."""
    first = next(iter(slots.values()))
    return any(config != first for config in slots.values())


@dataclasses.dataclass
class SlotModels:
    """What `build_slot_agents` built, each by model name: `agents`, `refs` (each model's frozen reference: its
    own base), `tokenizers`, and `fingerprints` (`trainers.loop.fingerprint.model_fingerprint` of each base as
    loaded, before any adapter)."""

    agents: dict[str, LLMAgent]
    refs: dict[str, ReferenceModel]
    tokenizers: dict[str, object]
    fingerprints: dict[str, str]


def build_slot_agents(slots: Mapping[str, ModelConfig], tokenizers: Mapping[str, object], sampling: SamplingConfig,
                      *, seed: int, device, task_tok=None) -> SlotModels:
    """The agents of a run whose slots hold different models (`slot_configs`): slots of one base model and dtype are
    loaded once; within them, those of one layout (LoRA or full copies, precision, dropout, checkpointing) are built
    together by `build_agents` (LoRA: one frozen base, one adapter per slot, each with its own rank and targets);
    each group's frozen reference is its own base.

    Args:
        slots: model name -> its `ModelConfig`.
        tokenizers: model name (``--model``'s spelling, e.g. ``"tiny-bpe"``) -> its tokenizer (`load_run_tokenizer`).
        sampling: every agent's sampling (the seats' own settings are applied where they sit).
        seed: the tiny models' initialisation seed.
        device: where the models live.
        task_tok: the task's own tokenizer (tiny models over it).

    Returns:
        `SlotModels`, in the order of `slots`.

    Raises:
        ValueError: a LoRA target module one architecture lacks (the slot and the fix named); what `build_agents`
            refuses.
    """
    from trainers.loop.fingerprint import model_fingerprint

    agents, refs, toks, prints = {}, {}, {}, {}
    bases: dict[tuple, list[str]] = {}
    for name, config in slots.items():
        bases.setdefault((config.model, config.dtype), []).append(name)
    for (model_name, dtype), names in bases.items():
        tok = tokenizers[model_name]
        model, _ = load_policy_model(model_name, seed=seed, dtype=dtype, task_tokenizer=task_tok, tokenizer=tok)
        model.to(device)
        prints.update(dict.fromkeys(names, model_fingerprint(model)))
        layouts: dict[tuple, list[str]] = {}
        for name in names:
            c = slots[name]
            layouts.setdefault((c.use_lora, c.precision, c.disable_dropout, c.gradient_checkpointing,
                                c.value_head_dropout), []).append(name)
        for k, group in enumerate(layouts.values()):
            base = model if k == len(layouts) - 1 else copy.deepcopy(model)  # each layout its own base
            group_slots = {name: slots[name] for name in group}
            try:
                built, ref = build_agents(base, tok, slots[group[0]], sampling, slots=group_slots)
            except ValueError as err:
                if "Target modules" in str(err) or "target_modules" in str(err):
                    raise ValueError(f"models {', '.join(group)} ({model_name}): a LoRA target module is not in "
                                     f"this architecture ({err}); set {group[0]}.lora_target_modules to its module "
                                     "names (Llama: q_proj,v_proj; GPT-2: c_attn)") from None
                raise
            agents.update(built)
            refs.update(dict.fromkeys(group, ref))
            toks.update(dict.fromkeys(group, tok))
    return SlotModels(*({n: built[n] for n in slots} for built in (agents, refs, toks, prints)))


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

    `slots` (model name -> its `ModelConfig`, `build_slot_agents`): build those names instead of ``llm1`` …
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
    """A frozen copy of `bundle` named `name` (a snapshot partner: learner None, never updated): for a LoRA agent a new
    adapter `name` in its shared ``PeftModel`` holding a copy of the source adapter's weights (the base stays shared),
    else a deep copy of the model; a copy of the value head; the same tokenizer, sampling and precision."""
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
    return Bundle(name, frozen, None)


def build_exchange(agents: dict[str, LLMAgent], algorithm: JointLearner, config: CORYConfig,
                   seating: Seating, scheme=None, rows: int = 0):
    """One bundle per model (its agent and its learner from `algorithm.learners`): CORY's `RoleExchange` (`llm1` …
    `llmN` in the seats in order) when `scheme` is None, else a `trainers.loop.population.Population` seating them
    by `scheme` (counting `rows` episodes per seated model and iteration)."""
    from trainers.loop.population import Population

    bundles = [Bundle(name, agent, algorithm.learners[name]) for name, agent in agents.items()]
    if scheme is not None:
        return Population(bundles, seating.names, scheme, rows=rows, reset_on_exchange=config.reset_on_exchange,
                          freeze=freeze_bundle)
    return RoleExchange(bundles, seating.names, period=config.role_exchange_period,
                        reset_on_exchange=config.reset_on_exchange)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed torch's global RNG; with `deterministic`, ``torch.use_deterministic_algorithms(True, warn_only=True)``
    without torch's filling of every new tensor's memory (``torch.utils.deterministic.fill_uninitialized_memory``).

    That fill (NaN into every ``torch.empty``) is a debugging aid that torch's documentation says to turn off for
    speed in a program that never reads memory before writing it: every op here writes its output first, so the
    results are the same with it off, and an iteration skips ≈ 15,000 fills (the largest the (B, T, V) logits'
    temporaries; docs/results/performance.md). Like ``use_deterministic_algorithms``, the setting stays for the rest
    of the process (set ``torch.utils.deterministic.fill_uninitialized_memory = True`` again to debug a read of
    uninitialised memory).
    """
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
