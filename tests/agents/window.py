"""A scripted stand-in for the env's shifting context window (docs/architecture.md), for agent tests only.

Each step appends the sampled token (or, for a row whose response ended, the pad id with attention-mask 0) and
drops the leftmost column, exactly as `BatchedCORYEnv` does inside a phase.
"""

from __future__ import annotations

import numpy as np
import torch


def left_pad(prompts: list[list[int]], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 (B, length) ids and mask, prompts right-aligned."""
    ids = np.full((len(prompts), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(prompts), length), dtype=np.int64)
    for i, p in enumerate(prompts):
        ids[i, length - len(p):] = p
        mask[i, length - len(p):] = 1
    return ids, mask


def play(agent, prompts, *, steps, context_len, pad_id, vocab_size, eos_id=None, generator=None, on_step=None):
    """Roll the agent for `steps` tokens; returns (query, query_mask, response, response_mask, step_logprobs).

    Rows stop at `eos_id` (kept) and are then padded with mask 0. `on_step(ids, mask)` sees every observation.
    Tensors follow the evaluate contract: query (B, Q) left padded, response (B, T) right padded, bool masks.
    """
    ids, mask = left_pad(prompts, context_len, pad_id)
    action_mask = np.broadcast_to(np.ones((1, vocab_size), dtype=np.int8), (len(prompts), vocab_size))
    active = np.ones(len(prompts), dtype=bool)
    responses = [[] for _ in prompts]
    step_logprobs = [[] for _ in prompts]
    for _ in range(steps):
        if on_step is not None:
            on_step(ids, mask)
        tokens = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": action_mask},
                                 generator=generator)
        new_ids = np.where(active, tokens, pad_id)
        new_mask = active.astype(np.int64)
        for i in np.flatnonzero(active):
            responses[i].append(int(tokens[i]))
            step_logprobs[i].append(float(agent.last_logprobs[i]))
            if eos_id is not None and tokens[i] == eos_id:
                active[i] = False
        ids = np.concatenate([ids[:, 1:], new_ids[:, None]], axis=1)
        mask = np.concatenate([mask[:, 1:], new_mask[:, None]], axis=1)
    q_ids, q_mask = left_pad(prompts, max(len(p) for p in prompts), pad_id)
    t = max(len(r) for r in responses)
    response = np.full((len(prompts), t), pad_id, dtype=np.int64)
    response_mask = np.zeros((len(prompts), t), dtype=bool)
    lp = np.zeros((len(prompts), t), dtype=np.float32)
    for i, r in enumerate(responses):
        response[i, :len(r)] = r
        response_mask[i, :len(r)] = True
        lp[i, :len(r)] = step_logprobs[i]
    return (torch.from_numpy(q_ids), torch.from_numpy(q_mask).bool(), torch.from_numpy(response),
            torch.from_numpy(response_mask), torch.from_numpy(lp))
