"""The configs of a run and the flat dict that joins them.

| dataclass | what | package |
|---|---|---|
| `cory_env.EnvConfig` | task, data, episode lengths, reward, seating, knowledge transfer | env |
| the learner's config: `PPOConfig`, `GRPOConfig`, a plug-in's | the update every learner shares (`UpdateConfig`: TRL names) and the learner's own options | `trainers.learning.configs` |
| `ModelConfig` | the policy model: name, dtype, LoRA, value head, activation checkpointing | here |
| `agents.SamplingConfig` | how the agents sample (temperature, top-k, top-p, repetition penalty) | agents |
| `CORYConfig` | the run: learner, iterations, seeds, role exchange, logging, checkpoints | here |

Each field carries its meaning, unit, range and the origin of its default in `metadata["help"]`; that help is the
only copy (the CLI reads it through `transformers.HfArgumentParser`, the docs' Options page is built from it). PPO knob
names and defaults are TRL 0.7–0.11 `PPOConfig`'s, so the paper's settings (official code: TRL 0.7.10) copy over.

Field names are unique across a run's classes, so a run's settings are also one flat ``{field: value}`` dict: the
CLI flags (``--batch_size``), presets, ``--config FILE.yaml``, a run's ``config.yaml`` and a checkpoint's
``trainer_state.json``. `RunConfigs.to_flat` / `RunConfigs.from_flat` are the one conversion between the two forms.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from agents.precision import PRECISIONS
from agents.sampling import SamplingConfig
from cory_env import EnvConfig
from cory_env.checks import check_field
from cory_env.overrides import override_types, parse_overrides
from cory_env.config import ONE_SEAT, check_finite_fields
from cory_env.rewards import REWARDS
from cory_env.tasks import TASKS, task_spec
from trainers.learning.configs import GRPOConfig, PPOConfig, UpdateConfig  # noqa: F401 (re-exported)

#: Why a dropout option does nothing with `ModelConfig.disable_dropout`.
DROPOUT_OFF = ("with disable_dropout=True (every dropout is off, so the rollout's scores and the update's forward are "
               "one function); pass --disable_dropout false to train with dropout")


def exchanges_happen(configs, seating) -> bool:
    """True when role exchange rotates the models at least once before the last iteration."""
    period, n = configs.run.role_exchange_period, configs.run.num_iterations
    return seating.num_seats > 1 and 0 < period < n


def period_unread(configs) -> str | None:
    """Why `CORYConfig.role_exchange_period` does nothing under the run's matchmaking scheme (one that reseats the
    models every iteration by its own rule: `SchemeSpec.reads_period` False), else None."""
    if configs.scheme_spec.reads_period:
        return None
    return f"matchmaking={configs.run.matchmaking!r} seats the models each iteration by its own rule, not by the period"


def exchange_reason(configs, seating) -> str | None:
    """Why `CORYConfig.role_exchange_period` does nothing with several seats (None when it does something): it is
    ``>= num_iterations``. Declared in ``_unread_always``: a default period that the run never reaches is named too."""
    period, n = configs.run.role_exchange_period, configs.run.num_iterations
    if seating.num_seats == 1 or period == 0 or exchanges_happen(configs, seating) or period_unread(configs):
        return None
    when = ("no role exchange happens" if period > n
            else "the only role exchange follows the last iteration, so no iteration runs with swapped roles")
    return (f"with num_iterations={n}: {when}; lower role_exchange_period below {n} (or 0 to disable role exchange "
            "on purpose)")


#: `ModelConfig.dtype` names (torch dtype names; `trainers.loop.build.torch_dtype`).
DTYPES = ("float32", "bfloat16", "float16")
#: `CORYConfig.sharding`: "none" = full replicas per process; "fsdp" = FSDP2 shards (trainers.loop.sharding)
SHARDINGS = ("none", "fsdp")


@dataclass
class ModelConfig:
    """The policy model the agents are built from (loading, dtype, LoRA layout, value heads); TRL's `ModelConfig`
    plays this part there."""

    _argument_group_name = "model options (ModelConfig)"  # `cory train --help` group (transformers.HfArgumentParser)
    #: When a field does nothing, declared beside it (read by `trainers.unread_options`): field -> rule
    #: ``(configs, seating) -> reason or None``; `_unread_when` rules are checked when the field differs from
    #: its default, `_unread_always` rules at any value.
    _unread_when = {
        **dict.fromkeys(("lora_r", "lora_alpha", "lora_target_modules"),
                        lambda c, seating: None if c.model.use_lora else "without use_lora=True"),
        "lora_dropout": lambda c, seating: ("without use_lora=True" if not c.model.use_lora
                                            else DROPOUT_OFF if c.model.disable_dropout else None),
        "value_head_dropout": lambda c, seating: DROPOUT_OFF if c.model.disable_dropout else None,
    }

    model: str = field(default="smollm2-135m-instruct", metadata={"help": "Policy model: hub id, local directory, .gguf file, or alias (smollm2-135m-instruct = offline default; tiny = tiny random model for tests)."})
    dtype: str = field(default="float32", metadata={"help": "Parameter dtype of the loaded model: float32 (CPU default), bfloat16 or float16 (GPU only). Value heads and LoRA adapters stay float32. For speed prefer --precision bf16-mixed, which keeps float32 weights."})
    precision: str = field(default="fp32", metadata={"help": "Compute precision of every model forward: fp32; bf16-mixed (matmuls in bfloat16 under torch.autocast, float32 master weights, Adam state, log-probabilities, KL, values and losses; agents.precision); auto (bf16-mixed where the hardware has native bf16: a bf16 GPU, a CPU with AVX512-BF16/AMX; else fp32; logged); fp16-mixed (CUDA only)."})
    use_lora: bool = field(default=False, metadata={"help": "Memory-shared LoRA: one frozen base, one adapter per model, reference = adapters off."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout, in [0, 1); only with disable_dropout=False."})
    lora_target_modules: str = field(default="q_proj,v_proj", metadata={"help": "Comma-separated module names to adapt (Llama: q_proj,v_proj; GPT-2: c_attn)."})
    value_head_dropout: float = field(default=0.1, metadata={"help": "Dropout on the hidden state before each value head (TRL summary_dropout_prob, 0.1); only with disable_dropout=False."})
    disable_dropout: bool = field(default=True, metadata={"help": "Switch off every dropout in the policies and value heads (LoRA dropout, value-head dropout, the model's own), so the rollout's scores and the update's forward are one function of the weights and the PPO ratio is exactly 1 on fresh data (TRL's disable_dropout, default True). False: the update runs with dropout while the rollout is scored without (the ratio and value clipping then see dropout noise)."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in the backward pass (transformers' activation checkpointing, every decoder layer): less memory for long observer prompts, about one extra forward of time."})
    models: Optional[list[str]] = field(default=None, metadata={"help": "A model per model slot (llm1 ... llmN, one per seat at the start; docs/seats.md): SLOT=MODEL sets a slot's model, SLOT.FIELD=VALUE any other model option of that slot (dtype, precision, use_lora, lora_r, lora_alpha, lora_dropout, lora_target_modules, value_head_dropout, disable_dropout, gradient_checkpointing), e.g. --models llm2=tiny llm2.use_lora=false; in YAML a mapping {llm2: {model: tiny}}. Slots not named take the options above. Each model keeps its own tokenizer, frozen reference (its base) and learner; slots that share a base and layout share one frozen base under LoRA. Recorded as {slot: {field: value}}."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        self.models = parse_overrides(self.models, MODEL_SLOT_TYPES, name="models", default_key="model")
        check_field(self.dtype in DTYPES, "dtype", self.dtype, f"use one of {tuple(DTYPES)}")
        check_field(self.precision in PRECISIONS, "precision", self.precision, f"use one of {PRECISIONS}")
        check_field(self.lora_r >= 1, "lora_r", self.lora_r, "use a rank >= 1")
        check_field(self.lora_alpha > 0, "lora_alpha", self.lora_alpha,
               "use a value > 0: LoRA scales the adapters' output by lora_alpha / lora_r, so 0 leaves the policy "
               "equal to the base model whatever the adapters learn (paper setting: 2 * lora_r)")
        check_field(0.0 <= self.lora_dropout < 1.0, "lora_dropout", self.lora_dropout, "use a value in [0, 1)")
        check_field(0.0 <= self.value_head_dropout < 1.0, "value_head_dropout", self.value_head_dropout, "use a value in [0, 1)")

    @property
    def lora_modules(self) -> list[str]:
        """`lora_target_modules` as a list of module names."""
        return [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]


#: What `ModelConfig.models` may set per model slot -> its type: every model option but `models` itself.
MODEL_SLOT_TYPES = override_types(ModelConfig, [f.name for f in dataclasses.fields(ModelConfig) if f.name != "models"])


@dataclass
class CORYConfig:
    """The run: learner, iterations, seeds, role exchange, logging and checkpoints (the model is `ModelConfig`,
    sampling `agents.SamplingConfig`, the seat line-up `EnvConfig.seating`)."""

    _argument_group_name = "run options (CORYConfig)"  # `cory train --help` group (transformers.HfArgumentParser)
    #: When a field does nothing, declared beside it (read by `trainers.unread_options`): field -> rule
    #: ``(configs, seating) -> reason or None``; `_unread_when` rules are checked when the field differs from
    #: its default, `_unread_always` rules at any value.
    _unread_when = {
        "role_exchange_period": lambda c, seating: ONE_SEAT if seating.num_seats == 1 else period_unread(c),
        "reset_on_exchange": lambda c, seating: (None if exchanges_happen(c, seating) or period_unread(c)
                                                 else "no role exchange happens in this run"),
        "checkpoint_every": lambda c, seating: (None if c.run.checkpoint_every < c.run.num_iterations else
                                                f"with num_iterations={c.run.num_iterations}: only the final "
                                                "checkpoint is written"),
        "eval_every": lambda c, seating: (None if c.run.eval_episodes else "with eval_episodes=0: set eval_episodes "
                                          "(the held-out queries of each evaluation), e.g. 128"),
        "eval_influence": lambda c, seating: ("with eval_episodes=0: no held-out evaluation runs"
                                              if not c.run.eval_episodes else ONE_SEAT if seating.num_seats == 1
                                              else None),
    }
    _unread_always = {
        "role_exchange_period": exchange_reason,
        "eval_influence": lambda c, seating: ("with eval_episodes=1: influence plays the earlier seats' answers to "
                                              "another held-out query; use eval_episodes >= 2"
                                              if c.run.eval_influence and c.run.eval_episodes == 1
                                              and seating.num_seats > 1 else None),
    }

    learner: str = field(default="ppo", metadata={"help": "The MARL algorithm: a registered name (ppo, the paper's IPPO under CORY; grpo; mappo; magrpo: the table in trainers.learning.registry), an importable 'module:attr' of a LearnerSpec, or the name of an installed plug-in (entry-point group cory.learners); docs/extending.md."})
    output_dir: str = field(default="runs/cory", metadata={"help": "Run directory: config.yaml, metrics.jsonl, samples.jsonl, TensorBoard events, checkpoints/."})
    num_iterations: int = field(default=10, metadata={"help": "CORY iterations (rollout + one update per seat). Paper IMDB: about 102."})
    seed: int = field(default=0, metadata={"help": "Seed for queries, sampling, mini-batch order and dropout."})
    role_exchange_period: int = field(default=5, metadata={"help": "T_REx: iterations between role exchanges (official code: swap_freq=5): the models rotate one seat forward (two seats: they swap). 0 disables (ablation w/o REx)."})
    population: int = field(default=0, metadata={"help": "Models trained together (llm1 ... llmN, N >= the seats; docs/partners.md): 0 = one per seat (CORY). With more models than seats a matchmaking scheme other than role-exchange seats them each iteration."})
    matchmaking: str = field(default="role-exchange", metadata={"help": "Which model sits in which seat each iteration (trainers.matchmaking.SCHEMES): role-exchange (CORY: as many models as seats, rotating every role_exchange_period), rotation (N >= seats, the window moves every role_exchange_period), uniform (N >= seats, a random ordered draw each iteration), snapshots (self-play against lagged frozen snapshots of the learning models, options every, keep, p_snapshot), an importable 'module:attr' of a SchemeSpec, or an installed plug-in's name (entry-point group cory.matchmaking)."})
    matchmaking_options: Optional[list[str]] = field(default=None, metadata={"help": "The scheme's own options, KEY=VALUE (uniform: stream=0; snapshots: every=10 keep=3 p_snapshot=0.5); in YAML a mapping. Recorded as the mapping of every option of the scheme, defaults included."})
    reset_on_exchange: bool = field(default=False, metadata={"help": "Replicate the official code: fresh Adam state, KL controller and score statistics at every role exchange."})
    eta: Optional[float] = field(default=None, metadata={"help": "eta in the logged combined reward = task reward - eta * KL; None = the seat's current KL coefficient."})
    checkpoint_every: int = field(default=0, metadata={"help": "Save a checkpoint every N iterations (always at the end); 0 = only at the end (and by time, checkpoint_every_minutes)."})
    checkpoint_every_minutes: float = field(default=10.0, metadata={"help": "Also save a checkpoint after the first iteration that ends this many minutes (wall time) after the last checkpoint, so a late failure loses at most that much work; 0 disables. Checkpoints never change the run's numbers."})
    keep_checkpoints: int = field(default=2, metadata={"help": "How many most recent checkpoints to keep (>= 1)."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in output_dir from its latest checkpoint."})
    overwrite: bool = field(default=False, metadata={"help": "Delete an existing run in output_dir and start afresh."})
    log_samples: int = field(default=4, metadata={"help": "Sample texts written to samples.jsonl per iteration."})
    eval_episodes: int = field(default=0, metadata={"help": "cory train: before and after training, evaluate the pioneer alone on this many held-out queries (the held-out slice when heldout_fraction > 0), print both and write eval.json; 0 = off."})
    eval_influence: bool = field(default=True, metadata={"help": "At every held-out evaluation of a run of two or more seats, also measure each later seat's influence (its task reward given the earlier seats' real answers minus given another query's answers, and minus given none) and copy rate (share of its word bigrams found in the previous seat's answer) on the same queries (trainers.evaluation.influence; docs/partners.md): logged as eval/influence/observer, eval/copy_rate/observer, ..."})
    eval_every: int = field(default=0, metadata={"help": "Also evaluate the pioneer alone on eval_episodes held-out queries after every N iterations (the same queries each time), logged as eval/reward, eval/kl, ... with that iteration's metrics; 0 = off."})
    log_every_seconds: float = field(default=30.0, metadata={"help": "Off a terminal (a log file, nohup, a batch scheduler), log a one-line progress record (iteration, elapsed, ETA, the pioneer's and the observer's rewards, KL, the collective reward) at least this often, and after the first and the last iteration; 0 = after every iteration. On a terminal the progress bar shows them instead."})
    tensorboard: bool = field(default=True, metadata={"help": "Write TensorBoard events to output_dir."})
    torch_threads: int = field(default=0, metadata={"help": "torch.set_num_threads; 0 = leave torch's default."})
    heap_reuse: bool = field(default=True, metadata={"help": "Keep freed memory in the process's heap for reuse (glibc malloc: mallopt M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB; trainers.heap), so an iteration's large tensors do not fault fresh pages in at every step (with deterministic's fill-free mode about 5 percent less CPU per iteration on the IMDB rung); every number is unchanged. Not applied off glibc or where MALLOC_* variables, GLIBC_TUNABLES or a preloaded malloc set the allocator up. The settings last for the process: False leaves the allocator as it is."})
    deterministic: bool = field(default=True, metadata={"help": "torch.use_deterministic_algorithms(True, warn_only=True) so same seed => same metrics on CPU (without torch's NaN fill of new tensors, which changes no result: trainers.loop.build.seed_everything)."})
    device: str = field(default="auto", metadata={"help": "Where the models live: auto (this process's GPU under a multi-GPU launch or when CUDA is available, else CPU), cpu, or a torch device such as cuda:0."})
    sharding: str = field(default="none", metadata={"help": "With several processes: none (every process holds full replicas of the models, gradients all-reduced) or fsdp (PyTorch FSDP2: parameters, gradients and Adam state sharded over the processes; full fine-tuning; docs/distributed.md)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        check_field(self.num_iterations >= 1, "num_iterations", self.num_iterations, "use a positive integer")
        check_field(self.seed >= 0, "seed", self.seed, "use an integer >= 0 (numpy's SeedSequence takes no negative seed)")
        check_field(self.population >= 0, "population", self.population,
                    "use 0 (one model per seat) or the number of models, at least the seats")
        check_field(isinstance(self.matchmaking, str) and bool(self.matchmaking), "matchmaking", self.matchmaking,
                    "name a scheme: role-exchange, rotation, uniform, a module:attr or a plug-in")
        check_field(self.role_exchange_period >= 0, "role_exchange_period", self.role_exchange_period, "use >= 0 (0 disables role exchange)")
        check_field(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "use >= 0 (0 = only at the end)")
        check_field(self.checkpoint_every_minutes >= 0, "checkpoint_every_minutes", self.checkpoint_every_minutes,
               "use >= 0 (0 = no time-based checkpoints)")
        check_field(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, "keep at least 1 checkpoint")
        check_field(self.eta is None or self.eta >= 0, "eta", self.eta, "use eta >= 0, or None for the KL coefficient")
        check_field(self.log_samples >= 0, "log_samples", self.log_samples, "use >= 0")
        check_field(self.eval_episodes >= 0, "eval_episodes", self.eval_episodes, "use >= 0 (0 = no evaluation)")
        check_field(self.eval_every >= 0, "eval_every", self.eval_every, "use >= 0 (0 = no periodic evaluation)")
        check_field(self.log_every_seconds >= 0, "log_every_seconds", self.log_every_seconds,
                    "use >= 0 (0 = a progress line after every iteration)")
        check_field(self.torch_threads >= 0, "torch_threads", self.torch_threads, "use >= 0 (0 = torch's default)")
        check_field(not (self.resume and self.overwrite), "resume", self.resume, "pass either --resume or --overwrite, not both")
        check_field(self.device == "auto" or self.device == "cpu" or self.device.startswith(("cuda", "mps", "xpu")),
               "device", self.device, "use auto, cpu or a torch device such as cuda:0")
        check_field(self.sharding in SHARDINGS, "sharding", self.sharding, f"use one of {SHARDINGS}")

    @property
    def sharded(self) -> bool:
        """True when the models are FSDP2-sharded over the processes (``sharding="fsdp"``)."""
        return self.sharding == "fsdp"


#: The config classes every run has whatever its learner and task, in flat-dict order; the chosen task's options class
#: (`RunConfigs.task_options`) joins them after `EnvConfig`, the chosen learner's config (`RunConfigs.update`) after it.
BASE_CLASSES = (EnvConfig, ModelConfig, SamplingConfig, CORYConfig)


#: The options of ``cory train`` that are no config field (`trainers.cli.train.build_train_parser`; argparse's
#: ``--help``): no config class may have a field (or an alias, or a ``--no_X`` switch) of these names.
CLI_OPTIONS = ("preset", "config", "num_processes", "help")


def option_names(config_cls: type) -> dict[str, str]:
    """Every option name the command line takes for `config_cls` (``--NAME``, dashes read as underscores), each with
    what it is, for messages: its fields, their aliases (``metadata["aliases"]``, e.g. ``--algo`` of
    `EnvConfig.seating`) and the ``--no_X`` switch of a field whose default is True (`transformers.HfArgumentParser`
    adds one)."""
    out = {}
    for f in dataclasses.fields(config_cls):
        out[f.name] = f"a field of {config_cls.__name__}"
        aliases = f.metadata.get("aliases", ())
        for alias in [aliases] if isinstance(aliases, str) else aliases:
            out[alias.lstrip("-").replace("-", "_")] = f"{alias} (another name of {config_cls.__name__}.{f.name})"
        if f.default is True:
            out[f"no_{f.name}"] = f"--no_{f.name} (the switch that sets {config_cls.__name__}.{f.name} to false)"
    return out


def _both(first: str, second: str) -> str:
    """Two `option_names` descriptions of one name, joined: ``a field of both PPOConfig and MyOptions``."""
    field_of = "a field of "
    if first.startswith(field_of) and second.startswith(field_of):
        return f"a field of both {first.removeprefix(field_of)} and {second.removeprefix(field_of)}"
    return f"{first} and {second}"


def check_option_names(classes) -> None:
    """Refuse two options of one name among `classes` (the config classes of one run) and ``cory train``'s own
    `CLI_OPTIONS`: a field, an alias or a ``--no_X`` switch (`option_names`), within one class too.

    Raises:
        ValueError: naming the option, both owners and the fix.
    """
    seen = {name: f"`cory train`'s own --{name}" for name in CLI_OPTIONS}
    for cls in classes:
        own = {f.name for f in dataclasses.fields(cls)}
        for name in sorted(own):  # a field named like a switch of its own class: `option_names` hides it
            if name.startswith("no_") and name.removeprefix("no_") in own:
                raise ValueError(f"option {name!r} is a field of {cls.__name__} and the --{name} switch of its "
                                 f"field {name.removeprefix('no_')!r}: every option of a run needs its own name; "
                                 "rename the plug-in's field")
        for name, what in option_names(cls).items():
            if name in seen:
                raise ValueError(f"option {name!r} is {_both(seen[name], what)}: every option of a run needs its "
                                 "own name (the command line and config.yaml are flat); rename the plug-in's field")
            seen[name] = what


def _option_class(spec_options: type | None) -> type | None:
    """A task spec's own options class, None when it has none beyond the base configs."""
    return None if spec_options is None or spec_options in BASE_CLASSES else spec_options


def own_fields(config_cls: type) -> list[dataclasses.Field]:
    """The fields `config_cls` adds to what every run reads: a learner config's beyond `UpdateConfig`'s (which every
    learner reads), a task's options class's all."""
    shared = {f.name for f in dataclasses.fields(UpdateConfig)} if issubclass(config_cls, UpdateConfig) else set()
    return [f for f in dataclasses.fields(config_cls) if f.name not in shared]


@dataclass(frozen=True)
class RunConfigs:
    """The configs of one run, as a tree: the run, the model, sampling, the env, the learner's config and the
    chosen task's own options; with the learner's and the task's specs, resolved once here.

    Attributes:
        run, env, model, sampling: `CORYConfig`, `EnvConfig`, `ModelConfig`, `SamplingConfig`.
        update: the learner's config, an instance of its `LearnerSpec.config_class` (`PPOConfig` for ppo and mappo,
            `GRPOConfig` for grpo and magrpo, a plug-in's subclass of `UpdateConfig`); None = that class's
            defaults.
        task_options: the instance of the chosen task's options class (`cory_env.tasks.TaskSpec.options`, e.g.
            `IMDBOptions` for ``imdb``); None for a task without options (or its defaults, as above).
        unread: options that were given (a YAML file, a preset, an old ``config.yaml``) but belong to another
            learner's or task's options: the run does not read them, and `unread_options` warns about those that
            differ from their default. Not part of `to_flat`.
        learner_spec, task_spec, scheme_spec: the `trainers.learning.registry.LearnerSpec` of ``run.learner``, the
            `cory_env.tasks.TaskSpec` of ``env.task`` and the `trainers.matchmaking.SchemeSpec` of
            ``run.matchmaking`` (a registered name, a ``module:attr`` or an entry point), looked up once when the
            object is built: a mistake there is a `ValueError` before any folder or model. ``run.matchmaking_options``
            becomes the scheme's options as a run records them (`trainers.matchmaking.canonical_options`: every
            option, defaults included, as a mapping; None for a scheme without options), so every spelling of one
            setting, an earlier version's included, records and resumes as one.

    Raises:
        TypeError: a section of the wrong class, or a config of another class than the spec declares.
        ValueError: an unknown learner, task or matchmaking scheme (`trainers.learning.registry.learner_spec`,
            `cory_env.tasks.task_spec`, `trainers.matchmaking.SCHEMES`), options the scheme refuses
            (`trainers.matchmaking.scheme_options`), or an options class whose field names clash with another
            config's.
    """

    run: CORYConfig = field(default_factory=CORYConfig)
    update: Any = None
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    task_options: Any = None
    unread: Mapping[str, Any] = field(default_factory=dict, compare=False)
    learner_spec: Any = field(init=False, repr=False, compare=False)
    task_spec: Any = field(init=False, repr=False, compare=False)
    scheme_spec: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from trainers.learning.registry import learner_spec
        from trainers.matchmaking import SCHEMES, canonical_options, scheme_options

        for name, cls in (("run", CORYConfig), ("env", EnvConfig), ("model", ModelConfig),
                          ("sampling", SamplingConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"RunConfigs.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        object.__setattr__(self, "learner_spec", learner_spec(self.run.learner))
        object.__setattr__(self, "task_spec", task_spec(self.env.task))
        object.__setattr__(self, "scheme_spec", SCHEMES.get(self.run.matchmaking))
        self.run.matchmaking_options = canonical_options(scheme_options(self.scheme_spec, self.run.matchmaking_options,
                                                                        name=self.run.matchmaking))
        try:
            object.__setattr__(self, "update", self.learner_spec.args(self.update))
        except TypeError as err:
            raise TypeError(f"RunConfigs.update: learner {self.run.learner!r} {err}") from None
        options_cls = self.task_options_class
        if options_cls is None:
            if self.task_options is not None:
                raise TypeError(f"RunConfigs.task_options: the chosen task reads no options of its own, got a "
                                f"{type(self.task_options).__name__}")
        elif self.task_options is None:
            object.__setattr__(self, "task_options", options_cls())
        elif not isinstance(self.task_options, options_cls):
            raise TypeError(f"RunConfigs.task_options must be a {options_cls.__name__} (what the chosen task "
                            f"declares), got {type(self.task_options).__name__}")
        check_option_names(self.classes())

    @property
    def task_options_class(self) -> type | None:
        return _option_class(self.task_spec.options)

    def classes(self) -> list[type]:
        """The config classes of this run, in `sections` order."""
        return [type(section) for section in self.sections()]

    def sections(self) -> list[Any]:
        """The config objects in flat-dict order: env, task options, the learner's config, model, sampling, run."""
        out = [self.env, self.task_options, self.update, self.model, self.sampling, self.run]
        return [section for section in out if section is not None]

    def to_flat(self) -> dict[str, Any]:
        """The flat ``{field: value}`` dict (what ``config.yaml`` and checkpoints record), in `sections` order."""
        return {name: value for section in self.sections() for name, value in dataclasses.asdict(section).items()}

    @classmethod
    def from_flat(cls, flat: dict[str, Any], *, strict: bool = False) -> RunConfigs:
        """The configs from a flat dict; missing fields take their defaults (a run recorded before a field was
        added reads as it ran). Which classes join the base ones follows from the dict's ``learner`` and ``task``
        (their specs); keys of another known learner's or task's own options go to `unread`.

        Args:
            flat: ``{field: value}``, e.g. a run's ``config.yaml``, a checkpoint's ``trainer_state["config"]``, a
                preset.
            strict: raise on keys that are no option of any known config (else they are ignored).

        Raises:
            ValueError: an unknown key with `strict` (the valid ones are listed), an unknown learner or task, or a
                value a config refuses.
        """
        from trainers.learning.registry import learner_spec

        learner = learner_spec(flat.get("learner", CORYConfig.learner))
        task = task_spec(flat.get("task", EnvConfig.task))
        classes = {"env": EnvConfig, "update": learner.config_class, "model": ModelConfig, "sampling": SamplingConfig,
                   "run": CORYConfig, "task_options": _option_class(task.options)}
        read = {f.name for c in classes.values() if c is not None for f in dataclasses.fields(c)}
        rest = set(flat) - read
        others = option_fields() if rest else {}
        unknown = sorted(rest - set(others))
        if strict and unknown:
            valid = sorted(read | set(others))
            raise ValueError(f"unknown option(s) {unknown}; valid options: {', '.join(valid)}")
        sections = {name: c(**{f.name: flat[f.name] for f in dataclasses.fields(c) if f.name in flat})
                    for name, c in classes.items() if c is not None}
        return cls(**sections, unread={k: flat[k] for k in sorted(rest) if k in others})


def plugin_origins(configs: RunConfigs) -> dict[str, str]:
    """Where the run's learner, task and reward came from (`cory_env.registry.Registry.origin`: ``module:attr``,
    or an entry point and its distribution); a reward given as a callable is recorded by `reward_name` instead."""
    from trainers.learning.registry import LEARNERS

    out = {"learner": LEARNERS.origin(configs.run.learner), "task": TASKS.origin(configs.env.task)}
    if configs.task_spec.reads and "reward" in configs.task_spec.reads and not configs.env.reward.startswith("<"):
        try:
            out["reward"] = REWARDS.origin(configs.env.reward)
        except ValueError:
            pass  # a reward the run replaced with a callable: config.yaml records its name
    return out


def all_config_classes(*, learners: Iterable[Any] = (), tasks: Iterable[Any] = ()) -> list[type]:
    """`BASE_CLASSES` and the own options class of every learner and task this process knows, each once
    (`option_fields`, the `learners` and `tasks` named included): every option a command line, a YAML file or a
    preset may hold."""
    owners = (owner for owner, _ in option_fields(learners=learners, tasks=tasks).values())
    return [*BASE_CLASSES, UpdateConfig, *dict.fromkeys(owners)]


def option_fields(*, learners: Iterable[Any] = (),
                  tasks: Iterable[Any] = ()) -> dict[str, tuple[type, tuple[str, ...]]]:
    """Every option of the own options of every learner and task this process knows (a learner's: its config's
    fields beyond `UpdateConfig`, `own_fields`): ``{field: (class, (who, ...))}`` with ``who`` like ``"learner
    grpo"``; what `RunConfigs.from_flat` and a YAML file accept but a run of another learner or task does not read.

    Known are the built-in and registered ones and those looked up so far (`cory_env.registry.Registry.known`: no
    installed plug-in is imported for this): so the names in `learners` and `tasks` (e.g. what a YAML file and the
    command line name; None and non-strings are skipped) are looked up first, and their options are known whatever
    is installed.

    Raises:
        ValueError: a name in `learners` or `tasks` that is not found (the registry's reason).
    """
    from trainers.learning.registry import LEARNERS

    out: dict[str, tuple[type, tuple[str, ...]]] = {}
    for kind, registry, attr, named in (("learner", LEARNERS, "config_class", learners),
                                        ("task", TASKS, "options", tasks)):
        for name in named:
            if isinstance(name, str):
                registry.get(name)
        for name, spec in registry.known():
            options = _option_class(getattr(spec, attr))
            for f in own_fields(options) if options is not None else ():
                owner, who = out.get(f.name, (options, ()))
                out[f.name] = (owner, (*who, f"{kind} {name}"))
    return out


def flat_field_types(configs: RunConfigs | None = None, *, learners: Iterable[Any] = (),
                     tasks: Iterable[Any] = ()) -> dict[str, Any]:
    """Every flat field name -> its type hint (e.g. ``Optional[float]``), for checking YAML files and presets: the
    base configs' and the options of every learner and task this process knows, the `learners` and `tasks` named
    included (`all_config_classes`); with `configs`, only the classes of that run.

    Raises:
        ValueError: a name in `learners` or `tasks` that is not found (`option_fields`).
    """
    if configs is not None:
        classes = [type(section) for section in configs.sections()]
    else:
        classes = all_config_classes(learners=learners, tasks=tasks)
    out = {}
    for config_cls in classes:
        hints = typing.get_type_hints(config_cls)
        for f in dataclasses.fields(config_cls):
            out[f.name] = hints[f.name]
    return out
