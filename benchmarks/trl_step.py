"""The TRL side of `benchmarks/ppo_step.py`: time TRL 0.11.4 ``PPOTrainer.step`` on a saved batch.

Runs inside the TRL virtual environment (``benchmarks/.trl-venv``: torch 2.13.0 CPU, transformers 4.46.3,
trl 0.11.4, accelerate, rich), never in the project's environment (TRL 0.11 does not import on transformers 5).
`ppo_step.py --with-trl` creates that environment and calls this script; it is not meant to be run by hand, but can
be::

    benchmarks/.trl-venv/bin/python benchmarks/trl_step.py --batch BATCH.safetensors \
        --model-dir ~/.cache/cory/models/smollm2-135m-instruct --out trl.json

Inputs are the same as our side's: the converted SmolLM2 safetensors folder written by `agents.loading` (weights),
its ``tokenizer.json`` read with ``PreTrainedTokenizerFast`` (transformers 4.x cannot read the v5
``tokenizer_config.json``), and the batch file (``query`` int64 (B, Q), ``response`` int64 (B, T), ``scores``
float32 (B,), and the value head's initial ``summary.weight`` (1, H) / ``summary.bias`` (1,), so both sides start
from the same value head). Every row has the same query and response length, so no side pads. Writes a JSON object: the step times in seconds (``warmup_s``, ``seconds``: one per
timed step), versions, and a few statistics of the warm-up step used to check that both sides saw the same
batch and weights (``ref_logprob_mean``: mean reference log-probability per response token, nats).

Only the standard library, torch, transformers, trl and safetensors are imported (no project code).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", required=True, help="safetensors batch written by ppo_step.py")
    p.add_argument("--model-dir", required=True, help="converted SmolLM2 folder (config.json, model.safetensors)")
    p.add_argument("--mini-batch-size", type=int, default=16)
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=1.41e-5)
    p.add_argument("--repeats", type=int, default=2, help="timed steps after the warm-up step")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON result file")
    return p.parse_args()


def load_model(model_dir: Path, value_head: dict[str, torch.Tensor] | None):
    """TRL's ``AutoModelForCausalLMWithValueHead`` on the converted weights, rope theta fixed for transformers 4.

    transformers 5 writes ``rope_parameters: {rope_theta: ...}``; 4.46 reads ``rope_theta`` only and would
    silently fall back to 10000 (SmolLM2 uses 100000), so the value is copied over.
    """
    from transformers import AutoConfig
    from trl import AutoModelForCausalLMWithValueHead

    config = AutoConfig.from_pretrained(model_dir)
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict) and "rope_theta" in rope:
        config.rope_theta = float(rope["rope_theta"])
    model = AutoModelForCausalLMWithValueHead.from_pretrained(str(model_dir), config=config,
                                                              torch_dtype=torch.float32)
    if value_head is not None:
        model.v_head.summary.load_state_dict(value_head)
    return model


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import transformers
    import trl
    from transformers import PreTrainedTokenizerFast
    from trl import PPOConfig, PPOTrainer

    model_dir = Path(args.model_dir).expanduser()
    batch = load_file(args.batch)
    head = {"weight": batch["summary.weight"], "bias": batch["summary.bias"]}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    eos = json.loads((model_dir / "config.json").read_text())["eos_token_id"]
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    tokenizer.pad_token = tokenizer.eos_token
    model = load_model(model_dir, head)
    ref_model = load_model(model_dir, None)
    width = batch["response"].shape[1]
    queries = list(batch["query"])
    responses = list(batch["response"])
    scores = list(batch["scores"].float())
    config = PPOConfig(
        batch_size=len(queries), mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
        learning_rate=args.learning_rate, seed=args.seed, log_with=None,
    )
    trainer = PPOTrainer(config, model, ref_model, tokenizer)

    start = time.perf_counter()
    stats = trainer.step(queries, responses, scores)
    warmup_s = time.perf_counter() - start
    seconds, cpu_seconds = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.step(queries, responses, scores)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
    result = {
        "warmup_s": round(warmup_s, 3),
        "seconds": [round(s, 3) for s in seconds],
        "best_s": round(min(seconds), 3) if seconds else None,
        "best_cpu_s": round(min(cpu_seconds), 3) if cpu_seconds else None,
        # TRL keeps logprobs for every position of [query; response]; the response tokens are the last T
        "ref_logprob_mean": float(torch.as_tensor(stats["objective/ref_logprobs"])[:, -width:].mean()),
        "first_step_value_loss": float(stats["ppo/loss/value"]),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "threads": torch.get_num_threads(),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
