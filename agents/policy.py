"""`LLMAgent`: a causal LM plus a value head that acts in the CORY env token by token and scores responses.

Acting (``act`` for the AEC env, ``act_batch`` for `BatchedCORYEnv`) reads plain observation dicts
(``input_ids``, ``attention_mask``, ``action_mask``) and keeps a KV cache across consecutive steps of one episode
(see `agents.sampling.KVCachedSampler`). Scoring (``evaluate``) runs one forward over ``[query; response]`` and
returns per-token log-probabilities, values and entropies of the response, with gradients, for the PPO update.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from agents.forward import entropy_from_logits, logprobs_from_logits, policy_logits, response_forward
from agents.loading import load_model_and_tokenizer
from agents.precision import autocast
from agents.reference import activate_adapter, is_adapter_parameter, is_peft_model, preserved_requires_grad
from agents.sampling import KVCachedSampler, SamplingConfig
from agents.value_head import ValueHead
from cory_env.tokenizer import prepare_tokenizer

logger = logging.getLogger(__name__)

AGENT_CONFIG_NAME = "cory_agent.json"
VALUE_HEAD_NAME = "value_head.safetensors"
_FORMAT_VERSION = 1


@dataclass
class EvalOutput:
    """Per-response-token outputs of `LLMAgent.evaluate`.

    Attributes:
        logprobs: float32 (B, T), log pi(response_t | query, response_<t) in nats.
        values: float32 (B, T), value at the position that predicts response token t (TRL convention).
        entropy: float32 (B, T), policy entropy at that position, nats.
        logits: (B, T, V) model-dtype logits at that position, or None unless ``return_logits=True``.

    Positions where ``response_mask`` is False hold finite but meaningless numbers; mask them.
    """

    logprobs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor
    logits: torch.Tensor | None = None


def _output_vocab_size(model: nn.Module) -> int:
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def _hidden_size(model: nn.Module) -> int:
    size = getattr(model.config, "hidden_size", None)
    return int(size) if size is not None else int(model.get_input_embeddings().embedding_dim)


class LLMAgent(nn.Module):
    """A causal LM with a scalar value head, acting in the CORY env and scored for PPO.

    Args:
        model: a ``transformers`` causal LM, or the shared ``PeftModel`` from `build_shared_lora` (then
            `adapter_name` selects this agent's adapter, activated before every forward).
        tokenizer: its tokenizer (saved with the agent; its pad id is not used for acting).
        value_head: a `ValueHead`; default a fresh one (dropout `value_head_dropout`) sized to the model's hidden size.
        sampling: how `act` / `act_batch` sample; default `SamplingConfig()` (plain sampling, top_k 0).
        adapter_name: LoRA adapter of this agent inside a shared ``PeftModel``; None for a plain model.
        vocab_size: the env's action space size V; checked against the model's output vocabulary now (otherwise
            at the first `act`).
        seed: seeds this agent's own ``torch.Generator`` used when `act`/`act_batch` get no generator; None uses
            torch's global RNG.
        value_head_dropout: dropout of the default value head (TRL ``summary_dropout_prob``, 0.1); ignored when
            `value_head` is given.
        precision: the resolved precision of every forward (`agents.precision`: "fp32" or "bf16-mixed", ...);
            the value head and everything read from the logits stay float32.

    Raises:
        ValueError: vocabulary mismatch (both sizes named), `adapter_name` missing from the ``PeftModel`` or given
            for a plain model, value head of the wrong size.
        TypeError: `sampling` is not a `SamplingConfig`.
    """

    def __init__(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, value_head: ValueHead | None = None,
                 sampling: SamplingConfig | None = None, adapter_name: str | None = None, *,
                 vocab_size: int | None = None, seed: int | None = None, value_head_dropout: float = 0.1,
                 precision: str = "fp32") -> None:
        super().__init__()
        sampling = SamplingConfig() if sampling is None else sampling
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        if adapter_name is not None:
            if not is_peft_model(model):
                raise ValueError(f"adapter_name={adapter_name!r} needs a PeftModel (see build_shared_lora), got "
                                 f"{type(model).__name__}")
            if adapter_name not in model.peft_config:
                raise ValueError(f"adapter {adapter_name!r} not in the PeftModel; it has {sorted(model.peft_config)}")
        self.model, self.tokenizer, self.adapter_name = model, tokenizer, adapter_name
        self._sampling = sampling
        self._last_sampling = sampling  # what the last `act_batch` sampled with (`acting_scores_exact`)
        self.model_vocab_size = _output_vocab_size(model)
        if vocab_size is not None:
            self.check_vocab_size(vocab_size)
        hidden = _hidden_size(model)
        if value_head is None:
            value_head = ValueHead(hidden, dropout=value_head_dropout)
        elif value_head.hidden_size != hidden:
            raise ValueError(f"value_head expects hidden size {value_head.hidden_size}, the model has {hidden}")
        device = next(model.parameters()).device
        self.value_head = value_head.to(device)
        self.value_head.train(model.training)
        self.training = model.training
        self.generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
        self.precision = precision
        self._samplers = {sampling: KVCachedSampler(model, sampling, precision)}  # one per sampling config
        self.last_logprobs: torch.Tensor | None = None
        self.last_values: torch.Tensor | None = None
        self.last_logits: torch.Tensor | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def sampling(self) -> SamplingConfig:
        """How `act` / `act_batch` sample when the call names no `SamplingConfig` of its own (a seat's settings are
        an argument of the rollout, `trainers.rollout.run_episodes`); assigning a new one changes that default."""
        return self._sampling

    @sampling.setter
    def sampling(self, value: SamplingConfig) -> None:
        self._sampler_for(value)
        self._sampling = value

    def _sampler_for(self, sampling: SamplingConfig) -> KVCachedSampler:
        """The KV-cached sampler of `sampling` (built once per sampling config); TypeError for a non-config."""
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        if sampling not in self._samplers:
            self._samplers[sampling] = KVCachedSampler(self.model, sampling, self.precision)
        return self._samplers[sampling]

    @property
    def acting_scores_exact(self) -> bool:
        """True when the log-probabilities and values `act_batch` records are the ones `evaluate` would recompute
        for the same tokens (to float32 round-off, 1e-5), so a learner may take them as its old scores instead of a
        second forward: plain sampling distribution (`SamplingConfig.is_exact`: the one the last `act_batch` used)
        in float32. Under bf16-mixed the KV-cached steps and the one full forward round differently
        (`benchmarks/README.md`), so the learner recomputes."""
        return self._last_sampling.is_exact and self.precision == "fp32"

    @property
    def device(self) -> torch.device:
        """Device of the value head (kept on the model's device)."""
        return self.value_head.summary.weight.device

    def check_vocab_size(self, vocab_size: int) -> None:
        """Raise `ValueError` naming both sizes unless the env's action space size equals the model's vocabulary."""
        if int(vocab_size) != self.model_vocab_size:
            raise ValueError(f"vocabulary mismatch: the env's action space has {int(vocab_size)} tokens but the model "
                             f"outputs {self.model_vocab_size} logits; build the env with this model's tokenizer (or "
                             f"resize the model's token embeddings to {int(vocab_size)})")

    def _activate(self) -> None:
        if self.adapter_name is not None:
            activate_adapter(self.model, self.adapter_name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Parameters this agent's optimizer owns: its LoRA adapter (or all trainable LM weights) + value head."""
        if self.adapter_name is not None:
            lm = [p for n, p in self.model.named_parameters() if is_adapter_parameter(n, self.adapter_name)]
        else:
            lm = [p for p in self.model.parameters() if p.requires_grad]
        return lm + list(self.value_head.parameters())

    def reset_cache(self) -> None:
        """Drop the acting KV cache (the next `act` prefills). Call after changing the weights mid-episode."""
        for sampler in self._samplers.values():
            sampler.reset()

    # ------------------------------------------------------------------ acting
    def act(self, obs: dict[str, np.ndarray], generator: torch.Generator | None = None, *,
            sampling: SamplingConfig | None = None) -> int:
        """Sample one token for the AEC env (B = 1 view of `act_batch`).

        Args:
            obs: ``input_ids`` (L,) int64 left padded, ``attention_mask`` (L,), ``action_mask`` (V,) int8.
            generator, sampling: as in `act_batch`.

        Returns:
            The sampled token id (an allowed action).
        """
        batched = {k: np.asarray(obs[k])[None] for k in ("input_ids", "attention_mask", "action_mask")}
        return int(self.act_batch(batched, generator=generator, sampling=sampling)[0])

    def act_batch(self, obs: dict[str, np.ndarray], generator: torch.Generator | None = None, *,
                  sampling: SamplingConfig | None = None) -> np.ndarray:
        """Sample one token per row for `BatchedCORYEnv`, reusing the KV cache across consecutive steps.

        Args:
            obs: ``input_ids`` (B, L) int64 left padded, ``attention_mask`` (B, L) int64, ``action_mask`` (B, V)
                int8 (1 = allowed). Rows whose response ended carry a pad column with mask 0; their samples are
                ignored by the env.
            generator: RNG for sampling; default this agent's generator (see ``seed``).
            sampling: how to sample (the `SamplingConfig` of the seat the agent sits in: the rollout passes it, and
                the agent keeps no seat's settings); default `sampling`.

        Returns:
            int64 (B,) token ids. Also sets ``last_logprobs`` (float32 (B,), log-probability of each sampled token
            under the sampling distribution `policy_logits` (temperature, action mask), nats; equals `evaluate`'s
            logprobs for it when `acting_scores_exact`), ``last_values`` (float32 (B,), the value head at the
            position that predicted the token, as `evaluate`'s values) and ``last_logits`` (float32 (B, V), raw).

        Raises:
            KeyError: a missing observation key.
            TypeError: non-integer ``input_ids``.
            ValueError: malformed shapes, a vocabulary mismatch (action mask width or token ids outside the model's
                vocabulary), an action mask banning every token, or non-finite logits (the message names the
                acting step).
        """
        ids = np.asarray(obs["input_ids"])
        mask = np.asarray(obs["attention_mask"])
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise ValueError(f"input_ids and attention_mask must both be (B, L), got {ids.shape} and {mask.shape}")
        action_mask = np.asarray(obs["action_mask"])
        if action_mask.ndim != 2 or action_mask.shape[0] != ids.shape[0]:
            raise ValueError(f"action_mask must be (B, V) with B={ids.shape[0]}, got {action_mask.shape}")
        if action_mask.shape[1] != self.model_vocab_size:
            self.check_vocab_size(action_mask.shape[1])
        if ids.dtype.kind not in "iu":
            raise TypeError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.model_vocab_size):
            raise ValueError(f"input_ids hold token ids in [{ids.min()}, {ids.max()}], outside the model's vocabulary "
                             f"[0, {self.model_vocab_size}); was the observation made with another tokenizer?")
        generator = self.generator if generator is None else generator
        sampling = self._sampling if sampling is None else sampling
        sampler = self._sampler_for(sampling)
        self._last_sampling = sampling
        with torch.inference_mode():
            self._activate()
            tokens, logprobs, logits = sampler(ids, mask, action_mask, generator)
            hidden = sampler.last_hidden
            self.last_values = None if hidden is None else self.value_head(hidden[:, None])[:, 0]
        self.last_logits, self.last_logprobs = logits, logprobs
        return tokens.cpu().numpy().astype(np.int64, copy=False)

    # ------------------------------------------------------------------ scoring
    def evaluate(self, query: torch.Tensor, query_mask: torch.Tensor, response: torch.Tensor,
                 response_mask: torch.Tensor, *, return_logits: bool = False, allowed: torch.Tensor | None = None,
                 temperature: float | None = None) -> EvalOutput:
        """Log-probabilities, values and entropies of the response tokens in one forward (gradients flow).

        Args:
            query: int64 (B, Q), left padded; query_mask: bool (B, Q).
            response: int64 (B, T), right padded; response_mask: bool (B, T).
            return_logits: also return the (B, T, V) logits (``kl_penalty="full"``).
            allowed: bool (V,) tokens the task allows (`Rollout.allowed`), or None for all.
            temperature: the temperature the tokens were sampled at (`Rollout.temperature`: the seat's); None: this
                agent's default `sampling`'s.

        Log-probabilities, entropies and logits are those of the distribution `act_batch` samples from
        (`agents.forward.policy_logits`: the logits divided by the sampling temperature, banned tokens at
        probability 0), so the rollout's log-probabilities and PPO's agree.

        Returns:
            `EvalOutput`. Runs in the agent's current train/eval mode; wrap in ``torch.no_grad()`` when no
            gradient is needed. Drops the acting KV cache.

        Raises:
            TypeError / ValueError: malformed inputs; ValueError for non-finite logits at real response tokens.
        """
        self.reset_cache()
        self._activate()
        with autocast(self.precision, self.device):
            out = response_forward(self.model, query, query_mask, response, response_mask, output_hidden=True)
        temperature = self._sampling.temperature if temperature is None else temperature
        logits = policy_logits(out.logits, temperature=temperature, allowed=allowed)  # float32
        logprobs = logprobs_from_logits(logits, response)
        real = response_mask.bool()
        if not bool(torch.isfinite(logprobs[real]).all()):
            raise ValueError("non-finite logits at real response tokens in evaluate; the weights hold NaN/inf")
        return EvalOutput(logprobs=logprobs, values=self.value_head(out.hidden), entropy=entropy_from_logits(logits),
                          logits=logits if return_logits else None)

    def forward(self, *args, **kwargs) -> EvalOutput:
        """Alias of `evaluate` so the agent works with ``nn.Module`` call semantics."""
        return self.evaluate(*args, **kwargs)

    def train(self, mode: bool = True) -> "LLMAgent":
        """Set train/eval mode of the LM and the value head; drops the acting KV cache."""
        self.reset_cache()
        return super().train(mode)

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write the agent as a folder (returned as a `Path`): LM (or LoRA adapter) + tokenizer + value head,
        safetensors only.

        Layout: a plain LM is saved at the top (``AutoModelForCausalLM.from_pretrained(dir)`` loads it); a LoRA
        agent saves only its adapter in ``dir/<adapter_name>`` (``PeftModel.from_pretrained(base, that)`` loads
        it). ``value_head.safetensors`` and ``cory_agent.json`` (sampling config, adapter name) sit at the top.
        """
        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        meta: dict[str, Any] = {"format_version": _FORMAT_VERSION,
                                "kind": "lora" if self.adapter_name is not None else "full",
                                "adapter_name": self.adapter_name, "hidden_size": self.value_head.hidden_size,
                                "value_head_dropout": self.value_head.dropout.p,
                                "sampling": dataclasses.asdict(self.sampling)}
        if self.adapter_name is not None:
            self.model.save_pretrained(out, selected_adapters=[self.adapter_name], safe_serialization=True)
            meta["adapter_dir"] = "." if self.adapter_name == "default" else self.adapter_name
        else:
            self.model.save_pretrained(out, safe_serialization=True)
        self.tokenizer.save_pretrained(out)
        state = {k: v.detach().cpu().contiguous() for k, v in self.value_head.state_dict().items()}
        save_file(state, str(out / VALUE_HEAD_NAME))
        (out / AGENT_CONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        logger.info("saved %s agent to %s", meta["kind"], out)
        return out

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, *, model: nn.Module | None = None,
                        dtype: torch.dtype = torch.float32, **kwargs: Any) -> "LLMAgent":
        """Load an agent saved by `save_pretrained` (safetensors only; the value head must load exactly).

        Args:
            model: for a LoRA agent, the base to attach the adapter to: a shared ``PeftModel`` (the adapter is
                added under its saved name) or a plain LM; default the base recorded in the adapter config,
                loaded with `load_model_and_tokenizer`. Ignored for a plain agent.
            dtype: LM dtype when the LM is loaded here.
            **kwargs: passed to the constructor (``vocab_size``, ``seed``, ``sampling`` override).

        Raises:
            FileNotFoundError: missing ``cory_agent.json``, value head or safetensors weights.
            ValueError: unknown format, a value head that does not match (no silent re-initialisation), or a LoRA
                agent without `model` whose adapter records no base model name.
        """
        folder = Path(directory)
        meta_path = folder / AGENT_CONFIG_NAME
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} not found: {folder} was not written by LLMAgent.save_pretrained")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format_version") != _FORMAT_VERSION:
            raise ValueError(f"unknown agent format {meta.get('format_version')!r} in {meta_path}; "
                             f"this version reads {_FORMAT_VERSION}")
        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(str(folder)))
        adapter_name = meta["adapter_name"]
        if meta["kind"] == "lora":
            lm = cls._load_adapter(folder / meta["adapter_dir"], adapter_name, model, dtype)
        else:
            if not [p for p in folder.glob("*.safetensors") if p.name != VALUE_HEAD_NAME]:
                raise FileNotFoundError(f"no safetensors model weights in {folder} (only safetensors are loaded)")
            lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, use_safetensors=True)
        head_path = folder / VALUE_HEAD_NAME
        if not head_path.is_file():
            raise FileNotFoundError(f"{head_path} not found; refusing to create a fresh value head silently")
        head = ValueHead(int(meta["hidden_size"]), dropout=float(meta["value_head_dropout"]))
        try:
            head.load_state_dict(load_file(str(head_path)), strict=True)
        except RuntimeError as err:
            raise ValueError(f"value head in {head_path} does not match: {err}") from err
        if "sampling" not in kwargs:
            kwargs["sampling"] = SamplingConfig(**meta["sampling"])
        return cls(lm, tokenizer, value_head=head, adapter_name=adapter_name, **kwargs)

    @staticmethod
    def _load_adapter(path: Path, adapter_name: str, model: nn.Module | None, dtype: torch.dtype) -> nn.Module:
        from peft import PeftConfig, PeftModel
        if not (path / "adapter_model.safetensors").is_file():
            raise FileNotFoundError(f"{path / 'adapter_model.safetensors'} not found (safetensors only)")
        if model is not None and is_peft_model(model):
            if adapter_name in model.peft_config:
                raise ValueError(f"the PeftModel already has an adapter {adapter_name!r}; pass its base or a "
                                 f"PeftModel without it")
            with preserved_requires_grad(model):
                model.load_adapter(str(path), adapter_name=adapter_name, is_trainable=True)
            return model
        if model is None:
            base_name = PeftConfig.from_pretrained(str(path)).base_model_name_or_path
            if not base_name:
                raise ValueError(f"the LoRA adapter in {path} records no base model (its adapter_config.json has no "
                                 "base_model_name_or_path: the base was built in memory), so it cannot be loaded "
                                 "alone; pass the base: LLMAgent.from_pretrained(DIR, model=base) with base = "
                                 "agents.load_model_and_tokenizer(NAME)[0] for the run's --model, or export the run "
                                 "with plain `cory export` (the adapter merged: a whole model, no base needed)")
            model, _ = load_model_and_tokenizer(base_name, dtype=dtype)
        return PeftModel.from_pretrained(model, str(path), adapter_name=adapter_name, is_trainable=True)
