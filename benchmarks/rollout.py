"""Rollout throughput: the CORY env driven by the KV-cached `LLMAgent` vs plain ``model.generate``.

Two ratios on SmolLM2-135M-Instruct (CPU, fp32):

* **batched**: a `BatchedCORYEnv` episode batch (B rows, pioneer then observer, N tokens each) stepped with
  ``agent.act_batch``, tokens/s, divided by ``model.generate`` tokens/s on the same two seats' prompts
  (B rows, N new tokens each). Target >= 0.95.
* **aec**: one `raw_env` episode stepped token by token with ``agent.act`` (``agent_iter`` / ``last()``), divided
  by ``generate`` at batch 1 on the same two prompts. Target >= 0.8.

Both sides sample identically (``do_sample=True, top_k=0, top_p=1.0, temperature=1.0``) and write exactly N
tokens: the env bans EOS through the task's action mask with ``min_new_tokens = max_new_tokens = N``, ``generate``
gets ``min_new_tokens = max_new_tokens = N``. Each measurement is warmed up once, then timed ``--repeats`` times
interleaved with its baseline; the best time of each side counts (the machine is shared). ``--threads`` defaults
to 1 because two OpenMP threads on a busy 2-core machine give timings that swing up to 4x between runs.

Run::

    python benchmarks/rollout.py --out benchmarks/results/rollout.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

from agents import DEFAULT_MODEL, LLMAgent, SamplingConfig, load_model_and_tokenizer
from agents.precision import autocast
from cory_env import BatchedCORYEnv, EnvConfig, make_task, raw_env

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/rollout.py` from a clone
    sys.path.insert(0, str(REPO))
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import data_dir, recorded_path  # noqa: E402

IMDB_CSV = data_dir() / "imdb_reviews_1000.csv"  # the data folder, $CORY_SHARED_DATA (benchmarks/paths.py)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="alias, .gguf, folder or hub id")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2, help="timed runs per side (best counts)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on a shared 2-core machine, 2 spin-waiting threads "
                        "make timings swing up to 4x between runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-aec", action="store_true")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed"),
                   help="both sides compute in it (agents.precision; generate runs under the same autocast)")
    add_out_option(p, "rollout.json")
    args = p.parse_args()
    args.out = checked_out(p, args)  # before the timings
    return args


def build_config_and_task(tokenizer, new_tokens: int):
    data = str(IMDB_CSV) if IMDB_CSV.exists() else None
    config = EnvConfig(task="imdb", data_path=data, min_new_tokens=new_tokens, max_new_tokens=new_tokens,
                       context_len=128)
    task = make_task("imdb", config, tokenizer)
    no_eos = np.ones(len(tokenizer), dtype=np.int8)
    no_eos[tokenizer.eos_token_id] = 0
    return config, dataclasses.replace(task, action_mask=no_eos)


def env_batched(env, agent, seed, generator):
    obs, _ = env.reset(seed=seed)
    agent.reset_cache()
    start = time.perf_counter()
    while not env.done:
        obs, *_ = env.step(agent.act_batch(obs, generator=generator))
    seconds = time.perf_counter() - start
    tr = env.transcript()
    tokens = sum(len(r) for seat in tr.seats.values() for r in seat.response_ids)
    prompts = [seat.prompt_ids for seat in tr.seats.values()]
    return tokens, seconds, prompts


def env_aec(env, agent, seed, generator):
    env.reset(seed=seed)
    agent.reset_cache()
    start = time.perf_counter()
    for _ in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else agent.act(obs, generator=generator))
    seconds = time.perf_counter() - start
    tr = env.transcript()
    tokens = sum(len(seat.response_ids[0]) for seat in tr.seats.values())
    prompts = [seat.prompt_ids for seat in tr.seats.values()]
    return tokens, seconds, prompts


def generate(model, tokenizer, prompts_per_seat, new_tokens, generator_seed, precision="fp32"):
    """Time ``generate`` on each seat's prompts (under the autocast of `precision`); returns (tokens, seconds)."""
    torch.manual_seed(generator_seed)
    tokens, seconds = 0, 0.0
    for prompts in prompts_per_seat:
        batch = tokenizer.pad({"input_ids": prompts}, padding=True, return_tensors="pt")
        start = time.perf_counter()
        with torch.inference_mode(), autocast(precision, "cpu"):
            out = model.generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=True, top_k=0,
                top_p=1.0, temperature=1.0, repetition_penalty=1.0, min_new_tokens=new_tokens,
                max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
            )
        seconds += time.perf_counter() - start
        tokens += (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
    return tokens, seconds


def compare(run_env, model, tokenizer, new_tokens, repeats, seed, precision="fp32"):
    """Warm up, then interleave timed env and generate runs; best time of each side counts."""
    _, _, prompts = run_env(seed)
    generate(model, tokenizer, prompts, new_tokens, seed, precision)
    best_env, best_gen = None, None
    for r in range(repeats):
        tokens, seconds, prompts = run_env(seed + r + 1)
        g_tokens, g_seconds = generate(model, tokenizer, prompts, new_tokens, seed + r + 1, precision)
        if best_env is None or seconds < best_env[1]:
            best_env = (tokens, seconds)
        if best_gen is None or g_seconds < best_gen[1]:
            best_gen = (g_tokens, g_seconds)
    env_tps = best_env[0] / best_env[1]
    gen_tps = best_gen[0] / best_gen[1]
    return {
        "env": {"tokens": best_env[0], "seconds": round(best_env[1], 3), "tokens_per_s": round(env_tps, 2)},
        "generate": {"tokens": best_gen[0], "seconds": round(best_gen[1], 3), "tokens_per_s": round(gen_tps, 2)},
        "ratio": round(env_tps / gen_tps, 3),
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(args.model)
    model.eval()
    config, task = build_config_and_task(tokenizer, args.new_tokens)
    agent = LLMAgent(model, tokenizer, sampling=SamplingConfig(), vocab_size=len(tokenizer), precision=args.precision)
    gen = torch.Generator().manual_seed(args.seed)
    results = {"model": recorded_path(args.model), "threads": args.threads, "batch_size": args.batch_size,
               "new_tokens": args.new_tokens, "repeats": args.repeats, "torch": torch.__version__,
               "precision": args.precision}

    benv = BatchedCORYEnv(config, tokenizer, batch_size=args.batch_size, task=task)
    results["batched"] = compare(lambda s: env_batched(benv, agent, s, gen), model, tokenizer,
                                 args.new_tokens, args.repeats, args.seed, args.precision)
    results["batched"]["target"] = 0.95
    print(f"batched B={args.batch_size}: env {results['batched']['env']['tokens_per_s']} tok/s, generate "
          f"{results['batched']['generate']['tokens_per_s']} tok/s, ratio {results['batched']['ratio']} "
          f"(target >= 0.95)")
    if not args.skip_aec:
        aenv = raw_env(config, tokenizer, task=task)
        results["aec"] = compare(lambda s: env_aec(aenv, agent, s, gen), model, tokenizer,
                                 args.new_tokens, args.repeats, args.seed, args.precision)
        results["aec"]["target"] = 0.8
        print(f"aec B=1: env {results['aec']['env']['tokens_per_s']} tok/s, generate "
              f"{results['aec']['generate']['tokens_per_s']} tok/s, ratio {results['aec']['ratio']} "
              f"(target >= 0.8)")
    write_json(args.out, results, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
