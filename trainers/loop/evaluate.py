"""Evaluating a trained run's checkpoint (what ``cory eval`` calls): one model rebuilt from the checkpoint
(`trainers.loop.cast.load_cast`, the training run's own builder), evaluated the way its task's spec says
(`cory_env.tasks.TaskSpec.evaluation`):

* ``"pioneer"`` (IMDB and the toys): the run's own held-out evaluation — its held-out slice, its evaluation seed, its
  number of episodes, the pioneer seat's sampling settings — of the trained model and of the model before training on
  the same episodes, with the gain and its standard error clustered by query (`pioneer_result`);
* ``"pass@k"`` (GSM8K): pass@1..k on the test split (`passk_result`, `trainers.evaluation.passk`);
* a plug-in task's own callable ``evaluate(target, args) -> Path``.

The pioneer evaluation refuses a run whose query data changed since it trained (the checkpoint's data fingerprint, as
``--resume``): other queries are not the run's own evaluation; ``data_path`` evaluates on other data on purpose and
the result records both fingerprints (`run_data`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

from agents import LLMAgent
from cory_env import EnvConfig, make_reward_fn
from cory_env.generation import seat_sampling
from cory_env.seating import PIONEER, config_seating
from cory_env.tasks import task_spec
from trainers.config import RunConfigs
from trainers.evaluation.episodes import gain_summary, heldout_env, heldout_sem_warning
from trainers.evaluation.evaluator import EVAL_SEED, Evaluator
from trainers.loop import checkpoint as ckpt
from trainers.loop.cast import load_cast
from trainers.loop.fingerprint import data_fingerprint

__all__ = ["DEFAULT_EPISODES", "EVALUATIONS", "EvalTarget", "GSM8K_SEED", "default_out", "evaluation_of",
           "load_target", "passk_result", "pioneer_result", "run_data"]

logger = logging.getLogger(__name__)

#: Held-out episodes of a pioneer evaluation when the run had none (`--eval_episodes 0`): the main job's 128.
DEFAULT_EPISODES = 128
#: GSM8K's default query and sampling seed (the pioneer evaluation takes the run's own, `EVAL_SEED`).
GSM8K_SEED = 12345
#: The built-in evaluations by name (`cory_env.tasks.EVALUATIONS`); a task's spec names one or carries its own.
EVALUATIONS = ("pioneer", "pass@k")


@dataclasses.dataclass
class EvalTarget:
    """What ``cory eval`` evaluates, handed to the task's evaluation (`evaluation_of`; a plug-in's callable prints
    what it found and returns the file it wrote); `checkpoint` is None for a base model."""

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
    query_tokenizer: Any = None  # the run's first model's tokenizer: the queries are drawn and cut in it


def load_target(checkpoint: str | Path, model_name: str | None = None, *, with_base: bool = False,
                use: str = "evaluated") -> EvalTarget:
    """One model of a checkpoint (a checkpoint folder, or a run directory: its latest checkpoint): `model_name`
    (default the model the run's own held-out evaluations follow, ``evaluated`` in the checkpoint), rebuilt with its
    trained weights (`trainers.loop.cast.load_cast`); with `with_base`, also the model before training
    (`EvalTarget.base`). A run directory whose latest checkpoint is not its last is named unfinished in a warning
    (its model is `use`, "evaluated" or "exported", as it is there).

    Raises:
        FileNotFoundError: no checkpoint there. ValueError / CheckpointError: a model name the checkpoint lacks (or
            an empty one), another base model behind the recorded name, another checkpoint format, a damaged file.
    """
    path = ckpt.find_checkpoint(checkpoint)
    state = ckpt.read_trainer_state(path)
    if path != Path(checkpoint):  # a run directory: its latest checkpoint, which may not be its last
        ckpt.warn_if_unfinished(checkpoint, state, use=use)
    trained = sorted(state["models"])
    name = state["evaluated"] if model_name is None else model_name
    if name not in trained:
        raise ValueError(f"--model_name {name!r} is not a model of this checkpoint; choose one of {trained} (default: "
                         f"{state['evaluated']}, the model the run's held-out evaluations follow)")
    cast, configs, state, path = load_cast(path, only=name, extra_of=name if with_base else None)
    member = cast.members[name]
    return EvalTarget(member.agent, member.ref, name, path, configs, f"{member.config.model} ({path}, {name})",
                      configs.learner_spec.kl_estimator(configs.update), float(state["models"][name]["kl_coef"]),
                      cast.members["base"].agent if with_base else None, state.get("inputs"),
                      cast.members["llm1"].tokenizer)


def run_reward(recorded: str, override: str | None) -> str:
    """The name of the reward a checkpoint's evaluation scores with: the run's own (`recorded`, from its config), or
    `override`, checked with `make_reward_fn`.

    Raises:
        ValueError: the run's reward cannot be rebuilt by name (a callable that is not importable) and no override
            was given: another reward is never substituted silently.
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


def pioneer_result(target: EvalTarget, *, episodes: int | None = None, seed: int | None = None,
                   eta: float | None = None, reward: str | None = None, data_path: str | None = None) -> dict:
    """The evaluation ``"pioneer"`` (the module docstring), with `gain_summary` of the two models.

    Args:
        episodes: default the run's ``eval_episodes``, else `DEFAULT_EPISODES`; seed: default `EVAL_SEED`.
        eta: η of the combined reward; default the model's KL coefficient at the checkpoint.
        reward: score with this reward instead of the run's (`run_reward`); data_path: other query data.

    Returns:
        The result (JSON-able): checkpoint, model_name, eta, reward, query_split, heldout_fraction, seed, data
        (`run_data`), the gain fields, ``before`` and ``after``.

    Raises:
        CheckpointError: the run's query data changed since it trained, without `data_path`.
        ValueError: a reward that cannot be rebuilt (`run_reward`).
    """
    configs = target.configs
    env_cfg = configs.task_spec.resolve(configs.env) if configs.task_spec.resolve else configs.env
    if data_path is not None:
        env_cfg = dataclasses.replace(env_cfg, data_path=data_path)
    _, not_held_out = configs.task_spec.heldout_split(env_cfg)
    if not_held_out:
        logger.warning("this evaluation is not held out: %s", not_held_out)
    eta = eta if eta is not None else target.kl_coef
    env_cfg = dataclasses.replace(env_cfg, reward=run_reward(env_cfg.reward, reward))
    episodes = episodes or configs.run.eval_episodes or DEFAULT_EPISODES
    env = heldout_env(env_cfg, target.agent.tokenizer, episodes=episodes, task_options=configs.task_options,
                      query_tokenizer=target.query_tokenizer)
    data = run_data(target, env_cfg, env.task.records, override=data_path is not None)
    if (why := heldout_sem_warning(env, episodes)) is not None:
        logger.warning("%s", why)
    evaluator = Evaluator(env_cfg, config_seating(env_cfg, env.task),
                          seat_sampling(configs.sampling, env_cfg.seat_generation, [PIONEER]),
                          task_options=configs.task_options, kl_penalty=target.kl_penalty, eta=eta, warn=False)
    seed = EVAL_SEED if seed is None else seed
    before, after = (evaluator.pioneer(agent, target.ref_model, episodes=episodes, seed=seed, env=env)
                     for agent in (target.base, target.agent))
    return {"checkpoint": str(target.checkpoint), "model_name": target.model_name, "eta": eta,
            "reward": env_cfg.reward, "query_split": after["query_split"], "heldout_fraction": env_cfg.heldout_fraction,
            "seed": seed, "data": data, **gain_summary(before, after), "before": before, "after": after}


def run_data(target: EvalTarget, env_cfg: EnvConfig, heldout_records: list[dict], *, override: bool) -> dict:
    """The query data a pioneer evaluation reads, checked against the run's: the fingerprints of the training-side
    records `env_cfg` builds (the checkpoint's ``data``) and of `heldout_records` (``heldout_data``, when recorded).

    Returns:
        ``{"data_path", "fingerprint", "run_fingerprint", "queries_fingerprint", "run_queries_fingerprint",
        "same_as_run"}`` (a ``run_`` value None: the checkpoint records none; ``same_as_run`` None when nothing could
        be compared).

    Raises:
        trainers.loop.checkpoint.CheckpointError: (a `ValueError`) the data changed since the run trained and
            `override` (``--data_path``) is not set: other queries are not the run's own evaluation.
    """
    configs, saved = target.configs, target.inputs or {}
    records = configs.task_spec.build(env_cfg, target.query_tokenizer or target.agent.tokenizer,
                                      configs.task_options).records
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
                       "queries the run trained on", target.checkpoint, source)
    elif changed and not override:
        raise ckpt.CheckpointError(
            f"cannot evaluate {target.checkpoint} as the run's own evaluation: its query data changed since the "
            f"run trained ({source}: data fingerprint {changed}), so the held-out queries are other ones. Restore "
            "the data, or pass --data_path FILE to evaluate on other data on purpose (the JSON records both "
            "fingerprints)")
    elif changed:
        logger.warning("--data_path %s holds other queries than the run trained on (data fingerprint %s): this is "
                       "not the run's own evaluation; the JSON records both", env_cfg.data_path, changed)
    return data


def default_out(checkpoint: Path | None, stem: str, label: str = "") -> Path:
    """Where an evaluation goes by default: beside the run's ``checkpoints/`` (``runs/x/eval-llm1-iter-000023.json``,
    safe from rotation); into a checkpoint folder outside a run; without a checkpoint ``eval-gsm8k-<label>.json``."""
    if checkpoint is None:
        return Path(f"eval-gsm8k-{re.sub(r'[^A-Za-z0-9._-]+', '_', label)}.json")
    root = ckpt.checkpoints_root(checkpoint)
    return root.parent / f"{stem}-{checkpoint.name}.json" if root is not None else checkpoint / f"{stem}.json"


def passk_result(target: EvalTarget, *, sampling, data_path: str | None, limit: int | None, num_samples: int,
                 max_k: int, problems_per_batch: int, max_new_tokens: int, prompt: str, seed: int | None,
                 callback=None) -> dict:
    """The evaluation ``"pass@k"`` (GSM8K): pass@1..max_k of the pioneer alone sampling with `sampling`
    (`trainers.evaluation.passk.evaluate_pass_at_k`), with its settings; `callback(partial result)` after each batch.

    Raises:
        ValueError: a data file that is missing.
    """
    from cory_env.tasks.gsm8k import make_gsm8k_task
    from trainers.evaluation.passk import evaluate_pass_at_k
    env_cfg = dataclasses.replace(target.configs.env, task="gsm8k", data_path=data_path, pioneer_template=None,
                                  observer_template=None)
    task = make_gsm8k_task(env_cfg, target.agent.tokenizer, split="test", limit=limit, max_new_tokens=max_new_tokens,
                           min_new_tokens=max_new_tokens,
                           use_chat_template={"auto": None, "chat": True, "plain": False}[prompt])
    seed = GSM8K_SEED if seed is None else seed
    header = {"task": "gsm8k", "model": target.label,
              "checkpoint": None if target.checkpoint is None else str(target.checkpoint),
              "model_name": target.model_name, "data_path": data_path or "hub:test", "seed": seed,
              "sampling": dataclasses.asdict(sampling), "prompt": prompt}
    logger.info("GSM8K eval: %d problems x %d samples, %d new tokens", len(task.records), num_samples, max_new_tokens)
    result = evaluate_pass_at_k(target.agent, task, num_samples=num_samples, ks=tuple(range(1, max_k + 1)),
                                problems_per_batch=problems_per_batch, seed=seed, sampling=sampling,
                                callback=None if callback is None else lambda partial: callback({**header, **partial}))
    return {**header, **result}


def evaluation_of(task: str):
    """The evaluation of task `task` (its spec's `TaskSpec.evaluation`): a built-in name of `EVALUATIONS`, or a
    plug-in task's callable ``(EvalTarget, args) -> Path``.

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
    return evaluation
