"""`cory eval [CHECKPOINT]`: one model of a run, the pioneer alone (no observer, as at inference), on its task's
evaluation queries; the task's spec says how (`cory_env.tasks.TaskSpec.evaluation`).

* the pioneer evaluation (IMDB and the toys): by default **the run's own held-out evaluation** (the evaluation
  `cory train --eval_episodes` runs: its held-out slice, its evaluation seed, its number of episodes, sampled as the
  run trained), of the trained model and of the model before training on the same episodes; prints the same line
  as training (the gain with its standard error clustered by query, the combined reward, KL, distinct-2) and the
  file it wrote (`trainers.evaluation.episodes`).
* GSM8K (`--task gsm8k`): pass@1..5 on the test split (or its first `--limit N` problems) from `--num_samples`
  answers per problem, with the unbiased estimator and the paper's "any of the first k" form
  (`trainers.evaluation.passk.evaluate_pass_at_k`), sampled like the authors' script (top_k 10, top_p 0.7,
  temperature 1.0, repetition penalty 1.1, 256 new tokens). A checkpoint, or a base model without training
  (`--model`).

The JSON goes next to the checkpoint (or to `--out`: never a file of a run, a folder, or an existing file without
``--overwrite``; checked before any model loads, `trainers.cli.outputs`), written atomically; it records the query
data (``data``: the data path and the fingerprint of the run's queries). The pioneer evaluation refuses a run whose
query data changed since it trained (the checkpoint's data fingerprint, as ``--resume``): other queries are not the
run's own evaluation; ``--data_path`` evaluates on other data on purpose, with a warning, and the JSON records both
fingerprints. A gain over fewer than two distinct queries has no standard error: it is said before the evaluation,
and the numbers are written with ``gain_sem`` null and the reason. The model is rebuilt from the run's recorded configs
(`trainers.config.RunConfigs.from_flat`) and its trained weights are loaded with
`trainers.loop.checkpoint.load_agent`: no learner or optimizer is built. The sampling options (`--temperature`,
`--top_k`, `--top_p`, `--repetition_penalty`: `agents.SamplingConfig`) apply to GSM8K only.

Examples:
    cory eval runs/imdb-quick
    cory eval runs/gsm8k-quick --task gsm8k --data_path $CORY_SHARED_DATA/gsm8k_test.jsonl --limit 50
    cory eval --task gsm8k --model smollm2-135m-instruct --data_path $CORY_SHARED_DATA/gsm8k_test.jsonl --limit 50
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any, Sequence

import torch
from transformers import HfArgumentParser

from agents import LLMAgent, SamplingConfig
from cory_env import EnvConfig, make_reward_fn
from cory_env.checks import check_number, check_path
from cory_env.tasks import task_spec, task_tokenizer
from cory_env.seating import PIONEER
from trainers.config import RunConfigs
from trainers.cli.outputs import check_output_file, write_output
from trainers.cli.train import before_after_line
from trainers.evaluation.episodes import evaluate_heldout, gain_summary, heldout_env, heldout_sem_warning
from trainers.evaluation.passk import PAPER_EVAL_SAMPLING, evaluate_pass_at_k
from trainers.loop import checkpoint as ckpt
from trainers.loop.build import (build_agents, build_slot_agents, is_heterogeneous, load_policy_model, load_run_model,
                                 load_run_tokenizer, slot_configs, tokenizers_by_model)
from trainers.loop.fingerprint import (check_fingerprints, data_fingerprint, model_fingerprint, models_fingerprint,
                                       tokenizer_fingerprint)
from trainers.loop.plan import sampling_of_seat

logger = logging.getLogger(__name__)

#: Held-out episodes of a pioneer evaluation when the run had none (`--eval_episodes 0`): the main job's 128.
DEFAULT_EPISODES = 128
#: GSM8K's default query and sampling seed (the pioneer evaluation takes the run's own, `trainers.loop.cory.EVAL_SEED`).
GSM8K_SEED = 12345



def format_table(result: dict) -> str:
    """The IMDB result as `key  value` lines."""
    keys = ("task_reward", "kl", "combined_reward", "distinct_1", "distinct_2", "response_len", "num_queries")
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {result[k]:.4f}" if isinstance(result[k], float) else f"{k:<{width}}  {result[k]}"
                     for k in keys if k in result)


def format_passk_table(result: dict) -> str:
    """The GSM8K result as a k | unbiased | first-k table plus accuracy, format rate, length and speed."""
    lines = [f"GSM8K pass@k on {result['num_problems']} problems x {result['num_samples']} samples",
             "k  unbiased  first-k"]
    for k, value in result["pass_at_k"].items():
        lines.append(f"{k}  {value:8.4f}  {result['pass_at_k_first'][k]:7.4f}")
    lines.append(f"accuracy {result['accuracy']:.4f}  format_rate {result['format_rate']:.3f}  "
                 f"response_len {result['response_len']:.1f}  {result['tokens_per_s']:.1f} tokens/s "
                 f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


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
                        help="Which trained model answers: llm1, llm2 (default: the one in the pioneer seat).")
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
    if task == "gsm8k":
        _check_data_path(args.data_path)
    if args.out:  # before any model loads: a wrong path is not found out after the evaluation
        check_output_file(args.out, option="--out", replace=args.overwrite)
    if args.checkpoint is None:
        model, tokenizer = load_policy_model(args.model, seed=GSM8K_SEED if args.seed is None else args.seed)
        loaded = EvalTarget(LLMAgent(model, tokenizer), None, None, None, RunConfigs(env=EnvConfig(task="gsm8k")),
                         args.model)
    else:
        loaded = load_checkpoint_agent(args.checkpoint, args.model_name, with_base=True)
        task = task or loaded.configs.env.task
    evaluate = evaluation_of(task)
    if evaluate is evaluate_pioneer and loaded.checkpoint is None:
        raise ValueError("the pioneer evaluation needs a CHECKPOINT (a run directory or checkpoint folder)")
    out = evaluate(loaded, args)
    print(f"wrote {out}")
    return 0


def _check_data_path(data_path: str | None) -> None:
    """Fail before any model loads when a local data file is missing."""
    if data_path not in (None, "hub"):
        check_path(data_path, "--data_path", fix="for GSM8K pass a test JSONL such as --data_path "
                                                 "$CORY_SHARED_DATA/gsm8k_test.jsonl")


@dataclasses.dataclass
class EvalTarget:
    """What ``cory eval`` evaluates, handed to the task's evaluation (`cory_env.tasks.TaskSpec.evaluation`: a
    built-in one of `EVALUATIONS`, or a plug-in task's own callable ``evaluate(target, args) -> Path``, which prints
    what it found and returns the file it wrote): the agent, the reference model, its name and checkpoint folder
    (None for a base model), the run's configs and a label for the output."""

    agent: LLMAgent
    ref_model: Any
    model_name: str | None
    checkpoint: Path | None
    configs: RunConfigs
    label: str
    kl_penalty: str = "kl"
    kl_coef: float | None = None  # the model's β at the checkpoint (the default η of the combined reward)
    base: LLMAgent | None = None  # an agent of the run's layout never trained: the model before training
    inputs: dict | None = None  # the checkpoint's input fingerprints (`trainers.loop.fingerprint`); None: none


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
    if args.eta is not None:
        check_number(args.eta, "--eta", low=0, fix="or leave it out for the run's KL coefficient")


def load_checkpoint_agent(checkpoint: str | Path, model_name: str | None = None, *,
                          with_base: bool = False) -> EvalTarget:
    """One model of a checkpoint (a checkpoint folder, or a run directory: its latest checkpoint): `model_name`
    (``"llm1"``, ``"llm2"``; default the model in the pioneer seat), rebuilt with the run's layout and sampling,
    its trained weights loaded (`checkpoint.load_agent`). Used by ``cory eval`` and ``cory export``. `with_base`:
    also build one agent of the run's layout that is never loaded, the model before training (``cory eval``'s
    "before"; `EvalTarget.base`).

    Raises:
        FileNotFoundError: no checkpoint there. ValueError / CheckpointError: a model name the checkpoint lacks,
            another base model behind the recorded name, a damaged file.
    """
    path = check_path(checkpoint, "checkpoint", kind="folder",
                      fix="give a run directory (runs/x) or one of its checkpoint folders")
    if not (path / "trainer_state.json").exists():
        latest = ckpt.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} is neither a checkpoint folder nor a run directory with checkpoints")
        path = latest
    state = ckpt.read_trainer_state(path)
    configs = RunConfigs.from_flat(state["config"])
    seats = state["exchange"]["seats"]  # seat -> model
    name = model_name or seats[PIONEER]  # every built-in seating's first seat
    trained = sorted(state["kl_coef"])  # every model of the run (a population's too, seated or not)
    if name not in trained:
        raise ValueError(f"--model_name {name!r} is not in this checkpoint; choose one of {trained}")
    slots = slot_configs(configs, len(trained))
    if is_heterogeneous(slots):  # a model per slot: each rebuilt with its own base, tokenizer and layout
        extra = f"llm{len(slots) + 1}"  # with_base: one more agent of the evaluated slot's layout, never loaded
        built = build_slot_agents({**slots, **({extra: slots[name]} if with_base else {})},
                                  tokenizers_by_model(configs, load_run_tokenizer(configs)), configs.sampling,
                                  seed=configs.run.seed, device="cpu", task_tok=task_tokenizer(configs.task_spec))
        check_fingerprints(state["inputs"], {
            "model": models_fingerprint({n: built.fingerprints[n] for n in slots}),
            "tokenizer": models_fingerprint({n: tokenizer_fingerprint(built.tokenizers[n]) for n in slots})},
            str(path))
        agents, ref, base = built.agents, built.refs[name], (built.agents[extra] if with_base else None)
    else:
        model, tokenizer = load_run_model(configs)  # the run's model name, dtype and seed
        # the trained weights go onto this base: refuse another base behind the same name
        check_fingerprints(state["inputs"], {"model": model_fingerprint(model),
                                             "tokenizer": tokenizer_fingerprint(tokenizer)}, str(path))
        # with_base: one agent more than the run had, never loaded: the model before training (a fresh LoRA adapter
        # is the base model; a full copy is its weights)
        agents, ref = build_agents(model, tokenizer, configs.model, configs.sampling,
                                   num_models=len(trained) + int(with_base))
        base = agents[list(agents)[-1]] if with_base else None
    ckpt.load_agent(path, name, agents[name])
    pioneer = sampling_of_seat(configs.sampling, configs.env, PIONEER)  # the pioneer seat's own settings
    for agent in (agents[name], base):
        if agent is not None and agent.sampling != pioneer:
            agent.sampling = pioneer
    kind = configs.learner_spec.kl_estimator(configs.update)
    beta = state["kl_coef"][name]
    return EvalTarget(agents[name], ref, name, path, configs, f"{slots[name].model} ({path}, {name})", kind,
                      float(beta), base, state.get("inputs"))


def evaluate_pioneer(loaded: EvalTarget, args) -> Path:
    """The evaluation ``"pioneer"``: the run's own held-out evaluation of one model (`CORYTrainer.heldout_evaluation`:
    its held-out slice, its evaluation seed, its `--eval_episodes`, as it sampled in training) and of the model
    before training on the same episodes; the gain with its standard error clustered by query (`gain_summary`),
    printed as training prints it. Returns the file written.

    Raises:
        CheckpointError: the run's query data changed since it trained (`run_data`), without ``--data_path``.
        ValueError: a reward that cannot be rebuilt (`_run_reward`).
    """
    from trainers.loop.cory import EVAL_SEED

    configs, where, model_name = loaded.configs, loaded.checkpoint, loaded.model_name
    env_cfg = configs.task_spec.resolve(configs.env) if configs.task_spec.resolve else configs.env
    if args.data_path is not None:
        env_cfg = dataclasses.replace(env_cfg, data_path=args.data_path)
    _, not_held_out = configs.task_spec.heldout_split(env_cfg)
    if not_held_out:
        logger.warning("this evaluation is not held out: %s", not_held_out)
    eta = args.eta if args.eta is not None else loaded.kl_coef  # default: the model's final KL coefficient
    env_cfg = dataclasses.replace(env_cfg, reward=_run_reward(env_cfg.reward, args.reward))
    out = Path(args.out) if args.out else check_output_file(_default_out(where, f"eval-{model_name}"),
                                                            option="the evaluation file", default=True)
    episodes = args.episodes or configs.run.eval_episodes or DEFAULT_EPISODES
    env = heldout_env(env_cfg, loaded.agent.tokenizer, episodes=episodes, task_options=configs.task_options)
    data = run_data(loaded, env_cfg, env.task.records, override=args.data_path is not None)
    if (why := heldout_sem_warning(env, episodes)) is not None:
        logger.warning("%s", why)
    common = {"episodes": episodes, "seed": EVAL_SEED if args.seed is None else args.seed, "eta": eta,
              "kl_penalty": loaded.kl_penalty, "env": env}
    first = env.possible_agents[0]
    before, after = (evaluate_heldout({first: agent}, loaded.ref_model, env_cfg, agent.tokenizer, **common)
                     for agent in (loaded.base, loaded.agent))
    result = {"checkpoint": str(where), "model_name": model_name, "eta": eta, "reward": env_cfg.reward,
              "query_split": after["query_split"], "heldout_fraction": env_cfg.heldout_fraction, "seed": common["seed"],
              "data": data, **gain_summary(before, after), "before": before, "after": after}
    _write_json(out, result)
    print(format_table(result["after"]))
    print(before_after_line(loaded.model_name, result["before"], result["after"], result), flush=True)
    return out


def run_data(loaded: EvalTarget, env_cfg: EnvConfig, heldout_records: list[dict], *, override: bool) -> dict[str, Any]:
    """The query data a pioneer evaluation reads, checked against the run's: the fingerprint of the training-side
    records `env_cfg` builds (what the run recorded at its start, `trainers.loop.fingerprint.data_fingerprint`,
    key ``data``) and of the evaluated records `heldout_records` (key ``heldout_data``, when the checkpoint records
    it), each beside the checkpoint's.

    Returns:
        ``{"data_path", "fingerprint", "run_fingerprint", "queries_fingerprint", "run_queries_fingerprint",
        "same_as_run"}`` for the evaluation JSON (a ``run_`` value None: the checkpoint records none; ``same_as_run``
        None when nothing could be compared).

    Raises:
        trainers.loop.checkpoint.CheckpointError: (a `ValueError`) the data changed since the run trained and
            `override` (``--data_path``) is not set: other queries are not the run's own evaluation.
    """
    configs, saved = loaded.configs, loaded.inputs or {}
    records = configs.task_spec.build(env_cfg, loaded.agent.tokenizer, configs.task_options).records
    data = {"data_path": env_cfg.data_path, "fingerprint": data_fingerprint(records), "run_fingerprint":
            saved.get("data"), "queries_fingerprint": data_fingerprint(heldout_records),
            "run_queries_fingerprint": saved.get("heldout_data")}
    pairs = [(data[f"run_{key}"], data[key]) for key in ("fingerprint", "queries_fingerprint")
             if data[f"run_{key}"] is not None]
    data["same_as_run"] = all(a == b for a, b in pairs) if pairs else None
    source = "the built-in data" if env_cfg.data_path is None else repr(env_cfg.data_path)
    changed = "; ".join(f"{a[:12]}.. -> {b[:12]}.." for a, b in pairs if a != b)
    if not pairs:
        logger.warning("%s records no fingerprint of its query data: cannot tell whether %s still holds the "
                       "queries the run trained on", loaded.checkpoint, source)
    elif changed and not override:
        raise ckpt.CheckpointError(
            f"cannot evaluate {loaded.checkpoint} as the run's own evaluation: its query data changed since the "
            f"run trained ({source}: data fingerprint {changed}), so the held-out queries are other ones. Restore "
            "the data, or pass --data_path FILE to evaluate on other data on purpose (the JSON records both "
            "fingerprints)")
    elif changed:
        logger.warning("--data_path %s holds other queries than the run trained on (data fingerprint %s): this is "
                       "not the run's own evaluation; the JSON records both", env_cfg.data_path, changed)
    return data


def _default_out(checkpoint: Path, stem: str) -> Path:
    """Where an evaluation of `checkpoint` goes by default: beside the run's ``checkpoints/`` (``runs/x/eval-llm1-
    iter-000023.json``), which checkpoint rotation never deletes; into the checkpoint folder when it lies outside a
    run."""
    root = ckpt.checkpoints_root(checkpoint)
    return root.parent / f"{stem}-{checkpoint.name}.json" if root is not None else checkpoint / f"{stem}.json"


def _run_reward(recorded: str, override: str | None) -> str:
    """The name of the reward `cory eval` scores with: the run's own (`recorded`, from its config), or `override`
    (--reward), checked with `make_reward_fn`.

    Raises:
        ValueError: the run's reward cannot be rebuilt by name (a callable that is not importable) and no
            --reward was given: another reward is never substituted silently.
    """
    if override is not None:
        if override != recorded:
            logger.warning("scoring with --reward %s; this run was trained with the reward %s", override, recorded)
        return override  # the env build checks it
    try:
        make_reward_fn(recorded)
    except ValueError as err:
        raise ValueError(f"this run was trained with the reward {recorded!r}, which cannot be rebuilt by name "
                         f"({err}); cory eval does not score with another reward silently: pass --reward NAME "
                         "(e.g. --reward vader) or --reward module:function") from err
    return recorded


def evaluate_pass_at_k_gsm8k(loaded: EvalTarget, args) -> Path:
    """The evaluation ``"pass@k"`` (GSM8K): pass@1..max_k of the pioneer alone, printed as a table. Returns the file
    written.

    Raises:
        ValueError: a task other than gsm8k (pass@k checks GSM8K's answers).
    """
    from cory_env.tasks.gsm8k import make_gsm8k_task

    agent, where, model_name, model_label = loaded.agent, loaded.checkpoint, loaded.model_name, loaded.label
    seed = GSM8K_SEED if args.seed is None else args.seed

    env_cfg = dataclasses.replace(loaded.configs.env, task="gsm8k", data_path=args.data_path, pioneer_template=None,
                                  observer_template=None)
    task = make_gsm8k_task(env_cfg, agent.tokenizer, split="test", limit=args.limit,
                           max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                           use_chat_template={"auto": None, "chat": True, "plain": False}[args.prompt])
    agent.sampling = args.sampling
    if args.out:
        out = Path(args.out)
    else:
        out = (_default_out(where, f"eval-{model_name}-gsm8k") if where is not None else
               Path(f"eval-gsm8k-{re.sub(r'[^A-Za-z0-9._-]+', '_', model_label)}.json"))
        check_output_file(out, option="the evaluation file", default=True)
    header = {"task": "gsm8k", "model": model_label, "checkpoint": None if where is None else str(where),
              "model_name": model_name, "data_path": args.data_path or "hub:test", "seed": seed,
              "sampling": dataclasses.asdict(agent.sampling), "prompt": args.prompt}
    logger.info("GSM8K eval: %d problems x %d samples, %d new tokens, writing %s", len(task.records),
                args.num_samples, args.max_new_tokens, out)
    result = evaluate_pass_at_k(
        agent, task, num_samples=args.num_samples, ks=tuple(range(1, args.max_k + 1)),
        problems_per_batch=args.problems_per_batch, seed=seed,
        callback=lambda partial: _write_json(out, {**header, **partial}),
    )
    result = {**header, **result}
    _write_json(out, result)
    logger.info("GSM8K eval written to %s", out)
    print(format_passk_table(result))
    return out


#: The built-in evaluations by name (`cory_env.tasks.EVALUATIONS`); a task's spec names one or carries its own.
EVALUATIONS = {"pioneer": evaluate_pioneer, "pass@k": evaluate_pass_at_k_gsm8k}


def evaluation_of(task: str):
    """The evaluation of task `task` (its spec's `TaskSpec.evaluation`): a callable ``(EvalTarget, args) -> Path``.

    Raises:
        ValueError: a task that declares no evaluation, or pass@k for a task other than gsm8k.
    """
    evaluation = task_spec(task).evaluation
    if callable(evaluation):
        return evaluation
    if evaluation == "pass@k" and task != "gsm8k":
        raise ValueError(f"task {task!r} declares pass@k evaluation, which cory eval runs for gsm8k only; give its "
                         "TaskSpec an evaluation callable of its own, or use trainers.evaluation.passk.evaluate_pass_at_k")
    if evaluation not in EVALUATIONS:
        raise ValueError(f"task {task!r} declares no evaluation (its TaskSpec.evaluation is {evaluation!r}); give its "
                         "TaskSpec an evaluation callable (target, args) -> Path")
    return EVALUATIONS[evaluation]


def _write_json(path: Path, result: dict) -> None:
    """Write `result` to `path` atomically (`trainers.cli.outputs.write_output`: no temporary file is left)."""
    write_output(path, json.dumps(result, indent=2, ensure_ascii=False))
