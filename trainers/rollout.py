"""Roll out B episodes through the batched CORY env and pack each seat's experience as (B, T) tensors.

Data flow: `BatchedCORYEnv` (queries, turns, rewards) → the seated agents' `act_batch` (KV-cached sampling) →
`EpisodeTranscript` → one `Rollout` per seat, the input of that seat's learner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from trainers.learning.experience import Rollout, pad_sequences


@dataclass
class ActingScores:
    """What one seat's agent recorded while acting, per response token (see `run_episodes`).

    Attributes:
        logprobs: float32 (B, T), log-probability of each sampled token under the sampling distribution, nats.
        values: float32 (B, T) value-head predictions, or None (an agent without values).
        exact: whether they equal a recomputation by the agent's `evaluate` (`LLMAgent.acting_scores_exact`).
    """

    logprobs: torch.Tensor
    values: torch.Tensor | None
    exact: bool


def sampling_generator(seed: int, agent: object) -> torch.Generator:
    """A `torch.Generator` seeded `seed` on the device `agent` samples on (its ``device``; CPU for an agent
    without one): `torch.multinomial` refuses a generator on another device than its probabilities. On a CPU it is
    ``torch.Generator().manual_seed(seed)``."""
    return torch.Generator(device=getattr(agent, "device", "cpu")).manual_seed(seed)


def run_episodes(env, agents: Mapping[str, object], *, seed: int, generator: torch.Generator | None = None,
                 queries: Sequence[str] | None = None, stream_offset: int = 0,
                 acting: dict[str, ActingScores] | None = None,
                 responses: Mapping[str, Sequence[Sequence[int]]] | None = None,
                 sampling: Mapping[str, object] | None = None):
    """Play one batch of episodes to the end: the one rollout loop (training, evaluation, pass@k).

    Args:
        env: a `cory_env.BatchedCORYEnv`; its `group_size` k (rows [g·k, (g+1)·k) play the same query: record,
            query length and response length, so a group-relative learner compares k samples per query).
        agents: seat id -> agent with `act_batch(obs, generator=...) -> np.ndarray (B,) int64` and
            `reset_cache()`; must cover every seat the env selects.
        seed: episode seed (row i draws from stream ``(seed, stream_offset + i // k)``, see docs/architecture.md).
        generator: torch generator for sampling.
        queries: B explicit query texts (``env.reset`` option ``"queries"``: used whole, records ``{"query": q}``)
            instead of drawing them from the task's records; None draws.
        stream_offset: the first row's (group's) stream: this batch plays rows ``stream_offset·k ..`` of a larger
            batch with the same seed (a data-parallel rank's share, the b-th evaluation batch).
        acting: a dict to fill with each seat's `ActingScores` (from the agents' ``last_logprobs`` /
            ``last_values`` after every step; column k of row i is its k-th response token); None records nothing.
        responses: seat -> B given responses (token ids): those seats do not act (``env.reset`` option
            ``"responses"``; `agents` need not hold them).
        sampling: seat -> the `SamplingConfig` the agent in that seat samples with (the seat's own settings,
            `cory_env.generation.seat_sampling`), passed to its ``act_batch``; a seat not named samples with its
            agent's default. The agents keep no seat's settings.

    Returns:
        The env's `EpisodeTranscript`.

    Raises:
        KeyError: if the env selects a seat with no agent.
    """
    options = {}
    if queries is not None:
        options["queries"] = list(queries)
    if stream_offset:
        options["stream_offset"] = stream_offset
    if responses:
        options["responses"] = dict(responses)
    obs, _ = env.reset(seed=seed, options=options or None)
    for agent in agents.values():
        agent.reset_cache()
    steps: dict[str, list[tuple]] = {}
    own = {seat: {"sampling": s} for seat, s in (sampling or {}).items()}
    while not env.done:
        seat = env.agent_selection
        if seat not in agents:
            raise KeyError(f"the env selected seat {seat!r} but agents were given only for {sorted(agents)}")
        actions = agents[seat].act_batch(obs, generator=generator, **own.get(seat, {}))
        if acting is not None:
            steps.setdefault(seat, []).append((getattr(agents[seat], "last_logprobs", None),
                                               getattr(agents[seat], "last_values", None)))
        obs, *_ = env.step(actions)
    for agent in agents.values():
        agent.reset_cache()
    if acting is not None:
        for seat, seat_steps in steps.items():
            if any(lp is None for lp, _ in seat_steps):
                continue  # an agent that records no log-probabilities
            values = None if any(v is None for _, v in seat_steps) else \
                torch.stack([v.float() for _, v in seat_steps], dim=1).cpu()
            acting[seat] = ActingScores(logprobs=torch.stack([lp.float() for lp, _ in seat_steps], dim=1).cpu(),
                                        values=values,
                                        exact=bool(getattr(agents[seat], "acting_scores_exact", False)))
    return env.transcript()


def rollout_from_transcript(transcript, seat: str, pad_id: int | None = None,
                            acting: ActingScores | None = None, temperature: float | None = None) -> Rollout:
    """Pack `transcript.seats[seat]` into a `Rollout` (prompt left padded, response right padded), with the seat's
    acting log-probabilities and values when `acting` is given and exact (0 on padding) and the `temperature` its
    tokens were sampled at (`Rollout.temperature`; None: the agent's default). The ids are the seat's own
    tokenizer's, and so are its allowed actions and, when `pad_id` is None, its pad id (`SeatTranscript`)."""
    seat_t = transcript.seats[seat]
    own = seat_t.pad_id is not None  # written by the env: the seat's own pad id and allowed actions
    pad_id = seat_t.pad_id if pad_id is None else pad_id
    allowed = seat_t.allowed if own else transcript.allowed
    query, query_mask = pad_sequences(seat_t.prompt_ids, pad_id, side="left")
    response, response_mask = pad_sequences(seat_t.response_ids, pad_id, side="right")
    logprobs = values = None
    if acting is not None and acting.exact:
        width = response.shape[1]
        zero = torch.zeros(())
        logprobs = torch.where(response_mask, acting.logprobs[:, :width], zero)
        values = None if acting.values is None else torch.where(response_mask, acting.values[:, :width], zero)
    return Rollout(query=query, query_mask=query_mask, response=response, response_mask=response_mask,
                   scores=torch.as_tensor(np.asarray(seat_t.reward, dtype=np.float32)),
                   task_reward=torch.as_tensor(np.asarray(seat_t.task_reward, dtype=np.float32)),
                   allowed=None if allowed is None else torch.as_tensor(np.asarray(allowed, dtype=bool)),
                   logprobs=logprobs, values=values, temperature=temperature)
