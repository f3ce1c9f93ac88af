"""`plan_run`: everything a run checks and builds before any model loads, once, for every path that starts a run.

``cory train`` in one process, the launcher of ``cory train --num_processes N`` (before it starts any process) and
`trainers.loop.cory.CORYTrainer` itself call the same function on the same parsed `RunConfigs`, so a mistake is one
line and exit 2 whichever path runs, and nothing is written before it passes:

1. the learner and the task by name (`RunConfigs` resolved them: registered name, ``module:attr`` or entry point);
2. the device and the sharding against the process count;
3. the task's data source once (`cory_env.tasks.TaskSpec.resolve`: the IMDB hub probe), then the `Task`, built
   once with the run's tokenizer and reward, the `Seating`, built once on it (`cory_env.seating.config_seating`),
   and the training env over both (every prompt fits the context window);
4. the learner against the seating, the process count and its config (`LearnerSpec.check_run`, once: `build`
   does not check again);
   the held-out side of the queries when the run evaluates on one (an empty side is refused here), or a warning that
   its evaluation is not held out (`cory_env.tasks.TaskSpec.heldout_split`);
5. the run folder: ``--resume`` / ``--overwrite``, writability, and a resume's config against the checkpoint's, its
   seating compared as built seatings (`trainers.loop.run_dir.check_output_dir`);
6. the options the run does not read (`trainers.unread_options`), as messages for the caller to log.

The trainer plays the plan's env; nothing re-parses a spec or rebuilds the task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from collections.abc import Mapping

from agents.sampling import SamplingConfig
from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.config import ENV_GENERATION_KEYS
from cory_env.seating import Seating, config_seating
from cory_env.tasks import Task
from cory_env.rewards import reward_name
from trainers.config import RunConfigs
from trainers.distributed import check_device
from trainers.learning.configs import check_kl_horizon
from trainers.loop.build import is_heterogeneous, slot_configs
from trainers.loop.run_dir import check_output_dir
from trainers.loop.sharding import check_sharding
from trainers.unread_options import unread_options

__all__ = ["RunPlan", "plan_run", "sampling_of_seat", "seat_sampling"]


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
        warnings: one message per option the run does not read (`trainers.unread_options`), and one when its
            held-out evaluation reads training queries (`cory_env.tasks.TaskSpec.heldout_split`).
        slots: model name (``llm1`` …) -> its `ModelConfig` (`trainers.loop.build.slot_configs`).
        heterogeneous: the slots hold different model options (a model per slot, docs/seats.md).
        seat_sampling: seat -> the sampling of the model sitting there (`seat_sampling`).
        scheme: the matchmaking `trainers.matchmaking.Scheme` of a population (``--population``, a scheme
            other than role exchange), None for CORY's role exchange (`trainers.loop.role_exchange.RoleExchange`).
    """

    configs: RunConfigs
    env_config: EnvConfig
    task: Task
    seating: Seating
    env: BatchedCORYEnv
    flat: dict[str, Any]
    has_run: bool
    warnings: list[str]
    slots: dict[str, Any] = dataclasses.field(default_factory=dict)
    heterogeneous: bool = False
    seat_sampling: dict[str, SamplingConfig] = dataclasses.field(default_factory=dict)
    scheme: Any = None


def plan_run(configs: RunConfigs, tokenizer, *, num_processes: int = 1,
             reward_fn: Callable | None = None) -> RunPlan:
    """Check `configs` and build the task and the seating (see the module docstring).

    Args:
        configs: the run's configs (`RunConfigs`: the learner and the task are already resolved).
        tokenizer: the run's tokenizer (`trainers.loop.build.load_run_tokenizer`); the task may use it (an action
            mask, a chat template). With a model per slot, model name -> tokenizer: the task is built with the first
            slot's, and each seat of the env starts with the tokenizer of the slot sitting there.
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
    by_model = tokenizer if isinstance(tokenizer, Mapping) else None
    own = configs.model.models or {}
    if by_model is not None:  # the first slot's tokenizer builds the task (its action mask, chat template)
        tokenizer = by_model[own.get("llm1", {}).get("model", configs.model.model)]
    task_tok = tokenizer
    task = spec.build(env_config, tokenizer, configs.task_options)
    if reward_fn is not None:
        task = dataclasses.replace(task, reward_fn=reward_fn)
    seating = config_seating(env_config, task)
    scheme, num_models, scheme_notes = plan_population(configs, seating)
    slots = slot_configs(configs, num_models)
    heterogeneous = is_heterogeneous(slots)
    if heterogeneous and run.sharded:
        raise ValueError("sharding=fsdp shards one model layout over the processes; a model per slot "
                         "(--models) runs with sharding=none (full replicas per process)")
    if by_model is not None:  # the models seated in the first iteration
        first = scheme.assign(0) if scheme is not None else dict(zip(seating.names, slots))
        tokenizer = {seat: by_model[slots[first[seat]].model] for seat in seating.names}
    samplings = seat_sampling(configs.sampling, env_config, seating)
    learner = configs.learner_spec
    env = BatchedCORYEnv(env_config, tokenizer, batch_size=configs.update.batch_size, task=task, seating=seating,
                         group_size=learner.group_size(configs.update), task_tokenizer=task_tok)
    learner.check_run(configs.update, name=run.learner, seats=seating.num_seats, num_processes=num_processes,
                      sharded=run.sharded, reward_matrix=seating.reward_matrix)
    split, not_held_out = spec.heldout_split(env_config)
    notes = list(scheme_notes)
    if run.eval_episodes > 0 and split == "test":  # an empty held-out side is refused here, not at the first evaluation
        spec.build(dataclasses.replace(env_config, query_split="test"), tokenizer, configs.task_options)
    elif run.eval_episodes > 0:
        notes.append(f"the held-out evaluation ({run.eval_episodes} episodes) is not held out: {not_held_out}")
    flat = configs.to_flat()
    if reward_fn is not None:  # what was really used, so `cory eval` and --resume do not fall back to a name
        flat["reward"] = reward_name(reward_fn)
    has_run = check_output_dir(run, num_processes, flat, task=task)
    return RunPlan(configs=configs, env_config=env_config, task=task, seating=seating, env=env,
                   flat=flat, has_run=has_run,
                   warnings=[*unread_options(configs, seating), *notes], slots=slots, heterogeneous=heterogeneous,
                   seat_sampling=samplings, scheme=scheme)


def plan_population(configs: RunConfigs, seating: Seating):
    """(the population's matchmaking scheme or None, the number of models N, warnings): the scheme None for CORY's
    role exchange with one model per seat (the default), else the scheme `CORYConfig.matchmaking` names
    (`RunConfigs.scheme_spec`), built with its options; the warnings say why given options do nothing in this run
    (`SchemeSpec.unread`).

    Raises:
        ValueError: options the scheme refuses, or a population its scheme cannot seat.
    """
    from trainers.loop.build import model_names
    from trainers.matchmaking import check_population, scheme_options

    run, spec = configs.run, configs.scheme_spec
    n = check_population(spec, run.matchmaking, run.population, seating.num_seats)
    options = scheme_options(spec, run.matchmaking_options, name=run.matchmaking)
    reason = spec.unread(options, run.num_iterations) if spec.unread is not None else None
    notes = [f"matchmaking_options {run.matchmaking_options} do nothing {reason}"] if reason else []
    if run.matchmaking == "role-exchange" and n == seating.num_seats:
        return None, n, notes
    return spec.factory(options, model_names(n), seating.names, run.seed, run.role_exchange_period), n, notes


def seat_sampling(sampling: SamplingConfig, env_config: EnvConfig, seating: Seating) -> dict[str, SamplingConfig]:
    """Seat -> the `SamplingConfig` of the model sitting there: `sampling` with the seat's own sampling settings
    (`EnvConfig.seat_generation`) over it.

    Raises:
        ValueError: a seat the seating does not have, or a seat's value `SamplingConfig` refuses (the seat named).
    """
    own = env_config.seat_generation or {}
    unknown = sorted(set(own) - set(seating.names))
    if unknown:
        raise ValueError(f"seat_generation names the seat(s) {unknown}, which the seating {seating.label!r} does not "
                         f"have; name one of {list(seating.names)}")
    return {seat: sampling_of_seat(sampling, env_config, seat) for seat in seating.names}


def sampling_of_seat(sampling: SamplingConfig, env_config: EnvConfig, seat: str) -> SamplingConfig:
    """`sampling` with `seat`'s own sampling settings (`EnvConfig.seat_generation`) over it; `sampling` itself when
    the seat has none.

    Raises:
        ValueError: a value `SamplingConfig` refuses (the seat named).
    """
    own = (env_config.seat_generation or {}).get(seat, {})
    settings = {k: v for k, v in own.items() if k not in ENV_GENERATION_KEYS}
    try:
        return dataclasses.replace(sampling, **settings) if settings else sampling
    except ValueError as err:
        raise ValueError(f"seat_generation {seat}: {err}") from None
