"""The configs of a run and the flat dict that joins them.

| dataclass | what | package |
|---|---|---|
| `cory_env.EnvConfig` | task, data, episode lengths, reward, seating, knowledge transfer | env |
| `PPOConfig` | the learners' update (TRL names), PPO's value head / GAE / score scaling | `trainers.learning.configs` |
| `GRPOConfig` | the group-relative learners' options (samples per query, normalisation, KL in the loss) | `trainers.learning.configs` |
| `ModelConfig` | the policy model: name, dtype, LoRA, value head, activation checkpointing | here |
| `agents.SamplingConfig` | how the agents sample (temperature, top-k, top-p, repetition penalty) | agents |
| `CORYConfig` | the run: learner, iterations, seeds, role exchange, logging, checkpoints | here |

Each field carries its meaning, unit, range and the origin of its default in `metadata["help"]`; that help is the
only copy (the CLI reads it through `transformers.HfArgumentParser`, the README table is built from it). PPO knob
names and defaults are TRL 0.7–0.11 `PPOConfig`'s, so the paper's settings (official code: TRL 0.7.10) copy over.

Field names are unique across the six classes, so a run's settings are also one flat ``{field: value}`` dict: the
CLI flags (``--batch_size``), presets, ``--config FILE.yaml``, a run's ``config.yaml`` and a checkpoint's
``trainer_state.json``. `RunConfigs.to_flat` / `RunConfigs.from_flat` are the one conversion between the two forms;
`migrate_flat` reads a flat config written by an earlier version (a field that moved: ``algo`` is now
`EnvConfig.seating`, whose CLI flag ``--algo`` still is).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from agents.precision import PRECISIONS
from agents.sampling import SamplingConfig
from cory_env import EnvConfig
from cory_env.config import check_finite_fields
from trainers.learning.configs import TOKEN_MEAN_OVER, GRPOConfig, PPOConfig, check_field

#: `ModelConfig.dtype` names (torch dtype names; `trainers.loop.build.torch_dtype`).
DTYPES = ("float32", "bfloat16", "float16")
#: `CORYConfig.sharding`: "none" = full replicas per process; "fsdp" = FSDP2 shards (trainers.loop.sharding)
SHARDINGS = ("none", "fsdp")


@dataclass
class ModelConfig:
    """The policy model the agents are built from (loading, dtype, LoRA layout, value heads); TRL's `ModelConfig`
    plays this part there."""

    _argument_group_name = "model options (ModelConfig)"  # `cory train --help` group (transformers.HfArgumentParser)

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

    def __post_init__(self) -> None:
        check_finite_fields(self)
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


@dataclass
class CORYConfig:
    """The run: learner, iterations, seeds, role exchange, logging and checkpoints (the model is `ModelConfig`,
    sampling `agents.SamplingConfig`, the seat line-up `EnvConfig.seating`)."""

    _argument_group_name = "run options (CORYConfig)"  # `cory train --help` group (transformers.HfArgumentParser)

    learner: str = field(default="ppo", metadata={"help": "The MARL algorithm, by registry name (trainers.learning.learners): per-seat learners ppo (PPO with a value head, TRL semantics; IPPO under CORY) or grpo (critic-free GRPO; set group_size >= 2), or joint learners that see every seat: mappo (PPO with a centralized critic on the joint transcript; needs at least two seats) or magrpo (one group-relative advantage of the joint reward shared by the seats; group_size >= 2). Other registered names work too (docs/learners.md)."})
    output_dir: str = field(default="runs/cory", metadata={"help": "Run directory: config.yaml, metrics.jsonl, samples.jsonl, TensorBoard events, checkpoints/."})
    num_iterations: int = field(default=10, metadata={"help": "CORY iterations (rollout + one update per seat). Paper IMDB: about 102."})
    seed: int = field(default=0, metadata={"help": "Seed for queries, sampling, mini-batch order and dropout."})
    role_exchange_period: int = field(default=5, metadata={"help": "T_REx: iterations between role exchanges (official code: swap_freq=5): the models rotate one seat forward (two seats: they swap). 0 disables (ablation w/o REx)."})
    reset_on_exchange: bool = field(default=False, metadata={"help": "Replicate the official code: fresh Adam state, KL controller and score statistics at every role exchange."})
    eta: Optional[float] = field(default=None, metadata={"help": "eta in the logged combined reward = task reward - eta * KL; None = the seat's current KL coefficient."})
    checkpoint_every: int = field(default=0, metadata={"help": "Save a checkpoint every N iterations (always at the end); 0 = only at the end (and by time, checkpoint_every_minutes)."})
    checkpoint_every_minutes: float = field(default=10.0, metadata={"help": "Also save a checkpoint after the first iteration that ends this many minutes (wall time) after the last checkpoint, so a late failure loses at most that much work; 0 disables. Checkpoints never change the run's numbers."})
    keep_checkpoints: int = field(default=2, metadata={"help": "How many most recent checkpoints to keep (>= 1)."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in output_dir from its latest checkpoint."})
    overwrite: bool = field(default=False, metadata={"help": "Delete an existing run in output_dir and start afresh."})
    log_samples: int = field(default=4, metadata={"help": "Sample texts written to samples.jsonl per iteration."})
    eval_episodes: int = field(default=0, metadata={"help": "cory train: before and after training, evaluate the pioneer alone on this many held-out queries (the held-out slice when heldout_fraction > 0), print both and write eval.json; 0 = off."})
    eval_every: int = field(default=0, metadata={"help": "Also evaluate the pioneer alone on eval_episodes held-out queries after every N iterations (the same queries each time), logged as eval/reward, eval/kl, ... with that iteration's metrics; 0 = off."})
    tensorboard: bool = field(default=True, metadata={"help": "Write TensorBoard events to output_dir."})
    torch_threads: int = field(default=0, metadata={"help": "torch.set_num_threads; 0 = leave torch's default."})
    deterministic: bool = field(default=True, metadata={"help": "torch.use_deterministic_algorithms(True, warn_only=True) so same seed => same metrics on CPU."})
    device: str = field(default="auto", metadata={"help": "Where the models live: auto (this process's GPU under a multi-GPU launch or when CUDA is available, else CPU), cpu, or a torch device such as cuda:0."})
    sharding: str = field(default="none", metadata={"help": "With several processes: none (every process holds full replicas of the models, gradients all-reduced) or fsdp (PyTorch FSDP2: parameters, gradients and Adam state sharded over the processes; full fine-tuning; docs/distributed.md)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        check_field(self.num_iterations >= 1, "num_iterations", self.num_iterations, "use a positive integer")
        check_field(self.role_exchange_period >= 0, "role_exchange_period", self.role_exchange_period, "use >= 0 (0 disables role exchange)")
        check_field(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "use >= 0 (0 = only at the end)")
        check_field(self.checkpoint_every_minutes >= 0, "checkpoint_every_minutes", self.checkpoint_every_minutes,
               "use >= 0 (0 = no time-based checkpoints)")
        check_field(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, "keep at least 1 checkpoint")
        check_field(self.eta is None or self.eta >= 0, "eta", self.eta, "use eta >= 0, or None for the KL coefficient")
        check_field(self.log_samples >= 0, "log_samples", self.log_samples, "use >= 0")
        check_field(self.eval_episodes >= 0, "eval_episodes", self.eval_episodes, "use >= 0 (0 = no evaluation)")
        check_field(self.eval_every >= 0, "eval_every", self.eval_every, "use >= 0 (0 = no periodic evaluation)")
        check_field(self.torch_threads >= 0, "torch_threads", self.torch_threads, "use >= 0 (0 = torch's default)")
        check_field(not (self.resume and self.overwrite), "resume", self.resume, "pass either --resume or --overwrite, not both")
        check_field(self.device == "auto" or self.device == "cpu" or self.device.startswith(("cuda", "mps", "xpu")),
               "device", self.device, "use auto, cpu or a torch device such as cuda:0")
        check_field(self.sharding in SHARDINGS, "sharding", self.sharding, f"use one of {SHARDINGS}")

    @property
    def sharded(self) -> bool:
        """True when the models are FSDP2-sharded over the processes (``sharding="fsdp"``)."""
        return self.sharding == "fsdp"


#: The config classes of a run in flat-dict (and ``cory train --help``) order.
CONFIG_CLASSES = (EnvConfig, PPOConfig, GRPOConfig, ModelConfig, SamplingConfig, CORYConfig)


class RunConfigs(NamedTuple):
    """The six configs of a run, in `trainers.CORYTrainer`'s argument order (``CORYTrainer(*configs)``); `grpo` may be
    left out (its defaults)."""

    run: CORYConfig
    ppo: PPOConfig
    env: EnvConfig
    model: ModelConfig
    sampling: SamplingConfig
    grpo: GRPOConfig = GRPOConfig()

    @classmethod
    def of(cls, configs) -> RunConfigs:
        """The config objects, given in any order (e.g. `CONFIG_CLASSES` order, as the CLI parses them).

        Raises:
            TypeError: unless `configs` holds exactly one object of each class in `CONFIG_CLASSES` (`GRPOConfig`
                may be missing: its defaults).
        """
        classes = [type(config) for config in configs]
        by_class = {GRPOConfig: GRPOConfig(), **dict(zip(classes, configs))}
        if len(set(classes)) != len(classes) or set(by_class) != set(CONFIG_CLASSES):
            raise TypeError(f"expected one object of each of {[c.__name__ for c in CONFIG_CLASSES]}, got "
                            f"{[type(c).__name__ for c in configs]}")
        return cls(run=by_class[CORYConfig], ppo=by_class[PPOConfig], env=by_class[EnvConfig],
                   model=by_class[ModelConfig], sampling=by_class[SamplingConfig], grpo=by_class[GRPOConfig])

    def to_flat(self) -> dict[str, Any]:
        """The flat ``{field: value}`` dict (what ``config.yaml`` and checkpoints record), in `CONFIG_CLASSES`
        order."""
        by_class = {type(config): config for config in self}
        return {name: value for cls in CONFIG_CLASSES for name, value in dataclasses.asdict(by_class[cls]).items()}

    @classmethod
    def from_flat(cls, flat: dict[str, Any], *, strict: bool = False) -> RunConfigs:
        """The configs from a flat dict; missing fields take their defaults (a run recorded before a field was
        added reads as it ran).

        Args:
            flat: ``{field: value}``, e.g. a run's ``config.yaml``, a checkpoint's ``trainer_state["config"]``, a
                preset.
            strict: raise on keys that are no config field (else they are ignored).

        Raises:
            ValueError: an unknown key with `strict` (the valid ones are listed), or a value a config refuses.
        """
        flat = migrate_flat(flat)
        if strict:
            unknown = sorted(set(flat) - set(flat_field_types()))
            if unknown:
                raise ValueError(f"unknown option(s) {unknown}; valid options: {', '.join(sorted(flat_field_types()))}")
        return cls.of([c(**{f.name: flat[f.name] for f in dataclasses.fields(c) if f.name in flat})
                       for c in CONFIG_CLASSES])


#: Flat keys of earlier versions -> what they became: ``algo`` (``cory``: the task's default seating, ``ppo``: the
#: pioneer alone) is `EnvConfig.seating`.
MOVED_FIELDS = {"algo": "seating"}


def migrate_flat(flat: dict[str, Any]) -> dict[str, Any]:
    """`flat` in today's field names (`MOVED_FIELDS`): a run's ``config.yaml``, a checkpoint's config or a YAML file
    written before a field moved reads as it ran. ``algo: cory`` was every task's two seats, the default seating
    (None); ``algo: ppo`` is the seating ``ppo``; a key already in today's name wins."""
    if "algo" not in flat:
        return flat
    out = {k: v for k, v in flat.items() if k != "algo"}
    if flat["algo"] != "cory" and "seating" not in out:
        out["seating"] = flat["algo"]  # "ppo", or a value EnvConfig refuses by name
    return out


def flat_field_types() -> dict[str, Any]:
    """Every flat field name -> its type hint (e.g. ``Optional[float]``), for checking YAML files and presets."""
    out = {}
    for config_cls in CONFIG_CLASSES:
        hints = typing.get_type_hints(config_cls)
        for f in dataclasses.fields(config_cls):
            out[f.name] = hints[f.name]
    return out
