"""Options that do nothing in a given combination, named at the start of a run instead of being ignored silently.

`inert_options(configs)` returns one message per option (or group) that cannot take effect, each naming the
option, its value, why, and what to change. `CORYTrainer` logs them as warnings before training. An option only
counts when it differs from its default (or is switched on), so defaults never warn.

>>> from cory_env.seating import Seating
>>> from trainers.config import RunConfigs
>>> inert_options(RunConfigs.from_flat({"num_iterations": 3, "role_exchange_period": 5}), Seating.cory())[0][:59]
'role_exchange_period=5 > num_iterations=3: no role exchange'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cory_env.seating import Seating
from trainers.config import RunConfigs
from trainers.learning.learners import learner_spec

__all__ = ["inert_options"]

IMDB_ONLY = ("reward", "min_review_chars", "query_min_tokens", "query_max_tokens")
"""`EnvConfig` fields only the IMDB task reads."""
HELDOUT_TASKS = ("imdb", "tiny_vocab", "relay", "chain_relay")
"""Tasks that read `EnvConfig.heldout_fraction` (a fixed held-out slice of their queries)."""


def _changed(config: Any, *names: str) -> list[str]:
    """`name=value` for each of `names` whose value differs from the dataclass default."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    return [f"{n}={getattr(config, n)!r}" for n in names if getattr(config, n) != defaults[n]]


def inert_options(configs: RunConfigs, seating: Seating) -> list[str]:
    """Messages for the options that cannot take effect in this combination (empty when every option counts).

    Args:
        configs: the run's configs.
        seating: the run's seating (`cory_env.seating.config_seating` of ``configs.env``).

    Returns:
        One message per inert option or group of options, in config order.
    """
    config, ppo_config, env_config, model_config = configs.run, configs.ppo, configs.env, configs.model
    out: list[str] = []
    period, n = config.role_exchange_period, config.num_iterations
    seats = seating.num_seats
    exchanges = seats > 1 and 0 < period < n
    if seats > 1 and period > 0 and not exchanges:
        when = ("no role exchange happens" if period > n
                else "the only role exchange follows the last iteration, so no iteration runs with swapped roles")
        out.append(f"role_exchange_period={period} {'>' if period > n else '=='} num_iterations={n}: {when}; "
                   f"lower role_exchange_period below {n} (or 0 to disable role exchange on purpose)")
    if config.reset_on_exchange and not exchanges:
        out.append("reset_on_exchange=True does nothing: no role exchange happens in this run")
    if seats == 1:
        moot = _changed(config, "role_exchange_period") + _changed(env_config, "knowledge_transfer",
                                                                      "partner_reward_coef", "observer_template")
        if moot:
            out.append(f"{', '.join(moot)} do(es) nothing with seating={env_config.seating!r}: the single-agent "
                       "baseline has no observer and no role exchange")
    elif _changed(env_config, "observer_template") and not any(s.sees_query and s.reads for s in seating.seats):
        out.append(f"observer_template={env_config.observer_template!r} does nothing with this seating: no seat "
                   "both sees the query and reads another (a private query, task "
                   f"{env_config.task!r}, or knowledge_transfer=False); those seats' prompts are the task's "
                   "response_only_template / blank_template / pioneer_template")
    if not model_config.use_lora:
        moot = _changed(model_config, "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
        if moot:
            out.append(f"{', '.join(moot)} do(es) nothing without use_lora=True")
    if model_config.disable_dropout:
        moot = _changed(model_config, "lora_dropout", "value_head_dropout")
        if moot:
            out.append(f"{', '.join(moot)} do(es) nothing with disable_dropout=True (every dropout is off, so the "
                       "rollout's scores and the update's forward are one function); pass --disable_dropout false "
                       "to train with dropout")
    # what the learner declares it ignores (`LearnerSpec`): PPOConfig fields, another learner's options class,
    # the value head, and the KL estimator when it penalises another one
    spec = learner_spec(config.learner)
    options = spec.options_from(configs)
    reads = lambda name: name not in spec.ignores  # noqa: E731 - a PPOConfig field the learner reads
    ignored = _changed(ppo_config, *spec.ignores)
    if spec.config_class is not type(configs.grpo):
        ignored += _changed(configs.grpo, *(f.name for f in dataclasses.fields(configs.grpo)))
    if not spec.value_head and not model_config.disable_dropout:
        ignored += _changed(model_config, "value_head_dropout")
    kl_kind = spec.kl_estimator(ppo_config, options)
    if kl_kind != ppo_config.kl_penalty:
        ignored += _changed(ppo_config, "kl_penalty")
    if ignored:
        out.append(f"{', '.join(ignored)} do(es) nothing with learner={config.learner!r} (its LearnerSpec declares "
                   f"them unread; its KL estimator is {kl_kind}; `cory train --help` groups the options by the "
                   "learners that read them)")
    if reads("target_kl") and not ppo_config.early_stopping and _changed(ppo_config, "target_kl"):
        out.append(f"target_kl={ppo_config.target_kl} does nothing without early_stopping=True")
    if reads("use_score_norm") and ppo_config.use_score_norm and not ppo_config.use_score_scaling:
        out.append("use_score_norm=True does nothing without use_score_scaling=True (as in TRL)")
    if ppo_config.adap_kl_ctrl and ppo_config.init_kl_coef == 0:
        out.append("adap_kl_ctrl=True with init_kl_coef=0: the adaptive controller scales β multiplicatively, so it "
                   "stays 0 (target and horizon do nothing); set init_kl_coef > 0 or adap_kl_ctrl=False")
    elif not ppo_config.adap_kl_ctrl and _changed(ppo_config, "target", "horizon"):
        out.append(f"{', '.join(_changed(ppo_config, 'target', 'horizon'))} do(es) nothing with "
                   "adap_kl_ctrl=False (β stays init_kl_coef)")
    if env_config.task != "imdb":
        moot = _changed(env_config, *IMDB_ONLY) + (
            _changed(env_config, "heldout_fraction") if env_config.task not in HELDOUT_TASKS else [])
        if moot:
            out.append(f"{', '.join(moot)} do(es) nothing with task={env_config.task!r} (IMDB options; heldout_fraction: IMDB, tiny_vocab and relay)")
    if config.eval_every and not config.eval_episodes:
        out.append(f"eval_every={config.eval_every} does nothing with eval_episodes=0: set eval_episodes (the "
                   "held-out queries of each evaluation), e.g. 128")
    if config.checkpoint_every >= n:
        out.append(f"checkpoint_every={config.checkpoint_every} >= num_iterations={n}: only the final checkpoint is "
                   "written")
    return out
