"""`plan_run`: everything a run checks and builds before any model loads, once, for every path that starts a run.

``cory train`` in one process, the launcher of ``cory train --num_processes N`` (before it starts any process) and
`trainers.loop.cory.CORYTrainer` itself call the same function on the same parsed `RunConfigs`, so a mistake is one
line and exit 2 whichever path runs, and nothing is written before it passes:

1. the learner and the task by name (`RunConfigs` resolved them: registered name, ``module:attr`` or entry point);
2. the device and the sharding against the process count;
3. the task's data source once (`cory_env.tasks.TaskSpec.resolve`: the IMDB hub probe), then the `Task`, built
   once with the run's tokenizer and reward, the `Seating`, built once on it (`cory_env.seating.config_seating`),
   and the training env over both (every prompt fits the context window);
4. the learner against the seating, the process count and its config (`LearnerSpec.check_run`, once: `build` does not
   check again); the held-out side of the queries when the run evaluates on one (an empty side is refused here), or a
   warning that its evaluation is not held out (`cory_env.tasks.TaskSpec.heldout_split`);
5. the run folder: ``--resume`` / ``--overwrite``, writability, and a resume's config against the checkpoint's, its
   seating compared as built seatings (`trainers.loop.run_dir.check_output_dir`);
6. the options the run does not read (`trainers.config.unread`), as messages for the caller to log.

It also resolves, once, what is scoped to a model or a seat: each model slot's `ModelConfig` (`slots`), each seat's
`SamplingConfig` (`seat_sampling`), and the matchmaking scheme that seats the models (`scheme`; CORY's role exchange by
default), whose first assignment is checked against the scheme contract. The trainer plays the plan's env; nothing
re-parses a spec or rebuilds the task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from collections.abc import Mapping

from agents.sampling import SamplingConfig
from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.generation import seat_sampling
from cory_env.seating import Seating, config_seating
from cory_env.tasks import Task
from cory_env.rewards import reward_name
from trainers.config import ModelConfig, RunConfigs
from trainers.distributed import check_device
from trainers.learning.configs import check_kl_horizon
from trainers.loop.build import model_names
from trainers.loop.cast import slot_configs
from trainers.matchmaking import Scheme, build_scheme, check_population
from trainers.loop.run_dir import check_output_dir
from trainers.loop.sharding import check_sharding
from trainers.config.unread import unread_options

__all__ = ["RunPlan", "plan_run"]


@dataclass(frozen=True)
class RunPlan:
    """What `plan_run` checked and built.

    Attributes:
        configs: the run's configs.
        env_config: ``configs.env`` with the task's data source resolved once (`cory_env.tasks.TaskSpec.resolve`):
            every env of the run (training, evaluations) reads the same source.
        task: the training `Task` (the ``train`` side of the held-out slice), with the run's reward.
        seating: the run's `Seating` on that task.
        env: the training env: ``configs.update.batch_size`` rows of the task played by the seating, in groups of
            the responses per query the learner needs (``env.group_size``, `LearnerSpec.group_size`).
        flat: the flat config the run records (``config.yaml``; a callable reward recorded by name).
        has_run: the output folder holds a run (which ``--resume`` continues or ``--overwrite`` replaces).
        warnings: one message per option the run does not read (`trainers.config.unread`), and one when its
            held-out evaluation reads training queries (`cory_env.tasks.TaskSpec.heldout_split`).
        slots: model name (``llm1`` …) -> its `ModelConfig` (`trainers.loop.cast.slot_configs`).
        seat_sampling: seat -> the `SamplingConfig` of the model sitting there (`cory_env.generation.seat_sampling`).
        scheme: the `trainers.matchmaking.Scheme` that seats the models (CORY's role exchange unless
            ``--matchmaking`` names another).
        follow: the model a pioneer-alone held-out evaluation follows when the slots hold different models and the
            scheme evaluates the models where they sit (CORY's role exchange: ``llm1``, one model across role
            exchanges), else None (the scheme's `trainers.matchmaking.Scheme.evaluated`: `trainers.loop.
            role_exchange.RoleExchange.evaluated_model`).
        task_tokenizer: the tokenizer the task was built with (the first slot's; its action mask is for it).
    """

    configs: RunConfigs
    env_config: EnvConfig
    task: Task
    seating: Seating
    env: BatchedCORYEnv
    flat: dict[str, Any]
    has_run: bool
    warnings: list[str]
    slots: dict[str, ModelConfig]
    seat_sampling: dict[str, SamplingConfig]
    scheme: Scheme
    follow: str | None
    task_tokenizer: Any


def plan_run(configs: RunConfigs, tokenizers: Mapping[str, Any], *, num_processes: int = 1,
             reward_fn: Callable | None = None) -> RunPlan:
    """Check `configs` and build the task and the seating (see the module docstring).

    Args:
        configs: the run's configs (`RunConfigs`: the learner and the task are already resolved).
        tokenizers: every model the run names -> its tokenizer (`trainers.loop.loading.load_run_tokenizers`): the
            task is built with the first slot's (its action mask, chat template), and each seat of the env starts
            with the tokenizer of the model seated there in the first iteration.
        num_processes: the processes the run trains on (the launcher's ``--num_processes``, or the launched world).
        reward_fn: a reward callable overriding the task's (`CORYTrainer`'s ``reward_fn``); recorded by name.

    Raises:
        ValueError / FileExistsError / FileNotFoundError / OSError: the first check that fails (the message names
            the option and the fix).
    """
    run = configs.run
    check_device(run.device, num_processes)
    check_kl_horizon(configs.update, num_processes)  # n_steps = batch_size · processes
    check_sharding(run.sharding, world_size=num_processes, use_lora=configs.model.use_lora)
    spec = configs.task_spec
    env_config = spec.resolve(configs.env) if spec.resolve is not None else configs.env
    first_model = (configs.model.models or {}).get("llm1", {}).get("model", configs.model.model)
    task_tok = tokenizers[first_model]  # the first slot's tokenizer builds the task (its action mask, chat template)
    task = spec.build(env_config, task_tok, configs.task_options)
    if reward_fn is not None:
        task = dataclasses.replace(task, reward_fn=reward_fn)
    seating = config_seating(env_config, task)
    n = check_population(configs.scheme_spec, run.matchmaking, run.population, seating.num_seats)
    slots = slot_configs(configs, n)
    differ = any(config != slots['llm1'] for config in slots.values())  # a model per slot (docs/seats.md)
    if differ and run.sharded:
        raise ValueError("sharding=fsdp shards one model layout over the processes; a model per slot "
                         "(--models) runs with sharding=none (full replicas per process)")
    scheme = build_scheme(configs.scheme_spec, name=run.matchmaking, options=configs.scheme_options,
                          models=model_names(n), seats=seating.names, seed=run.seed, period=run.role_exchange_period)
    first = scheme.assign(0)  # the models seated in the first iteration
    learner = configs.learner_spec
    env = BatchedCORYEnv(env_config, {seat: tokenizers[slots[first[seat]].model] for seat in seating.names},
                         batch_size=configs.update.batch_size, task=task, seating=seating,
                         group_size=learner.group_size(configs.update), task_tokenizer=task_tok)
    samplings = seat_sampling(configs.sampling, env_config.seat_generation, seating.names)  # seats checked by env
    learner.check_run(configs.update, name=run.learner, seats=seating.num_seats, num_processes=num_processes,
                      sharded=run.sharded, reward_matrix=seating.reward_matrix)
    split, not_held_out = spec.heldout_split(env_config)
    reason = configs.scheme_spec.unread(configs.scheme_options, run.num_iterations) \
        if configs.scheme_spec.unread is not None else None
    notes = [f"matchmaking_options {run.matchmaking_options} do nothing {reason}"] if reason else []
    if run.eval_episodes > 0 and split == "test":  # an empty held-out side is refused here, not at the first evaluation
        spec.build(dataclasses.replace(env_config, query_split="test"), task_tok, configs.task_options)
    elif run.eval_episodes > 0:
        notes.append(f"the held-out evaluation ({run.eval_episodes} episodes) is not held out: {not_held_out}")
    flat = configs.to_flat()
    if reward_fn is not None:  # what was really used, so `cory eval` and --resume do not fall back to a name
        flat["reward"] = reward_name(reward_fn)
    has_run = check_output_dir(run, num_processes, flat, task=task)
    return RunPlan(configs=configs, env_config=env_config, task=task, seating=seating, env=env, flat=flat,
                   has_run=has_run, warnings=[*unread_options(configs, seating), *notes], slots=slots,
                   seat_sampling=samplings, scheme=scheme, task_tokenizer=task_tok,
                   follow="llm1" if differ and getattr(scheme, "seated_evaluation", False) else None)
