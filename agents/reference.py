"""The frozen reference model shared by every seat, and the two memory layouts that provide it.

* **Full fine-tuning** (the paper's IMDB setting): `copy_for_agents` deep-copies the LM into N trainable policies (llm1,
  llm2 for CORY's two seats) and keeps the original, frozen, as the reference model: N + 1 copies of the weights.
* **Memory-shared LoRA**: `build_shared_lora` wraps one frozen base in a single ``PeftModel`` holding one adapter
  per seat ("llm1", "llm2", ...). Each `LLMAgent` holds that ``PeftModel`` plus its ``adapter_name`` and activates
  its adapter before every forward; the reference model is the same base with adapters disabled
  (``with model.disable_adapter():``). The base weights exist once.

`ReferenceModel` scores responses with the same forward and maths as the agents (`agents.forward`), so their
log-probabilities line up token for token.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from agents.forward import logprobs_from_logits, policy_logits, response_forward
from agents.precision import autocast
from cory_env.checks import check_number

logger = logging.getLogger(__name__)


def is_peft_model(model: nn.Module) -> bool:
    """True for a ``peft.PeftModel`` (import-free check when peft is absent)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


@contextlib.contextmanager
def preserved_requires_grad(model: nn.Module) -> Iterator[None]:
    """Restore every parameter's ``requires_grad`` on exit.

    peft's ``set_adapter`` and ``disable_adapter`` freeze every adapter but the active one; with two agents
    sharing one ``PeftModel`` that would silently stop the other agent's training.
    """
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def activate_adapter(model: nn.Module, adapter_name: str) -> None:
    """Make `adapter_name` the active LoRA adapter of a ``PeftModel`` without touching ``requires_grad``.

    Raises:
        ValueError: if the model has no adapter of that name.
    """
    if model.active_adapter == adapter_name:
        return
    if adapter_name not in model.peft_config:
        raise ValueError(f"adapter {adapter_name!r} not in the model; it has {sorted(model.peft_config)}")
    with preserved_requires_grad(model):
        model.set_adapter(adapter_name)


def is_adapter_parameter(name: str, adapter_name: str) -> bool:
    """Whether the ``PeftModel`` parameter `name` is one of LoRA adapter `adapter_name`'s: peft names a ``Linear``
    layer's ``...q_proj.lora_A.<adapter>.weight`` and an ``Embedding`` layer's
    ``...embed_tokens.lora_embedding_A.<adapter>`` (no suffix).

    >>> is_adapter_parameter("model.embed_tokens.lora_embedding_B.llm1", "llm1")
    True
    >>> is_adapter_parameter("model.q_proj.lora_A.llm12.weight", "llm1")
    False
    """
    return "lora_" in name and adapter_name in name.split(".")


def build_shared_lora(model: PreTrainedModel, adapter_names: Sequence[str] = ("llm1", "llm2"), lora_config=None):
    """Wrap one frozen base LM in a single ``PeftModel`` with one LoRA adapter per agent.

    Args:
        model: the base causal LM; its weights are frozen (``requires_grad=False``) and shared.
        adapter_names: one name per agent (default the paper's plot labels "llm1", "llm2"); distinct.
        lora_config: a ``peft.LoraConfig``, or adapter name -> its own ``LoraConfig`` (adapters of different ranks
            on one base); default r=16, alpha=32, dropout 0.0 on the attention q/v projections
            (``target_modules=None`` lets peft pick them for known architectures).

    Returns:
        The ``PeftModel``; every adapter is trainable and initialised like peft does (B = 0, so each adapter
        starts equal to the base). Use it as ``LLMAgent(peft_model, tok, adapter_name="llm1")`` and
        ``ReferenceModel(peft_model)``.

    Raises:
        ValueError: if fewer than one or duplicate adapter names are given.
    """
    from peft import LoraConfig, get_peft_model
    names = list(adapter_names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"adapter_names must be distinct and non-empty, got {names}")
    if lora_config is None:
        lora_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM")
    configs = lora_config if isinstance(lora_config, Mapping) else dict.fromkeys(names, lora_config)
    peft_model = get_peft_model(model, configs[names[0]], adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, copy.deepcopy(configs[name]))
    for n, p in peft_model.named_parameters():
        p.requires_grad_(any(is_adapter_parameter(n, name) for name in names))
    activate_adapter(peft_model, names[0])
    return peft_model


def copy_for_agents(model: PreTrainedModel, n: int = 2) -> tuple[list[PreTrainedModel], "ReferenceModel"]:
    """Full fine-tuning layout: `n` independent trainable copies (one per seat; CORY: 2) plus the frozen original as
    reference.

    Args:
        model: the initial checkpoint; it becomes the reference model (frozen, eval mode).
        n: how many policies (>= 1).

    Returns:
        ``([policy_llm1, ..., policy_llmN], reference)``; the policies are deep copies with ``requires_grad=True``.

    Raises:
        ValueError: n < 1.
    """
    check_number(n, "n", integer=True, low=1, fix="the number of policies")
    policies = [copy.deepcopy(model).requires_grad_(True) for _ in range(n)]
    return policies, ReferenceModel(model)


@dataclass
class ReferenceOutput:
    """Outputs of `ReferenceModel.evaluate`.

    Attributes:
        logprobs: float32 (B, T), log pi_ref(response_t | query, response_<t), nats.
        logits: (B, T, V) reference logits at the positions predicting the response tokens, or None.
    """

    logprobs: torch.Tensor
    logits: torch.Tensor | None = None


class ReferenceModel:
    """The frozen reference model pi_ref shared by both seats (KL penalty target).

    Not an ``nn.Module`` on purpose: its weights never show up in an agent's or trainer's ``parameters()`` by
    accident and so never reach an optimizer. With a plain LM the model is put in eval mode and frozen. With the
    shared-LoRA ``PeftModel`` (`build_shared_lora`) the forward runs inside ``model.disable_adapter()`` on the
    frozen base in eval mode (dropout off), so no third copy of the weights exists; the adapters'
    ``requires_grad`` flags and the model's train/eval mode are left as they were.

    Args:
        model: a causal LM, or the shared ``PeftModel``.
        disable_adapters: run with adapters disabled; default True exactly when `model` is a ``PeftModel``.
        precision: the resolved precision of its forward (`agents.precision`; the policies' own).

    Raises:
        ValueError: if a ``PeftModel``'s base weights are trainable, or `disable_adapters` is set for a plain LM.
    """

    def __init__(self, model: nn.Module, *, disable_adapters: bool | None = None, precision: str = "fp32") -> None:
        peft = is_peft_model(model)
        self.precision = precision
        disable_adapters = peft if disable_adapters is None else disable_adapters
        if disable_adapters and not peft:
            raise ValueError(f"disable_adapters=True needs a PeftModel, got {type(model).__name__}")
        self.model = model
        self.is_shared_lora = bool(disable_adapters)
        if self.is_shared_lora:
            trainable = [n for n, p in self._named_base_parameters() if p.requires_grad]
            if trainable:
                raise ValueError(f"the PeftModel's base weights must be frozen, trainable: {trainable[:3]}")
        else:
            model.eval()
            model.requires_grad_(False)

    def _named_base_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        for name, p in self.model.named_parameters():
            if not (self.is_shared_lora and "lora_" in name):
                yield name, p

    def parameters(self) -> Iterator[nn.Parameter]:
        """The weights the reference forward uses (for a shared LoRA model: the base only, no adapter)."""
        for _, p in self._named_base_parameters():
            yield p

    @contextlib.contextmanager
    def _base(self) -> Iterator[nn.Module]:
        if not self.is_shared_lora:
            yield self.model
            return
        was_training = self.model.training
        self.model.eval()
        try:
            with preserved_requires_grad(self.model), self.model.disable_adapter():
                yield self.model
        finally:
            self.model.train(was_training)

    def evaluate(self, query: torch.Tensor, query_mask: torch.Tensor, response: torch.Tensor,
                 response_mask: torch.Tensor, *, return_logits: bool = False, temperature: float = 1.0,
                 allowed: torch.Tensor | None = None) -> ReferenceOutput:
        """Reference log-probabilities of the response tokens (no gradients), aligned with `LLMAgent.evaluate`.

        Args:
            query: int64 (B, Q) left padded; query_mask (B, Q) bool.
            response: int64 (B, T) right padded; response_mask (B, T) bool.
            return_logits: also return the logits (for ``kl_penalty="full"``).
            temperature, allowed: score under the policy's sampling distribution (`policy_logits`): the reference
                at the agent's temperature, restricted to the tokens the task allows.

        Returns:
            `ReferenceOutput`: logprobs float32 (B, T) nats; logits float32 (B, T, V) (`policy_logits`) or None.

        Raises:
            TypeError / ValueError: malformed inputs (see `check_response_inputs`).
        """
        device = next(self.model.parameters()).device
        with torch.no_grad(), self._base() as model, autocast(self.precision, device):
            out = response_forward(model, query, query_mask, response, response_mask)
        logits = policy_logits(out.logits, temperature=temperature, allowed=allowed)
        return ReferenceOutput(logprobs=logprobs_from_logits(logits, response), logits=logits if return_logits else None)

    __call__ = evaluate

    def logprobs(self, query, query_mask, response, response_mask) -> torch.Tensor:
        """float32 (B, T) reference log-probabilities of the response tokens (see `evaluate`)."""
        return self.evaluate(query, query_mask, response, response_mask).logprobs

    def logits(self, query, query_mask, response, response_mask) -> torch.Tensor:
        """(B, T, V) reference logits at the positions predicting the response tokens (see `evaluate`)."""
        return self.evaluate(query, query_mask, response, response_mask, return_logits=True).logits
