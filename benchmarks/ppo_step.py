"""PPO update speed: our `PPOLearner.step` vs TRL 0.11.4 ``PPOTrainer.step``, and CORY vs PPO iteration time.

Two measurements on SmolLM2-135M-Instruct (alias ``smollm2-135m-instruct``), full fine-tune, CPU, fp32:

* **ppo_update_vs_trl** (target <= 1.0): one PPO update on B queries x N new tokens (default 16 x 16) with
  ``ppo_epochs`` 4, our `trainers.PPOLearner.step` seconds divided by TRL 0.11.4 ``PPOTrainer.step`` seconds on
  the identical batch: the same converted weights (``~/.cache/cory/models/smollm2-135m-instruct``), the same
  initial value head, queries (the first Q tokens of IMDB reviews), responses (sampled once here with
  ``generate``, exactly N tokens each) and scores (seeded standard normal). Both configs keep TRL's defaults
  (lr 1.41e-5, adaptive KL 0.2, γ 1, λ 0.95, clip 0.2, vf_coef 0.1) with the same mini-batch size. TRL runs in
  its own virtual environment (``benchmarks/.trl-venv``: torch 2.13.0, transformers 4.46.3, trl 0.11.4), created
  by ``--with-trl``; without it the TRL row is ``null`` (not measured). As a check that both sides saw the same
  batch and weights, the mean reference log-probability of the response tokens is reported for both.
* **cory_vs_ppo_iteration** (target <= 2.1): `trainers.CORYTrainer.iteration` seconds with ``algo="cory"``
  (pioneer + observer rollout, two updates) divided by the same with ``algo="ppo"`` (pioneer only, one update),
  same seed, same queries, B x N tokens per seat (EOS banned so every response has exactly N tokens).

Each side runs one warm-up step, then ``--repeats`` timed steps; the best time counts (the machine is shared).
With one thread (the default) the ratios use process CPU seconds, which count the work done and not the time spent
waiting for a busy CPU; wall seconds are reported too and used with ``--threads`` > 1.
``--threads`` defaults to 1 (see rollout.py: two spin-waiting OpenMP threads on a busy 2-core machine swing
timings up to 4x).

Run::

    python benchmarks/ppo_step.py [--with-trl] [--out benchmarks/results/ppo_step.json]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from agents import DEFAULT_MODEL, LLMAgent, ReferenceModel, load_model_and_tokenizer
from agents.loading import resolve_local_dir
from agents.value_head import ValueHead
from cory_env import BatchedCORYEnv, EnvConfig, make_task
from cory_env.tasks.imdb_data import load_imdb_records
from cory_env.seating import PIONEER
from trainers import CORYTrainer
from trainers.config import CORYConfig, ModelConfig, PPOConfig, RunConfigs
from trainers.learning.ppo import PPOLearner
from trainers.learning.experience import Rollout

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/ppo_step.py` from a clone
    sys.path.insert(0, str(REPO))
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import data_dir, recorded_path  # noqa: E402

IMDB_CSV = data_dir() / "imdb_reviews_1000.csv"  # the data folder, $CORY_SHARED_DATA (benchmarks/paths.py)
TRL_VENV = REPO / "benchmarks" / ".trl-venv"
# What the TRL side needs; torch first so pip takes the local CPU wheel (an open requirement pulls CUDA builds).
TRL_REQUIREMENTS = (("torch==2.13.0",),
                    ("transformers==4.46.3", "trl==0.11.4", "accelerate", "rich", "numpy<2.3"))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="alias or folder (TRL needs a converted safetensors folder)")
    p.add_argument("--batch-size", type=int, default=16, help="queries per update B")
    p.add_argument("--query-tokens", type=int, default=8, help="query length Q in tokens (ppo_update_vs_trl)")
    p.add_argument("--new-tokens", type=int, default=16, help="response length N in tokens")
    p.add_argument("--mini-batch-size", type=int, default=16)
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2, help="timed steps per side after one warm-up (best counts)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--with-trl", action="store_true", help=f"create {TRL_VENV.name} if missing and time TRL")
    p.add_argument("--trl-venv", type=Path, default=TRL_VENV)
    p.add_argument("--skip-cory", action="store_true", help="skip the CORY vs PPO iteration ratio")
    add_out_option(p, "ppo_step.json")
    args = p.parse_args(argv)
    args.out = checked_out(p, args)  # before the timings
    return args


# ---------------------------------------------------------------------------------------------- the TRL side
def ensure_trl_venv(venv: Path) -> Path:
    """The TRL environment's python, creating the environment first if it is missing (a few minutes).

    Raises:
        subprocess.CalledProcessError: if ``venv`` or ``pip`` fails (the output names the package).
    """
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(f"creating {venv} (torch 2.13.0, transformers 4.46.3, trl 0.11.4) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for group in TRL_REQUIREMENTS:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *group], check=True)
    return python


def time_trl(python: Path, batch_file: Path, model_dir: Path, args: argparse.Namespace) -> dict:
    """Run `trl_step.py` in the TRL environment; returns its JSON result."""
    out = batch_file.with_name("trl.json")
    cmd = [str(python), str(REPO / "benchmarks" / "trl_step.py"), "--batch", str(batch_file),
           "--model-dir", str(model_dir), "--mini-batch-size", str(args.mini_batch_size),
           "--ppo-epochs", str(args.ppo_epochs), "--repeats", str(args.repeats), "--threads", str(args.threads),
           "--seed", str(args.seed), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=batch_file.parent)  # not the repo: TRL must not import our packages
    return json.loads(out.read_text())


# ---------------------------------------------------------------------------------------------- our side
def make_batch(model, tokenizer, args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """The shared batch: query (B, Q), response (B, N) int64, scores (B,) float32, initial value head weights."""
    records = load_imdb_records(str(IMDB_CSV) if IMDB_CSV.exists() else None)
    rows = []
    for record in records:
        ids = tokenizer(record["query"], add_special_tokens=False)["input_ids"]
        if len(ids) >= args.query_tokens:
            rows.append(ids[:args.query_tokens])
        if len(rows) == args.batch_size:
            break
    if len(rows) < args.batch_size:
        raise ValueError(f"only {len(rows)} queries of >= {args.query_tokens} tokens; lower --query-tokens")
    query = torch.tensor(rows, dtype=torch.long)
    torch.manual_seed(args.seed)
    with torch.inference_mode():
        out = model.generate(input_ids=query, attention_mask=torch.ones_like(query), do_sample=True, top_k=0,
                             top_p=1.0, temperature=1.0, min_new_tokens=args.new_tokens,
                             max_new_tokens=args.new_tokens, pad_token_id=tokenizer.pad_token_id)
    response = out[:, query.shape[1]:].clone()
    scores = torch.randn(args.batch_size, generator=torch.Generator().manual_seed(args.seed))
    head = ValueHead(model.config.hidden_size)
    return {"query": query, "response": response, "scores": scores.float(),
            "summary.weight": head.summary.weight.detach().clone(), "summary.bias": head.summary.bias.detach().clone()}


def ppo_config(args: argparse.Namespace) -> PPOConfig:
    return PPOConfig(batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs)


def time_ours(model, tokenizer, batch: dict[str, torch.Tensor], args: argparse.Namespace) -> dict:
    """Warm-up + `args.repeats` timed `PPOLearner.step` calls on the batch (full fine-tune layout)."""
    head = ValueHead(model.config.hidden_size)
    head.summary.load_state_dict({"weight": batch["summary.weight"], "bias": batch["summary.bias"]})
    agent = LLMAgent(copy.deepcopy(model).requires_grad_(True), tokenizer, value_head=head)
    agent.eval()
    learner = PPOLearner(agent, ReferenceModel(model), ppo_config(args))
    rollout = Rollout(query=batch["query"], query_mask=torch.ones_like(batch["query"], dtype=torch.bool),
                      response=batch["response"], response_mask=torch.ones_like(batch["response"], dtype=torch.bool),
                      scores=batch["scores"], task_reward=batch["scores"])
    with torch.no_grad():
        ref_mean = float(learner.ref_model.evaluate(rollout.query, rollout.query_mask, rollout.response,
                                                    rollout.response_mask).logprobs.mean())
    order = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    stats = learner.step(rollout, generator=order)
    warmup_s = time.perf_counter() - start
    seconds, cpu_seconds = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        learner.step(rollout, generator=order)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
    return {"warmup_s": round(warmup_s, 3), "seconds": [round(s, 3) for s in seconds],
            "best_s": round(min(seconds), 3), "best_cpu_s": round(min(cpu_seconds), 3), "ref_logprob_mean": ref_mean,
            "first_step_value_loss": stats["value_loss"]}


def time_cory_vs_ppo(model, tokenizer, args: argparse.Namespace) -> dict:
    """Best `CORYTrainer.iteration` seconds for algo cory and ppo (same seed, queries and lengths)."""
    data = str(IMDB_CSV) if IMDB_CSV.exists() else None
    env_config = EnvConfig(task="imdb", data_path=data, min_new_tokens=args.new_tokens,
                           max_new_tokens=args.new_tokens, context_len=96)
    task = make_task("imdb", env_config, tokenizer)
    no_eos = np.ones(len(tokenizer), dtype=np.int8)
    no_eos[tokenizer.eos_token_id] = 0
    task = dataclasses.replace(task, action_mask=no_eos)
    out: dict = {}
    key = "cpu_seconds" if args.threads == 1 else "seconds"  # see ppo_update_vs_trl
    for algo in ("ppo", "cory"):
        with tempfile.TemporaryDirectory() as tmp:
            config = CORYConfig(output_dir=tmp, seed=args.seed, tensorboard=False,
                                log_samples=0, torch_threads=args.threads, role_exchange_period=0)
            seated = dataclasses.replace(env_config, seating=algo)  # "ppo": the pioneer alone; "cory": both seats
            trainer = CORYTrainer(RunConfigs(run=config, update=ppo_config(args), env=seated,
                                             model=ModelConfig(model=args.model)), model=model, tokenizer=tokenizer)
            trainer.env = BatchedCORYEnv(seated, tokenizer, batch_size=args.batch_size, task=task)
            runs = []
            for it in range(args.repeats + 1):  # iteration 0 is the warm-up
                start, cpu_start = time.perf_counter(), time.process_time()
                metrics, _ = trainer.iteration(it)
                runs.append({"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start,
                             "rollout_s": metrics["time/rollout_s"], "update_s": metrics["time/update_s"]})
            best = min(runs[1:], key=lambda r: r[key])
            out[algo] = {key: round(value, 3) for key, value in best.items()}
            # tokens each seat's forward passes see: its prompt (for the observer: the knowledge-transfer
            # prompt holding q and a1) plus its response
            seats = trainer.env.transcript().seats
            out[algo]["forward_tokens"] = {seat: int(sum(len(p) + len(r) for p, r in
                                                         zip(t.prompt_ids, t.response_ids)))
                                           for seat, t in seats.items()}
            del trainer
            gc.collect()
    out["ratio"] = round(out["cory"][key] / out["ppo"][key], 3)
    out["ratio_from"] = key
    tokens = out["cory"]["forward_tokens"]
    out["forward_token_ratio"] = round(sum(tokens.values()) / out["ppo"]["forward_tokens"][PIONEER], 3)
    out["target"] = 2.1
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(args.model)
    model.eval()
    results: dict = {"model": recorded_path(args.model), "threads": args.threads, "batch_size": args.batch_size,
                     "query_tokens": args.query_tokens, "new_tokens": args.new_tokens,
                     "mini_batch_size": args.mini_batch_size, "ppo_epochs": args.ppo_epochs,
                     "repeats": args.repeats, "torch": torch.__version__}
    batch = make_batch(model, tokenizer, args)
    results["ours"] = time_ours(model, tokenizer, batch, args)
    print(f"ours: PPOLearner.step best {results['ours']['best_s']} s (warm-up {results['ours']['warmup_s']} s)",
          flush=True)
    gc.collect()
    results["trl"] = None
    results["ppo_update_vs_trl"] = None
    if args.with_trl:
        model_dir = resolve_local_dir(args.model)
        if model_dir is None:
            raise ValueError(f"--with-trl needs a local converted model folder; {args.model!r} resolved to none")
        python = ensure_trl_venv(args.trl_venv)
        with tempfile.TemporaryDirectory() as tmp:
            batch_file = Path(tmp) / "batch.safetensors"
            save_file({k: v.contiguous() for k, v in batch.items()}, str(batch_file))
            results["trl"] = time_trl(python, batch_file, model_dir, args)
        # one thread: CPU seconds are the work done, unaffected by waiting for a busy CPU; else wall seconds
        key = "best_cpu_s" if args.threads == 1 else "best_s"
        results["ppo_update_vs_trl"] = round(results["ours"][key] / results["trl"][key], 3)
        results["ppo_update_ratio_from"] = key
        print(f"TRL 0.11.4: PPOTrainer.step best {results['trl']['best_s']} s; ours/TRL "
              f"{results['ppo_update_vs_trl']} (target <= 1.0); mean ref logprob ours "
              f"{results['ours']['ref_logprob_mean']:.4f}, TRL {results['trl']['ref_logprob_mean']:.4f}", flush=True)
    results["ppo_update_target"] = 1.0
    if not args.skip_cory:
        results["cory_vs_ppo"] = time_cory_vs_ppo(model, tokenizer, args)
        c = results["cory_vs_ppo"]
        print(f"CORY iteration {c['cory']['seconds']} s / PPO iteration {c['ppo']['seconds']} s = {c['ratio']} "
              f"(target <= 2.1)", flush=True)
    write_json(args.out, results, indent=2)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
