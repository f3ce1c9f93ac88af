"""The learner protocols and the registry of learners by name (`CORYConfig.learner`, ``--learner``).

Two kinds plug in (guide and worked examples: docs/extending.md):

* a **per-seat learner** (`Learner`) owns one model's optimisation: built once per model from its agent, the shared
  reference model and the `PPOConfig`, it receives its seat's finished `Rollout` each iteration. The trainer runs
  the per-seat learners of a run as one `trainers.learning.joint.IndependentLearners` (independent learning, IPPO).
* a **joint learner** (`trainers.learning.joint.JointLearner`) is a MARL algorithm: built once from every model,
  it receives the whole iteration (`JointBatch`: every seat's rollout, which model sits where) and updates the
  models it owns.

Each entry of `LEARNERS` is a `LearnerSpec`: the factory and what the trainer must know before building it (its
config class, the responses per query it wants, the KL estimator it logs, the `PPOConfig` fields it ignores, whether
it needs several seats or supports FSDP2). Agents act, learners learn (Tianshou's Policy/Algorithm split): sampling
is `agents.LLMAgent.act_batch`'s job (called by the rollout loop); a learner never samples, it re-scores the
rollout with `agent.evaluate` (and the reference model) and updates the agent's trainable parameters in place.

The registered learners (`LEARNERS`; the docs site renders this table, docs/extending.md links to it):

| `--learner` | kind | class | what it sees | critic | advantage of seat k | source |
|---|---|---|---|---|---|---|
| ``ppo`` | per seat | `trainers.learning.ppo.PPOLearner` | seat k's rollout | seat k's model's value head on seat k's prompt | GAE of −β·KL_t + score on the last token | TRL 0.11.4 `PPOTrainer.step` |
| ``grpo`` | per seat | `trainers.learning.grpo.GRPOLearner` | seat k's rollout | none | seat k's score, normalised within its group of k samples | DeepSeekMath §4.1 |
| ``mappo`` | joint | `trainers.learning.mappo.MAPPO` | every seat's rollout | seat k's model's value head on the **joint transcript**: the first seat's prompt + the responses of seats < k + its own | GAE (as ``ppo``) with the centralized values | Yu et al. 2022 (MAPPO) |
| ``magrpo`` | joint | `trainers.learning.magrpo.MAGRPO` | every seat's rollout | none | the **joint reward** Σ_seats r(q, a_seat) normalised within the group of joint samples, the same for every seat | arXiv:2508.04652 Alg. 1, eq. 1 |
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from cory_env.episode import check_groups
from cory_env.registry import PluginContractError, Registry
from trainers.learning.configs import GRPOConfig, PPOConfig
from trainers.learning.experience import Rollout
from trainers.learning.joint import IndependentLearners, JointLearner


@runtime_checkable
class Learner(Protocol):
    """What the CORY trainer and `RoleExchange` need from a learner.

    * `step(rollout, generator=...)`: one update on this seat's `Rollout`; returns flat float stats. Keys the trainer
      reads: `task_reward` and `kl` (sequence KL to the reference, nats, the estimator the learner penalises).
    * `kl_coef`: β, the KL coefficient the next `step` penalises with (the KL controller's value; 0 for a learner
      without a KL term). The trainer reads it before each step for the logged combined reward r − β·KL and for
      the evaluations' η.
    * `reset_state()`: fresh optimizer / controller state (role exchange with `reset_on_exchange`).
    * `state_dict()` / `load_state_dict(state)`: everything but the weights, for checkpoints; `state["optimizer"]`
      must be a `torch.optim` state dict (saved with torch.save, loaded with weights_only=True), the rest JSON-able.
    """

    def step(self, rollout: Rollout, *, generator: torch.Generator | None = None) -> dict[str, float]: ...

    @property
    def kl_coef(self) -> float: ...

    def reset_state(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class LearnerSpec:
    """What the trainer knows of a registered learner before any model is built (`register_learner`).

    Attributes:
        factory: per-seat: ``factory(agent, ref_model, config[, options=][, dist=]) -> Learner``, called once per
            model; joint (`joint`): ``factory(agents, ref_model, config[, options=][, dist=]) -> JointLearner``
            with ``agents`` = model name -> agent, called once per run. ``config`` is the `PPOConfig`; ``options``
            the run's instance of `config_class`, passed only when the learner has an options class of its own
            (`options_class`: `config_class` neither None nor `PPOConfig`).
        joint: the factory builds a `trainers.learning.joint.JointLearner` (sees every seat) instead of one
            per-seat `Learner` per model.
        config_class: the dataclass of the learner's own options (`GRPOConfig` for grpo and magrpo, a plug-in's
            own class): its fields become ``cory train`` flags and `RunConfigs.learner_options` holds the run's
            instance. None or `PPOConfig` (ppo, mappo): no options of its own (the factory gets no ``options=``,
            `RunConfigs.learner_options` is None), only `PPOConfig`'s update, which every factory gets as ``config``.
        ignores: `PPOConfig` fields the learner never reads (`cory train` warns when one is set:
            `trainers.unread_options`).
        value_head: the learner trains the agents' value heads (else ``value_head_dropout`` does nothing).
        samples_per_query: ``options -> k``, responses per query the rollout must hold in consecutive rows
            (GRPO's group); None = 1.
        kl_kind: ``(config, options) -> estimator``, the `ppo_math.kl_penalty` kind it penalises and logs as
            ``kl``; None = ``config.kl_penalty``.
        check: ``(config, options) -> None``, raising `ValueError` for settings it cannot run.
        needs_partner: refuses a run with a single seat (a centralized critic needs other seats to centralise).
        joint_reward: trains every seat on one joint reward, the sum of the seats' task rewards (MAGRPO), not on
            each seat's reward R = M · r: a seating whose reward matrix M is not all ones (a partner coefficient
            other than 1, a competitive or independent seating) is refused, since its seats are paid otherwise.
        supports_sharding: keeps its optimizer as ``learner.optimizer`` on each per-model learner, which
            checkpoints gather whole and re-shard on load (``--sharding fsdp``).
        summary: one line for tables and ``--help``.
    """

    factory: Callable[..., Any]
    joint: bool = False
    config_class: type | None = None
    ignores: tuple[str, ...] = ()
    value_head: bool = True
    samples_per_query: Callable[[Any], int] | None = None
    kl_kind: Callable[[Any, Any], str] | None = None
    check: Callable[[Any, Any], None] | None = None
    needs_partner: bool = False
    joint_reward: bool = False
    supports_sharding: bool = False
    summary: str = ""

    def group_size(self, options: Any) -> int:
        """Responses per query this learner needs (`samples_per_query`; 1 without)."""
        return 1 if self.samples_per_query is None else int(self.samples_per_query(options))

    def kl_estimator(self, config: PPOConfig, options: Any) -> str:
        """The per-token KL estimator it penalises and logs as ``kl`` (`kl_kind`; else ``config.kl_penalty``)."""
        return config.kl_penalty if self.kl_kind is None else self.kl_kind(config, options)

    @property
    def options_class(self) -> type | None:
        """The learner's own options class (`config_class` unless it is `PPOConfig`, which every factory gets as
        ``config``), or None."""
        return None if self.config_class is None or self.config_class is PPOConfig else self.config_class

    def options(self, options: Any = None) -> Any:
        """`options` checked against `options_class` (None: its defaults; None for a learner without one).

        Raises:
            TypeError: options of another class.
        """
        cls = self.options_class
        if cls is None:
            return None
        if options is None:
            return cls()
        if not isinstance(options, cls):
            raise TypeError(f"the learner's options must be a {cls.__name__}, got {type(options).__name__}")
        return options

    def _kwargs(self, options: Any, dist) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.options_class is not None:
            kwargs["options"] = options
        if dist is not None and accepts_dist(self.factory):
            kwargs["dist"] = dist
        return kwargs


def _grpo_group(options: GRPOConfig) -> int:
    return options.group_size


def _grpo_kl(config: PPOConfig, options: GRPOConfig) -> str:
    from trainers.learning.grpo import penalised_kl_kind

    return penalised_kl_kind(config, options)


def _grpo_check(config: PPOConfig, options: GRPOConfig) -> None:
    from trainers.learning.grpo import GRPOLearner

    GRPOLearner.check_options(config, options)


def _ppo(agent, ref_model, config, dist=None):
    from trainers.learning.ppo import PPOLearner

    return PPOLearner(agent, ref_model, config, dist=dist)


def _grpo(agent, ref_model, config, options=None, dist=None):
    from trainers.learning.grpo import GRPOLearner

    return GRPOLearner(agent, ref_model, config, options, dist=dist)


def _mappo(agents, ref_model, config, dist=None):
    from trainers.learning.mappo import MAPPO

    return MAPPO(agents, ref_model, config, dist=dist)


def _magrpo(agents, ref_model, config, options=None, dist=None):
    from trainers.learning.magrpo import MAGRPO

    return MAGRPO(agents, ref_model, config, options, dist=dist)


#: `PPOConfig` fields only PPO's value head, GAE, score scaling, early stopping and ratio guard read.
PPO_ONLY = ("gamma", "lam", "vf_coef", "cliprange_value", "whiten_rewards", "use_score_scaling", "use_score_norm",
            "score_clip", "early_stopping", "target_kl", "ratio_threshold")

_GROUP = dict(config_class=GRPOConfig, ignores=PPO_ONLY, value_head=False, samples_per_query=_grpo_group,
              kl_kind=_grpo_kl, check=_grpo_check, supports_sharding=True)

#: Registered learners (``--learner``): the built-in ones below, plug-ins by `register_learner`, by ``module:attr`` of a
#: `LearnerSpec`, or by an entry point of the group ``cory.learners`` (`cory_env.registry.Registry`).
LEARNERS: Registry[LearnerSpec] = Registry("learner", LearnerSpec, "cory.learners", option="--learner")
LEARNERS.register("ppo", LearnerSpec(_ppo, config_class=PPOConfig, supports_sharding=True,
                                     summary="per seat: TRL 0.11 PPO with a value head (the paper's learner; IPPO "
                                             "under CORY)"), origin="trainers.learning.ppo:PPOLearner")
LEARNERS.register("grpo", LearnerSpec(_grpo, summary="per seat: critic-free GRPO, group-relative advantages "
                                      "(DeepSeekMath)", **_GROUP), origin="trainers.learning.grpo:GRPOLearner")
LEARNERS.register("mappo", LearnerSpec(_mappo, joint=True, config_class=PPOConfig, needs_partner=True,
                                       supports_sharding=True, summary="joint: PPO with a centralized critic on the "
                                       "joint transcript (MAPPO)"), origin="trainers.learning.mappo:MAPPO")
LEARNERS.register("magrpo", LearnerSpec(_magrpo, joint=True, joint_reward=True, summary="joint: one group-relative advantage of the "
                                        "joint reward shared by every seat (MAGRPO)", **_GROUP),
                  origin="trainers.learning.magrpo:MAGRPO")


def register_learner(name: str, factory: Callable[..., Any] | LearnerSpec, *, overwrite: bool = False,
                     **spec: Any) -> None:
    """Make a learner available as `--learner name` in this process (an installed package uses the entry-point group
    ``cory.learners`` instead, which every process, launched workers included, finds by itself).

    Args:
        name: registry key (e.g. "reinforce").
        factory: a per-seat factory ``(agent, ref_model, config) -> Learner`` (called once per model with the
            shared reference model and the `PPOConfig`), or a whole `LearnerSpec`.
        overwrite: replace an existing entry of the same name.
        **spec: `LearnerSpec` fields for a plain factory (``joint=True``, ``config_class=``, ``ignores=``,
            ``samples_per_query=``, ``kl_kind=``, ``check=``, ``needs_partner=``, ``supports_sharding=``, ...).

    Raises:
        TypeError: if `factory` is not callable, or `spec` names no `LearnerSpec` field.
        ValueError: if `name` is empty, or, without `overwrite`, already registered or claimed by an installed
            package's entry point (naming both).
    """
    if isinstance(factory, LearnerSpec):
        entry = dataclasses.replace(factory, **spec)
    elif not callable(factory):
        raise TypeError(f"learner factory for {name!r} must be callable (agent, ref_model, config) -> Learner, "
                        f"got {type(factory).__name__}")
    else:
        fields = {f.name for f in dataclasses.fields(LearnerSpec)}
        unknown = sorted(set(spec) - fields)
        if unknown:
            raise TypeError(f"register_learner({name!r}): unknown LearnerSpec field(s) {unknown}; valid: "
                            f"{sorted(fields - {'factory'})}")
        entry = LearnerSpec(factory, **spec)
    made = entry.factory
    LEARNERS.register(name, entry, overwrite=overwrite, plugin=True,
                      origin=f"{getattr(made, '__module__', '?')}:{getattr(made, '__qualname__', '?')}")


def learner_spec(name: str) -> LearnerSpec:
    """The `LearnerSpec` of `name` (a registered name, ``module:attr`` or an entry point).

    Raises:
        ValueError: unknown (lists the known ones), not importable, or not a `LearnerSpec`
            (`cory_env.registry.Registry.get`).
    """
    return LEARNERS.get(name)


def accepts_dist(factory: Callable[..., Learner]) -> bool:
    """True if `factory` takes a ``dist`` keyword (or ``**kwargs``): it can train data-parallel."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return "dist" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def check_learner(name: str, config, options: Any = None, *, sharded: bool = False, seats: int = 2,
                  num_processes: int = 1, reward_matrix=None) -> None:
    """Check, before any model is built, that `name` is registered and fits the run.

    Args:
        config: the run's `PPOConfig`; options: its instance of the learner's `config_class` (None: defaults).
        sharded: the run is FSDP2-sharded (``--sharding fsdp``): the learner must declare ``supports_sharding``.
        seats: how many seats the run has (1 for the single-agent baseline ``--algo ppo``, 2 for CORY).
        num_processes: the run's data-parallel processes: with more than one, the factory must take ``dist``.
        reward_matrix: the seating's M (`cory_env.seating.Seating.reward_matrix`), for a `joint_reward` learner.

    Raises:
        ValueError: an unknown name (lists the registered ones); settings the learner refuses (its `check`); a
            batch that does not split into its groups of `samples_per_query`; a learner that `needs_partner` on a
            single seat; a sharded run with a learner that does not declare sharding support.
    """
    spec = learner_spec(name)
    _check_dist(name, spec, num_processes)
    if sharded and not spec.supports_sharding:
        raise ValueError(
            f"learner {name!r} does not declare FSDP2 support (register it with `supports_sharding=True`): its "
            "optimizer state would hold shards that a checkpoint cannot restore. Build it on "
            "trainers.learning.update.PolicyLearner (its `optimizer` attribute is re-sharded on load) and set "
            "supports_sharding, or train with --sharding none"
        )
    if spec.needs_partner and seats < 2:
        raise ValueError(f"learner {name!r} needs at least two seats (its critic is centralised over the seats' "
                         "joint transcript), but this run has one (--seating ppo or chain:1); use --seating cory "
                         "(or chain:N, N >= 2), or --learner ppo for the single-agent baseline")
    if spec.joint_reward and reward_matrix is not None and any(m != 1 for row in reward_matrix for m in row):
        raise ValueError(f"learner {name!r} trains every seat on one joint reward (the sum of the seats' task "
                         f"rewards), but this seating pays seat i R_i = sum_j M_ij r_j with M = "
                         f"{[list(row) for row in reward_matrix]} (--partner_reward_coef other than 1): the run would "
                         "log one reward and train on another. Use --partner_reward_coef 1, or --learner grpo "
                         "(each seat's group advantage of its own reward)")
    options = spec.options(options)  # None: the learner's defaults
    if spec.check is not None:
        spec.check(config, options)
    if config is not None:
        check_groups(config.batch_size, spec.group_size(options),
                     fix=f"learner {name!r} plays each query group_size times in consecutive rows; choose "
                         "batch_size as a multiple of it")


def _checked_result(name: str, result: Any, protocol: type, methods: tuple[str, ...]) -> Any:
    if not isinstance(result, protocol):
        missing = [m for m in methods if not hasattr(result, m)]
        raise PluginContractError(f"learner factory {name!r} returned {type(result).__name__}, which lacks {missing} "
                                  f"of the {protocol.__name__} protocol (docs/extending.md)")
    return result


def _world(dist) -> int:
    return dist.world_size if dist is not None and dist.enabled else 1


def _check_dist(name: str, spec: LearnerSpec, num_processes: int) -> None:
    if num_processes > 1 and not accepts_dist(spec.factory):
        raise ValueError(
            f"learner {name!r} cannot train data-parallel: its factory takes no `dist` argument, so it would not "
            f"average gradients across the {num_processes} processes. Add a `dist=None` keyword and call "
            "dist.sync_gradients(params) before each optimiser step (docs/extending.md), or run one process"
        )


def make_learner(name: str, agent, ref_model, config, options: Any = None, *, dist=None,
                 sharded: bool = False) -> Learner:
    """Build the per-seat learner registered as `name` for one model.

    Args:
        options: the run's instance of the learner's `config_class` (e.g. `GRPOConfig`), passed as ``options=``
            to factories whose spec declares one; None = that class's defaults.
        dist: the data-parallel group (`trainers.distributed.DataParallel`), passed as ``dist=`` to factories that
            accept it; a factory without ``dist`` is called without it (one process only).
        sharded: the models are FSDP2-sharded (`CORYConfig.sharded`; see `check_learner`).

    Raises:
        ValueError: for an unknown name, a joint learner (build it with `make_joint_learner`), a multi-process run
            with a factory that takes no ``dist`` (it would not average gradients and the replicas would drift
            apart), or what `check_learner` refuses.
        TypeError: if the factory's result does not implement the `Learner` protocol.
    """
    spec = learner_spec(name)
    if spec.joint:
        raise ValueError(f"learner {name!r} is a joint learner (it updates every model from all seats together); "
                         "build it with make_joint_learner(name, agents, ref_model, config)")
    options = spec.options(options)
    check_learner(name, config, options, sharded=sharded, seats=2, num_processes=_world(dist))
    learner = spec.factory(agent, ref_model, config, **spec._kwargs(options, dist))
    return _checked_result(name, learner, Learner, ("step", "kl_coef", "reset_state", "state_dict", "load_state_dict"))


def make_joint_learner(name: str, agents: dict[str, Any], ref_model, config, options: Any = None, *, dist=None,
                       sharded: bool = False) -> JointLearner:
    """The run's MARL algorithm over `agents` (model name -> agent): the joint learner registered as `name`, or the
    per-seat learner `name` built once per model and run as `trainers.learning.joint.IndependentLearners`.

    Args:
        agents: every model of the run (``{"llm1": ..., "llm2": ...}``; one for the single-agent baseline).
        options, dist, sharded: as `make_learner`.

    Raises:
        ValueError / TypeError: as `make_learner`; also a joint factory whose result lacks `learners` for some
            model (it must own every model it is given) or the `JointLearner` methods.
    """
    spec = learner_spec(name)
    if not spec.joint:
        return IndependentLearners({model: make_learner(name, agent, ref_model, config, options, dist=dist,
                                                        sharded=sharded) for model, agent in agents.items()})
    options = spec.options(options)
    check_learner(name, config, options, sharded=sharded, seats=len(agents), num_processes=_world(dist))
    joint = _checked_result(name, spec.factory(agents, ref_model, config, **spec._kwargs(options, dist)),
                            JointLearner, ("learners", "step"))
    missing = sorted(set(agents) - set(joint.learners))
    if missing:
        raise TypeError(f"joint learner {name!r} owns no learner for model(s) {missing}: `learners` must map every "
                        "model it was built for to its per-model learner (state, checkpoints, role exchange)")
    return joint


def kl_estimator(name: str, config, options: Any = None) -> str:
    """The per-token KL estimator learner `name` penalises and logs as ``kl`` (`ppo_math.kl_penalty` kind;
    `LearnerSpec.kl_estimator`: GRPO's k3 when `kl_in_loss`, else `PPOConfig.kl_penalty`); evaluations report the
    KL with the same estimator as training."""
    spec = learner_spec(name)
    return spec.kl_estimator(config, spec.options(options))
