"""`cory eval [CHECKPOINT]`: one model of a run, the pioneer alone (no observer, as at inference), on its task's
evaluation queries; the task's spec says how (`cory_env.tasks.TaskSpec.evaluation`).

* the pioneer evaluation (IMDB and the toys): by default **the run's own held-out evaluation** (the evaluation
  `cory train --eval_episodes` runs: its held-out slice, its evaluation seed, its number of episodes, sampled as the
  run trained), of the trained model and of the model before training on the same episodes; prints the same line
  as training (the gain with its standard error clustered by query, the combined reward, KL, distinct-2) and the
  file it wrote (`trainers.evaluation.episodes`).
* GSM8K (`--task gsm8k`): pass@1..5 on the test split (or its first `--limit N` problems) from `--num_samples` answers
  per problem, with the unbiased estimator and the paper's "any of the first k" form
  (`trainers.evaluation.passk.evaluate_pass_at_k`), sampled like the authors' script (top_k 10, top_p 0.7, temperature
  1.0, repetition penalty 1.1, 256 new tokens). A checkpoint, or a base model without training (`--model`).

The JSON goes next to the checkpoint (or to `--out`, checked before any model loads, `trainers.loop.outputs`),
written atomically, with the query data it read (`trainers.loop.evaluate.run_data`: a run whose query data changed
since it trained is refused unless ``--data_path`` is given). A gain over fewer than two distinct queries has no
standard error: ``gain_sem`` is null, with the reason. The model is rebuilt from the checkpoint without a learner or
optimizer (`trainers.loop.evaluate.load_target`). The sampling options (`--temperature`, `--top_k`, `--top_p`,
`--repetition_penalty`: `agents.SamplingConfig`) apply to GSM8K only.

Examples:
    cory eval runs/imdb-quick
    cory eval runs/gsm8k-quick --task gsm8k --data_path $CORY_SHARED_DATA/gsm8k_test.jsonl --limit 50
    cory eval --task gsm8k --model smollm2-135m-instruct --data_path $CORY_SHARED_DATA/gsm8k_test.jsonl --limit 50
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

import torch
from transformers import HfArgumentParser

from agents import LLMAgent, SamplingConfig
from cory_env import EnvConfig
from cory_env.checks import check_number, check_path
from trainers.loop.outputs import check_output_file, write_output
from trainers.config import RunConfigs
from trainers.loop.evaluate import (GSM8K_SEED, EvalTarget, default_out, evaluation_of, load_target,
                                             passk_result, pioneer_result)
from trainers.evaluation.passk import PAPER_EVAL_SAMPLING
from trainers.evaluation.report import before_after_line, format_passk_table, format_table
from trainers.loop.loading import load_policy_model


def build_parser() -> HfArgumentParser:
    """The `cory eval` parser: the sampling options are `agents.SamplingConfig`'s fields, with the authors' GSM8K
    evaluation sampling (`PAPER_EVAL_SAMPLING`) as defaults."""
    parser = HfArgumentParser(SamplingConfig, prog="cory eval", description=__doc__.splitlines()[0],
                              allow_abbrev=False)
    parser.set_defaults(**dataclasses.asdict(PAPER_EVAL_SAMPLING))
    for group in parser._action_groups:
        if group.title == SamplingConfig._argument_group_name:  # the pioneer's evaluation samples as the run trained
            group.title = "GSM8K sampling (defaults: the authors' evaluation script; a pioneer evaluation samples as " \
                          "the run trained)"
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="A checkpoint folder (runs/X/checkpoints/iter-000009) or a run directory (its latest "
                             "checkpoint). Omit it with --task gsm8k --model NAME to evaluate a base model.")
    parser.add_argument("--task", default=None,
                        help="The task to evaluate on (a registered name, module:attr or plug-in; default: the "
                             "checkpoint's task). Its TaskSpec.evaluation decides how: pioneer (the pioneer alone: "
                             "reward, KL, distinct-n on the run's held-out queries; imdb and the toys) or pass@k "
                             "(gsm8k).")
    parser.add_argument("--model", default=None,
                        help="Evaluate this base model without a checkpoint (hub id, local folder, .gguf, or alias "
                             "smollm2-135m-instruct / tiny); --task gsm8k only.")
    parser.add_argument("--model_name", default=None,
                        help="Which trained model answers: llm1, llm2, ... (default: the model the run's own held-out "
                             "evaluations follow, its eval.json's: the pioneer seat's under CORY's role exchange, "
                             "llm1 in a population or with a model per slot).")
    parser.add_argument("--data_path", default=None,
                        help="Query source override (else the run's). GSM8K: a test JSONL such as "
                             "$CORY_SHARED_DATA/gsm8k_test.jsonl; omitted = the hub's test split.")
    parser.add_argument("--seed", type=int, default=None,
                        help="Query and sampling seed. Default: the run's own held-out seed (`cory train "
                             "--eval_episodes` evaluates with it, so the numbers are the run's), 12345 for GSM8K.")
    parser.add_argument("--out", default=None,
                        help="JSON output path: a file, never one of a run's own files (config.yaml, metrics.jsonl, "
                             "samples.jsonl, eval.json, anything in checkpoints/ or tensorboard/); an existing file "
                             "only with --overwrite. Default: <run>/eval-<model>[-gsm8k]-<checkpoint>.json (a rerun "
                             "replaces it); a checkpoint folder outside a run: inside it; without a checkpoint: "
                             "eval-gsm8k-<model>.json here.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the --out file when it exists (never a run's own file).")
    parser.add_argument("--torch_threads", type=int, default=0, help="torch.set_num_threads; 0 = torch's default.")
    imdb = parser.add_argument_group("the pioneer alone (imdb and the toys): the run's own evaluation by default")
    imdb.add_argument("--episodes", type=int, default=None,
                      help="Held-out episodes (the run's held-out slice; batches of at most 64). Default: the run's "
                           "--eval_episodes, else 128. The base model is evaluated on the same episodes (before).")
    imdb.add_argument("--reward", default=None,
                      help="Score with this reward (a name such as vader, or module:function) instead of the run's. "
                           "Needed when the run's reward was a callable that cannot be imported by name.")
    imdb.add_argument("--eta", type=float, default=None,
                      help="Combined reward coefficient (default: the model's final KL coefficient).")
    gsm = parser.add_argument_group("GSM8K (defaults: the authors' evaluation script)")
    gsm.add_argument("--limit", type=int, default=None, help="Evaluate only the first N test problems.")
    gsm.add_argument("--num_samples", type=int, default=5, help="n: answers per problem (>= 5 for pass@5).")
    gsm.add_argument("--max_k", type=int, default=5, help="Report pass@k for k = 1..max_k (<= --num_samples).")
    gsm.add_argument("--problems_per_batch", type=int, default=8,
                     help="Problems sampled together; one batch is problems_per_batch * num_samples answers.")
    gsm.add_argument("--max_new_tokens", type=int, default=256, help="Tokens per answer (paper: 256).")
    gsm.add_argument("--prompt", choices=("auto", "chat", "plain"), default="auto",
                     help="auto: the tokenizer's chat template when it has one; plain: the authors' "
                          "'Question: ... Answer:' text.")
    return parser


def run_eval(argv: Sequence[str]) -> int:
    """``cory eval ...``; returns the exit status."""
    sampling, args = build_parser().parse_args_into_dataclasses(args=list(argv))
    args.sampling = sampling
    check_eval_numbers(args)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.checkpoint is None and args.model is None:
        raise ValueError("give a CHECKPOINT (a run directory or checkpoint folder), or --task gsm8k --model NAME "
                         "to evaluate a base model")
    if args.checkpoint is not None and args.model is not None:
        raise ValueError("give either a CHECKPOINT or --model, not both (a checkpoint names its own base model)")
    task = args.task or ("gsm8k" if args.checkpoint is None else None)
    if args.checkpoint is None and task != "gsm8k":
        raise ValueError(f"--model without a checkpoint evaluates GSM8K only; add --task gsm8k (got --task {task})")
    check_number(args.max_k, "--max_k", integer=True, high=args.num_samples,
                 fix=f"at most --num_samples {args.num_samples}: pass@k needs n >= k samples per problem")
    if task == "gsm8k" and args.data_path not in (None, "hub"):
        check_path(args.data_path, "--data_path", fix="for GSM8K pass a test JSONL such as --data_path "
                                                      "$CORY_SHARED_DATA/gsm8k_test.jsonl")
    if args.out:  # before any model loads: a wrong path is not found out after the evaluation
        check_output_file(args.out, option="--out", replace=args.overwrite)
    if args.checkpoint is None:
        model, tokenizer = load_policy_model(args.model, seed=GSM8K_SEED if args.seed is None else args.seed)
        target = EvalTarget(LLMAgent(model, tokenizer), None, None, None, RunConfigs(env=EnvConfig(task="gsm8k")),
                            args.model)
    else:
        target = load_target(args.checkpoint, args.model_name, with_base=True)
        task = task or target.configs.env.task
    evaluation = evaluation_of(task)
    if callable(evaluation):  # a plug-in task's own evaluation prints what it found
        print(f"wrote {evaluation(target, args)}")
        return 0
    if evaluation == "pioneer" and target.checkpoint is None:
        raise ValueError("the pioneer evaluation needs a CHECKPOINT (a run directory or checkpoint folder)")
    stem = f"eval-{target.model_name}" + ("-gsm8k" if evaluation == "pass@k" else "")
    out = Path(args.out) if args.out else check_output_file(default_out(target.checkpoint, stem, target.label),
                                                            option="the evaluation file", default=True)
    if evaluation == "pioneer":
        result = pioneer_result(target, episodes=args.episodes, seed=args.seed, eta=args.eta, reward=args.reward,
                                data_path=args.data_path)
        write_output(out, json.dumps(result, indent=2, ensure_ascii=False))
        print(format_table(result["after"]))
        print(before_after_line(target.model_name, result["before"], result["after"], result), flush=True)
    else:
        result = passk_result(target, sampling=args.sampling, data_path=args.data_path, limit=args.limit,
                              num_samples=args.num_samples, max_k=args.max_k,
                              problems_per_batch=args.problems_per_batch, max_new_tokens=args.max_new_tokens,
                              prompt=args.prompt, seed=args.seed,
                              callback=lambda partial: write_output(out, json.dumps(partial, indent=2, ensure_ascii=False)))
        write_output(out, json.dumps(result, indent=2, ensure_ascii=False))
        print(format_passk_table(result))
    print(f"wrote {out}")
    return 0


def check_eval_numbers(args) -> None:
    """Raise `ValueError` naming the first `cory eval` number outside its domain (checked before any model loads):
    counts >= 1, ``--seed`` >= 0, ``--eta`` finite and >= 0, ``--torch_threads`` >= 0."""
    for name in ("num_samples", "max_k", "problems_per_batch", "max_new_tokens"):
        check_number(getattr(args, name), f"--{name}", integer=True, low=1)
    if args.episodes is not None:
        check_number(args.episodes, "--episodes", integer=True, low=1, fix="or leave it out for the run's own number")
    if args.seed is not None:
        check_number(args.seed, "--seed", integer=True, low=0)
    if args.limit is not None:
        check_number(args.limit, "--limit", integer=True, low=1, fix="or leave it out for every problem")
    check_number(args.torch_threads, "--torch_threads", integer=True, low=0, fix="0 = torch's default")
    if getattr(args, "model_name", None) is not None and not args.model_name.strip():
        raise ValueError("--model_name '' names no model; give one such as llm1, or leave it out for the model the "
                         "run's own evaluations follow")
    if args.eta is not None:
        check_number(args.eta, "--eta", low=0, fix="or leave it out for the run's KL coefficient")
