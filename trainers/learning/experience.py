"""The learners' input: one seat's finished experience (`Rollout`), its scoring under the policy and the reference
model (`score_rollout`), and the padding helper that packs token lists into (B, T) tensors (`pad_sequences`).

This is the contract between the rollout loop (`trainers.rollout` fills it from the env's transcript) and every
learner (`trainers.learning`): it lives here, with the learners, so that `trainers.learning` imports nothing from
`trainers.loop` (data flows loop -> learning, never back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class Rollout:
    """One seat's experience for one update.

    Attributes:
        query: int64 (B, Q), the seat's full prompt (for the observer: the knowledge-transfer prompt), left padded.
        query_mask: bool (B, Q), False on padding.
        response: int64 (B, T), the seat's response (EOS kept when emitted), right padded.
        response_mask: bool (B, T), False on padding.
        scores: float32 (B,), the reward the learner optimises (the collective reward for CORY).
        task_reward: float32 (B,), the seat's own task reward r(q, a) (for logging).
        allowed: bool (V,), the actions the task allowed while sampling (`EpisodeTranscript.allowed`), or None
            for every token; learners score the responses under that restricted distribution.
        logprobs: float32 (B, T) or None, the log-probabilities the agent recorded while acting (nats, 0 on
            padding); set only when they equal `agent.evaluate`'s (`LLMAgent.acting_scores_exact`), so that
            `score_rollout` can skip the policy's second forward.
        values: float32 (B, T) or None, the value head's predictions recorded while acting (same condition).
        temperature: the temperature the responses were sampled at (the seat's sampling, `trainers.rollout`);
            learners score under it (``agent.evaluate(..., temperature=rollout.temperature)``); None: the agent's
            own default sampling.
    """

    query: torch.Tensor
    query_mask: torch.Tensor
    response: torch.Tensor
    response_mask: torch.Tensor
    scores: torch.Tensor
    task_reward: torch.Tensor
    allowed: torch.Tensor | None = None
    logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    temperature: float | None = None

    def __post_init__(self) -> None:
        batch = self.query.shape[0]
        for name in ("query_mask", "response", "response_mask", "scores", "task_reward"):
            if getattr(self, name).shape[0] != batch:
                raise ValueError(f"Rollout.{name} has batch size {getattr(self, name).shape[0]}, query has {batch}")
        for name in ("logprobs", "values"):
            if getattr(self, name) is not None and getattr(self, name).shape != self.response.shape:
                raise ValueError(f"Rollout.{name} has shape {tuple(getattr(self, name).shape)}, the response "
                                 f"{tuple(self.response.shape)}")
        if not bool(self.response_mask.any(dim=-1).all()):
            raise ValueError("a Rollout row has an empty response; every response needs at least one token")

    @property
    def batch_size(self) -> int:
        return int(self.query.shape[0])

    def to(self, device: torch.device | str) -> "Rollout":
        """This rollout with every tensor on `device` (itself when they are already there)."""
        if self.query.device == torch.device(device):
            return self
        return Rollout(**{name: getattr(self, name) if not isinstance(getattr(self, name), torch.Tensor)
                          else getattr(self, name).to(device) for name in self.__dataclass_fields__})

    def select(self, index: torch.Tensor) -> "Rollout":
        """Rows `index` (int64 (b,)) of every field, trimmed to the columns those rows use."""
        sub = {name: getattr(self, name)[index] for name in self.__dataclass_fields__
               if name not in ("allowed", "temperature") and getattr(self, name) is not None}
        q_used = sub["query_mask"].any(dim=0)
        r_used = sub["response_mask"].any(dim=0)
        q_start = int(q_used.nonzero()[0]) if q_used.any() else sub["query"].shape[1]
        r_end = int(r_used.nonzero()[-1]) + 1
        sub["query"], sub["query_mask"] = sub["query"][:, q_start:], sub["query_mask"][:, q_start:]
        for name in ("response", "response_mask", "logprobs", "values"):
            if name in sub:
                sub[name] = sub[name][:, :r_end]
        return Rollout(**sub, allowed=self.allowed, temperature=self.temperature)


def score_rollout(agent, ref_model, rollout: Rollout, *, return_logits: bool = False, need_values: bool = True):
    """The agent's and the reference model's scores of the rollout's responses, without gradients.

    Both score under the distribution the tokens were sampled from (`agents.forward.policy_logits`: the rollout's
    temperature, the task's allowed tokens), so old log-probabilities, the KL to the reference and the ratios of the
    update all describe the same policy. The agent is put in eval mode first (no dropout in old values and
    log-probabilities). When the rollout carries the log-probabilities (and, if `need_values`, the values) recorded
    while acting (`Rollout.logprobs`: only set when exact), the policy's forward is skipped and those are returned;
    `return_logits` (the full-vocabulary KL) always recomputes.

    Returns:
        (`agents.EvalOutput`, `agents.ReferenceOutput`): logprobs float32 (B, T) nats, values (None when reused
        without `need_values`), entropies (None when reused), and the (B, T, V) logits when `return_logits`.
    """
    from agents.policy import EvalOutput
    agent.eval()  # modules that score a rollout run without dropout (LoRA, value head)
    temperature = agent.sampling.temperature if rollout.temperature is None else rollout.temperature
    reuse = rollout.logprobs is not None and not return_logits and (rollout.values is not None or not need_values)
    with torch.no_grad():
        if reuse:
            old = EvalOutput(logprobs=rollout.logprobs, values=rollout.values, entropy=None)
        else:
            old = agent.evaluate(rollout.query, rollout.query_mask, rollout.response, rollout.response_mask,
                                 return_logits=return_logits, allowed=rollout.allowed,
                                 temperature=rollout.temperature)
        ref = ref_model.evaluate(rollout.query, rollout.query_mask, rollout.response, rollout.response_mask,
                                 return_logits=return_logits, temperature=temperature, allowed=rollout.allowed)
    return old, ref


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, *, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad B token-id lists `seqs` (each may be empty) with `pad_id` into a (B, max_len) int64 tensor and a bool mask,
    on the `side` "left" (prompts, for generation) or "right" (responses).

    Raises:
        ValueError: for an unknown `side` or an empty batch.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if len(seqs) == 0:
        raise ValueError("cannot pad an empty batch")
    width = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, seq in enumerate(seqs):
        n = len(seq)
        if n == 0:
            continue
        sl = slice(width - n, width) if side == "left" else slice(0, n)
        ids[row, sl] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, sl] = True
    return ids, mask
