"""The learner protocols' registry: `LearnerSpec` (what the trainer knows of a learner before any model exists), the
`Learner` protocol of a per-seat learner, and `LEARNERS`, the registry behind ``--learner`` (`CORYConfig.learner`).

Two kinds plug in (guide and worked examples: docs/extending.md):

* a **per-seat learner** (`Learner`) owns one model's optimisation: built once per model from its agent, the shared
  reference model and its config, it receives its seat's finished `Rollout` each iteration. The trainer runs
  the per-seat learners of a run as one `trainers.learning.joint.IndependentLearners` (independent learning, IPPO).
* a **joint learner** (`trainers.learning.joint.JointLearner`) is a MARL algorithm: built once from every model,
  it receives the whole iteration (`JointBatch`: every seat's rollout, which model sits where) and updates the
  models it owns.

Each learner module declares its `LearnerSpec` as ``SPEC`` next to its class (`trainers.learning.ppo.SPEC`, ...;
a plug-in the same way; a config class per learner, TRL's one-``*Config``-per-trainer layout). The registry names
the built-in specs by ``module:SPEC`` and imports one when a run names it. `trainers.loop.plan.plan_run` checks the
spec against the run once (`LearnerSpec.check_run`); `LearnerSpec.build` then builds without checking again. Agents
act, learners learn (Tianshou's Policy/Algorithm split): a learner never samples, it re-scores the rollout with
`agent.evaluate` (and the reference model) and updates the agent's trainable parameters in place.

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
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import torch

from cory_env.registry import PluginContractError, Registry
from trainers.learning.configs import UpdateConfig
from trainers.learning.experience import Rollout
from trainers.learning.joint import IndependentLearners, JointLearner

__all__ = ["LEARNERS", "Learner", "LearnerSpec", "accepts_dist", "learner_spec", "make_joint_learner",
           "make_learner", "register_learner"]


@runtime_checkable
class Learner(Protocol):
    """What the CORY trainer and `RoleExchange` need from a learner.

    * `step(rollout, generator=...)`: one update on this seat's `Rollout`; returns flat float stats. Keys the trainer
      reads: `task_reward` and `kl` (sequence KL to the reference, nats, the estimator the learner penalises).
    * `kl_coef`: β, the KL coefficient the next `step` penalises with (0 without a KL term), read before each step
      for the logged combined reward r − β·KL and the evaluations' η.
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
        factory: per-seat: ``factory(agent, ref_model, args[, dist=]) -> Learner``, called once per model (the
            learner class itself, e.g. `trainers.learning.ppo.PPOLearner`); joint (`joint`): ``factory(agents,
            ref_model, args[, dist=]) -> JointLearner`` with ``agents`` = model name -> agent, called once per run.
            ``args`` is the run's instance of `config_class`; ``dist`` the data-parallel group, passed only to a
            factory that takes it (`accepts_dist`).
        config_class: the learner's config, a subclass of `UpdateConfig` (the update every learner shares) with the
            learner's own options (`PPOConfig`, `GRPOConfig`, a plug-in's); None (the default) is `UpdateConfig`
            itself, for a learner without options of its own: its fields are the ``cory train`` flags the learner reads and
            `trainers.config.RunConfigs.update` holds the run's instance.
        joint: the factory builds a `trainers.learning.joint.JointLearner` (sees every seat) instead of one
            per-seat `Learner` per model.
        value_head: the learner trains the agents' value heads (else ``value_head_dropout`` does nothing).
        samples_per_query: ``args -> k``, responses per query the rollout must hold in consecutive rows (GRPO's
            group); None = 1.
        kl_kind: ``args -> estimator``, the `ppo_math.kl_penalty` kind it penalises and logs as ``kl``; None =
            ``args.kl_penalty``.
        check: ``args -> None``, raising `ValueError` for settings it cannot run.
        needs_partner: refuses a run with a single seat (a centralized critic needs other seats to centralise).
        joint_reward: trains every seat on one joint reward, the sum of the seats' task rewards (MAGRPO), not on
            each seat's reward R = M · r: a seating whose reward matrix M is not all ones (a partner coefficient
            other than 1, a competitive or independent seating) is refused, since its seats are paid otherwise.
        supports_sharding: keeps its optimizer as ``learner.optimizer`` on each per-model learner, which
            checkpoints gather whole and re-shard on load (``--sharding fsdp``).
        summary: one line for tables and ``--help``.

    Raises:
        TypeError: a `config_class` that is not a dataclass subclassing `UpdateConfig`.
    """

    factory: Callable[..., Any]
    config_class: type | None = None
    joint: bool = False
    value_head: bool = True
    samples_per_query: Callable[[Any], int] | None = None
    kl_kind: Callable[[Any], str] | None = None
    check: Callable[[Any], None] | None = None
    needs_partner: bool = False
    joint_reward: bool = False
    supports_sharding: bool = False
    summary: str = ""

    def __post_init__(self) -> None:
        if self.config_class is None:  # a learner without options of its own reads the shared update
            object.__setattr__(self, "config_class", UpdateConfig)
        cls = self.config_class
        if not (isinstance(cls, type) and issubclass(cls, UpdateConfig) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"LearnerSpec.config_class must be a dataclass subclassing "
                            f"trainers.learning.configs.UpdateConfig (the update every learner shares, plus the "
                            f"learner's own fields), got {cls!r}; write `@dataclass class MyConfig(UpdateConfig): "
                            "...` (docs/extending.md)")

    def group_size(self, args: UpdateConfig) -> int:
        """Responses per query this learner needs (`samples_per_query`; 1 without)."""
        return 1 if self.samples_per_query is None else int(self.samples_per_query(args))

    def kl_estimator(self, args: UpdateConfig) -> str:
        """The per-token KL estimator it penalises and logs as ``kl`` (`kl_kind`; else ``args.kl_penalty``)."""
        return args.kl_penalty if self.kl_kind is None else self.kl_kind(args)

    def args(self, args: UpdateConfig | None = None) -> UpdateConfig:
        """`args` checked against `config_class` (None: its defaults).

        Raises:
            TypeError: a config that is no `config_class` (a subclass of it holds every field the learner reads).
        """
        if args is None:
            return self.config_class()
        if not isinstance(args, self.config_class):
            raise TypeError(f"the learner reads a {self.config_class.__name__}, got a {type(args).__name__}; build "
                            f"its config as {self.config_class.__name__}(...)")
        return args

    def check_run(self, args: UpdateConfig, *, name: str, seats: int = 2, num_processes: int = 1,
                  sharded: bool = False, reward_matrix=None) -> None:
        """Check, before any model is built, that this learner fits the run.

        Args:
            args: the run's `config_class` instance; name: the learner's name, for messages.
            seats: how many seats the run has (1 for the single-agent seating ``ppo``, 2 for CORY).
            num_processes: the run's data-parallel processes: with more than one, the factory must take ``dist``.
            sharded: the run is FSDP2-sharded (``--sharding fsdp``): the learner must declare `supports_sharding`.
            reward_matrix: the seating's M (`cory_env.seating.Seating.reward_matrix`), for a `joint_reward` learner.

        Raises:
            ValueError: settings the learner refuses (its `check`); a multi-process run with a factory without
                ``dist``; a learner that `needs_partner` on a single seat; a sharded run with a learner that does
                not declare sharding support; a `joint_reward` learner on a seating that pays seats otherwise.
        """
        if num_processes > 1 and not accepts_dist(self.factory):
            raise ValueError(
                f"learner {name!r} cannot train data-parallel: its factory takes no `dist` argument, so it would not "
                f"average gradients across the {num_processes} processes. Add a `dist=None` keyword and call "
                "dist.sync_gradients(params) before each optimiser step (docs/extending.md), or run one process")
        if sharded and not self.supports_sharding:
            raise ValueError(
                f"learner {name!r} does not declare FSDP2 support (register it with `supports_sharding=True`): its "
                "optimizer state would hold shards that a checkpoint cannot restore. Build it on "
                "trainers.learning.update.PolicyLearner (its `optimizer` attribute is re-sharded on load) and set "
                "supports_sharding, or train with --sharding none")
        if self.needs_partner and seats < 2:
            raise ValueError(f"learner {name!r} needs at least two seats (its critic is centralised over the seats' "
                             "joint transcript), but this run has one (--seating ppo or chain:1); use --seating cory "
                             "(or chain:N, N >= 2), or --learner ppo for the single-agent baseline")
        if self.joint_reward and reward_matrix is not None and any(m != 1 for row in reward_matrix for m in row):
            raise ValueError(f"learner {name!r} trains every seat on one joint reward (the sum of the seats' task "
                             f"rewards), but this seating pays seat i R_i = sum_j M_ij r_j with M = "
                             f"{[list(row) for row in reward_matrix]} (--partner_reward_coef other than 1): the run "
                             "would log one reward and train on another. Use --partner_reward_coef 1, or --learner "
                             "grpo (each seat's group advantage of its own reward)")
        if self.check is not None:
            self.check(args)

    def build(self, agents: dict[str, Any], ref_model, args: UpdateConfig, *, dist=None) -> JointLearner:
        """The run's MARL algorithm over `agents` (model name -> agent): the joint learner, or the per-seat learner
        built once per model and run as `IndependentLearners`; ``dist`` passed to a factory that takes it.

        `ref_model` is the shared frozen reference, or model name -> each model's own (a model per slot of
        different bases, docs/seats.md): a per-seat factory then gets its model's, a joint factory the mapping
        (`reference_of` picks a model's).

        Raises:
            PluginContractError: the factory's result lacks the `Learner` / `JointLearner` methods, or a joint
                learner owns no learner for some model it was built for.
        """
        kwargs = {"dist": dist} if dist is not None and accepts_dist(self.factory) else {}
        if not self.joint:
            learners = {}
            for model, agent in agents.items():  # a loop, not a comprehension: one frame from here to the class
                learners[model] = _contract(self.factory(agent, reference_of(ref_model, model), args, **kwargs),
                                            Learner)
            return IndependentLearners(learners)
        joint = _contract(self.factory(agents, ref_model, args, **kwargs), JointLearner)
        missing = sorted(set(agents) - set(joint.learners))
        if missing:
            raise PluginContractError(f"joint learner {self.factory!r} owns no learner for model(s) {missing}: "
                                      "`learners` must map every model it was built for to its per-model learner "
                                      "(state, checkpoints, role exchange)")
        return joint


def _contract(result: Any, protocol: type) -> Any:
    if not isinstance(result, protocol):
        methods = [m for m in dir(protocol) if not m.startswith("_")]
        missing = [m for m in methods if not hasattr(result, m)]
        raise PluginContractError(f"a learner factory returned {type(result).__name__}, which lacks {missing} of the "
                                  f"{protocol.__name__} protocol (docs/extending.md)")
    return result


#: Registered learners (``--learner``): the built-in ones below (each its module's ``SPEC``, imported when named),
#: plug-ins by `register_learner`, by ``module:attr`` of a `LearnerSpec`, or by an entry point of the group
#: ``cory.learners`` (`cory_env.registry.Registry`).
LEARNERS: Registry[LearnerSpec] = Registry("learner", LearnerSpec, "cory.learners", option="--learner")
for _name in ("ppo", "grpo", "mappo", "magrpo"):
    LEARNERS.register(_name, f"trainers.learning.{_name}:SPEC")


def register_learner(name: str, factory: Callable[..., Any] | LearnerSpec, *, overwrite: bool = False,
                     **spec: Any) -> None:
    """Make a learner available as `--learner name` in this process (an installed package uses the entry-point group
    ``cory.learners`` instead, which every process, launched workers included, finds by itself).

    Args:
        name: registry key (e.g. "reinforce").
        factory: a per-seat factory ``(agent, ref_model, args) -> Learner`` (called once per model with the
            shared reference model and the run's `config_class` instance), or a whole `LearnerSpec`.
        overwrite: replace an existing entry of the same name.
        **spec: `LearnerSpec` fields for a plain factory (``joint=True``, ``config_class=``,
            ``samples_per_query=``, ``kl_kind=``, ``check=``, ``needs_partner=``, ``supports_sharding=``, ...).

    Raises:
        TypeError: if `factory` is not callable, or `spec` names no `LearnerSpec` field.
        ValueError: if `name` is empty, or, without `overwrite`, already registered or claimed by an installed
            package's entry point (naming both).
    """
    if isinstance(factory, LearnerSpec):
        entry = dataclasses.replace(factory, **spec)
    elif not callable(factory):
        raise TypeError(f"learner factory for {name!r} must be callable (agent, ref_model, args) -> Learner, "
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


def accepts_dist(factory: Callable[..., Any]) -> bool:
    """True if `factory` takes a ``dist`` keyword (or ``**kwargs``): it can train data-parallel."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return "dist" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def reference_of(ref_model, name: str):
    """Model `name`'s frozen reference: `ref_model` itself when it is one shared `agents.ReferenceModel`, else
    ``ref_model[name]`` (a mapping model name -> reference: models of different bases, docs/seats.md).

    Raises:
        KeyError: a mapping without `name` (the models it has named).
    """
    if isinstance(ref_model, Mapping):
        if name not in ref_model:
            raise KeyError(f"no reference model for {name!r}; the mapping has {sorted(ref_model)}")
        return ref_model[name]
    return ref_model


def make_joint_learner(name: str, agents: dict[str, Any], ref_model, args: UpdateConfig | None = None, *,
                       dist=None, sharded: bool = False) -> JointLearner:
    """Python API: the learner registered as `name` over `agents` (model name -> agent), checked
    (`LearnerSpec.check_run` with one seat per model) and built; `args` None = its config class's defaults.

    Raises:
        ValueError / TypeError / PluginContractError: an unknown name, a config of another class, what
            `check_run` refuses, a factory result that breaks the protocol.
    """
    spec = learner_spec(name)
    args = spec.args(args)
    world = dist.world_size if dist is not None and dist.enabled else 1
    spec.check_run(args, name=name, seats=len(agents), num_processes=world, sharded=sharded)
    return spec.build(agents, ref_model, args, dist=dist)


def make_learner(name: str, agent, ref_model, args: UpdateConfig | None = None, *, dist=None) -> Learner:
    """Python API: one model's per-seat learner registered as `name` (`make_joint_learner` over that model alone;
    a joint learner, which needs every model, is refused).

    Raises:
        ValueError: a joint learner (build it with `make_joint_learner`); what `make_joint_learner` raises.
    """
    if learner_spec(name).joint:
        raise ValueError(f"learner {name!r} is a joint learner (it updates every model from all seats together); "
                         "build it with make_joint_learner(name, agents, ref_model, args)")
    return make_joint_learner(name, {"model": agent}, ref_model, args, dist=dist).learners["model"]
