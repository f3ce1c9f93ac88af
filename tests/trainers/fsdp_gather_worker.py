"""Worker for tests/trainers/test_sharding.py: FSDP2-sharded agents act different numbers of steps per process.

Run under ``torchrun --nproc_per_node 2``. Rank r's pioneer acts 2 + 3r steps and its observer 1 + 2r (as when
each process's episodes end at different lengths); with `gathered_for_generation` no process waits for another's
per-layer all-gathers. Prints one JSON line per rank: the step counts, whether every parameter is a shard again
after the block, and the tokens of a second, same-seed rollout (equal: gathering changes no number).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from agents import LLMAgent, ReferenceModel
from agents.tiny import tiny_causal_lm, tiny_tokenizer
from trainers.distributed import DataParallel, is_sharded
from trainers.loop.sharding import gathered_for_generation, shard_agents


def rollout(agents: dict, rank: int) -> list[list[int]]:
    tokens = []
    with gathered_for_generation(agents) as acting:
        for seat, steps in (("pioneer", 2 + 3 * rank), ("observer", 1 + 2 * rank)):
            agent = acting[seat]
            ids = np.full((2, 4), 5 + rank, dtype=np.int64)
            generator = torch.Generator().manual_seed(rank)
            for _ in range(steps):
                obs = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                       "action_mask": np.ones((2, agent.model_vocab_size), dtype=np.int8)}
                ids = np.concatenate([ids, agent.act_batch(obs, generator=generator)[:, None]], axis=1)
            agent.reset_cache()
            tokens.append(ids[0].tolist())
    return tokens


def main() -> None:
    dist = DataParallel.from_launcher("cpu")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    agents = {name: LLMAgent(tiny_causal_lm(tokenizer, seed=0), tokenizer) for name in ("pioneer", "observer")}
    ref = ReferenceModel(tiny_causal_lm(tokenizer, seed=0).requires_grad_(False))
    shard_agents(agents, ref, dist)
    first, second = rollout(agents, dist.rank), rollout(agents, dist.rank)
    params = [p for agent in agents.values() for p in agent.parameters()]
    print(json.dumps({"rank": dist.rank, "steps": [len(t) - 4 for t in first], "same": first == second,
                      "resharded": all(is_sharded(p) for p in params)}), flush=True)
    dist.close(wait=True)  # a clean end: no process tears down gloo while a peer is still in a collective


if __name__ == "__main__":
    main()
