"""The run's own config sections: `ModelConfig` (the policy model: name, dtype, LoRA, value heads, activation
checkpointing, a model per slot) and `CORYConfig` (the learner, iterations, seeds, role exchange and matchmaking,
logging, evaluation, checkpoints), each with the rules that say when one of its fields does nothing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from cory_env.checks import check_field, check_finite_fields
from cory_env.config import ONE_SEAT
from cory_env.overrides import override_types, parse_overrides
from trainers.matchmaking import SCHEMES, canonical_options, scheme_options

__all__ = ["DROPOUT_OFF", "DTYPES", "MODEL_SLOT_TYPES", "SHARDINGS", "CORYConfig", "ModelConfig", "exchange_reason",
           "exchanges_happen", "period_unread"]


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
    #: When a field does nothing, declared beside it (read by `trainers.config.unread`): field -> rule
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
        from agents.precision import PRECISIONS  # here: torch stays out of `cory train --help`
        check_field(self.precision in PRECISIONS, "precision", self.precision, f"use one of {PRECISIONS}")
        check_field(self.lora_r >= 1, "lora_r", self.lora_r, "use a rank >= 1")
        check_field(self.lora_alpha > 0, "lora_alpha", self.lora_alpha,
               "use a value > 0: LoRA scales the adapters' output by lora_alpha / lora_r, so 0 leaves the policy "
               "equal to the base model whatever the adapters learn (paper setting: 2 * lora_r)")
        check_field(0.0 <= self.lora_dropout < 1.0, "lora_dropout", self.lora_dropout, "use a value in [0, 1)")
        check_field(0.0 <= self.value_head_dropout < 1.0, "value_head_dropout", self.value_head_dropout, "use a value in [0, 1)")
        check_field(all(m.strip() for m in self.lora_target_modules.split(",")), "lora_target_modules",
                    self.lora_target_modules, "give comma-separated module names without an empty one, e.g. "
                    "q_proj,v_proj (an empty item would be dropped)")

    @property
    def lora_modules(self) -> list[str]:
        """`lora_target_modules` as a list of module names."""
        return [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]

    #: The fields a model's layout depends on (`layout`): slots of one base model that agree on them are built
    #: together (`trainers.loop.cast.build_cast`: one shared LoRA base, or one set of full copies).
    LAYOUT_FIELDS = ("use_lora", "precision", "disable_dropout", "gradient_checkpointing", "value_head_dropout")

    @property
    def layout(self) -> tuple:
        """The values of `LAYOUT_FIELDS`, in that order."""
        return tuple(getattr(self, name) for name in self.LAYOUT_FIELDS)


#: What `ModelConfig.models` may set per model slot -> its type: every model option but `models` itself.
MODEL_SLOT_TYPES = override_types(ModelConfig, [f.name for f in dataclasses.fields(ModelConfig) if f.name != "models"])


@dataclass
class CORYConfig:
    """The run: learner, iterations, seeds, role exchange, logging and checkpoints (the model is `ModelConfig`,
    sampling `agents.SamplingConfig`, the seat line-up `EnvConfig.seating`)."""

    _argument_group_name = "run options (CORYConfig)"  # `cory train --help` group (transformers.HfArgumentParser)
    #: When a field does nothing: as `ModelConfig._unread_when`.
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
        # the scheme's options as a run records them: every option of its scheme, defaults included, as a mapping, so
        # every spelling of one setting (reordered, the default written out, KEY=VALUE or a mapping) is one run
        self.matchmaking_options = canonical_options(scheme_options(SCHEMES.get(self.matchmaking),
                                                                    self.matchmaking_options, name=self.matchmaking))
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
