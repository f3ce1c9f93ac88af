"""Benchmark: median microseconds per env step without a model.

Measures the wrapped AEC env (`cory_env.env`), `raw_env` (random valid actions, dead steps excluded) and one
`BatchedCORYEnv.step` at B = 64, with the tiny tokenizer and the default `EnvConfig` (built-in IMDB openings,
VADER reward; the end-of-episode reward call is included in the step that ends an episode).

Usage:
    python benchmarks/env_step.py [--episodes 300] [--batches 30] [--out benchmarks/results/env_step.json]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/env_step.py` from a clone
    sys.path.insert(0, str(ROOT))

from agents.tiny import tiny_tokenizer  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from cory_env import BatchedCORYEnv, EnvConfig, env, raw_env  # noqa: E402


def aec_step_us(make_env, episodes: int, seed: int = 0) -> float:
    """Median µs of live-seat `step` calls over `episodes` episodes (random tokens, EOS excluded)."""
    aec = make_env()
    rng = np.random.default_rng(seed)
    V = aec.action_space(aec.possible_agents[0]).n
    times = []
    for ep in range(episodes):
        aec.reset(seed=seed + ep)
        for agent in aec.agent_iter():
            _, _, terminated, truncated, _ = aec.last(observe=True)
            if terminated or truncated:
                aec.step(None)
                continue
            action = int(rng.integers(1, V))
            t0 = time.perf_counter_ns()
            aec.step(action)
            times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def batched_step_us(batch_size: int, batches: int, tokenizer, seed: int = 0) -> float:
    """Median µs of `BatchedCORYEnv.step` at `batch_size` rows (random tokens, EOS excluded)."""
    benv = BatchedCORYEnv(EnvConfig(), tokenizer, batch_size=batch_size)
    rng = np.random.default_rng(seed)
    times = []
    for b in range(batches):
        benv.reset(seed=seed + b * batch_size)
        while not benv.done:
            actions = rng.integers(1, benv.vocab_size, size=batch_size)
            t0 = time.perf_counter_ns()
            benv.step(actions)
            times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300, help="AEC episodes per env kind")
    parser.add_argument("--batches", type=int, default=30, help="batched episodes (B = --batch-size)")
    parser.add_argument("--batch-size", type=int, default=64)
    add_out_option(parser, "env_step.json")
    args = parser.parse_args()
    out = checked_out(parser, args)
    tok = tiny_tokenizer()
    results = {
        "aec_wrapped_step_us": aec_step_us(lambda: env(tokenizer=tok), args.episodes),
        "aec_raw_step_us": aec_step_us(lambda: raw_env(tokenizer=tok), args.episodes),
        f"batched_b{args.batch_size}_step_us": batched_step_us(args.batch_size, args.batches, tok),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    for key, value in results.items():
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")
    write_json(out, results, indent=2)


if __name__ == "__main__":
    main()
