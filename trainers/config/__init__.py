"""The flat option namespace of a run: its config classes and the flat dict that joins them, who owns each name, how
the command line, a YAML file and a preset resolve into one run, and which options a run does not read.

| module | what |
|---|---|
| `trainers.config.sections` | `ModelConfig` (the policy model), `CORYConfig` (the run) |
| `trainers.config.tree` | `RunConfigs`: a run's configs as a tree <-> the flat ``{field: value}`` dict, its specs resolved once |
| `trainers.config.names` | who owns a name: one field of one config class per option (`check_option_names`, `option_fields`) |
| `trainers.config.parser` | ``cory train``'s options: flags > ``--config FILE.yaml`` > ``--preset NAME`` > defaults (`parse_train_args`) |
| `trainers.config.presets` | the named presets |
| `trainers.config.unread` | the options a run does not read, named at its start (`unread_options`) |

The config classes of a run: `cory_env.EnvConfig` (task, data, episode lengths, reward, seating, knowledge transfer),
the learner's config (`PPOConfig`, `GRPOConfig`, a plug-in's: the update every learner shares, `UpdateConfig` with
TRL's names, and the learner's own options; `trainers.learning.configs`), `ModelConfig` (the policy model: name,
dtype, LoRA, value head, activation checkpointing), `SamplingConfig` (how a seat's model samples;
`cory_env.generation`), `CORYConfig` (the run: learner, iterations, seeds, role exchange and matchmaking, logging,
checkpoints), the task's options and the matchmaking scheme's options.

Each field carries its meaning, unit, range and the origin of its default in `metadata["help"]`; that help is the
only copy (the CLI reads it through `transformers.HfArgumentParser`, the docs' Options page is built from it). PPO knob
names and defaults are TRL 0.7–0.11 `PPOConfig`'s, so the paper's settings (official code: TRL 0.7.10) copy over.
Field names are unique across a run's classes, so a run's settings are also one flat ``{field: value}`` dict (the
CLI flags, presets, YAML files, ``config.yaml``, checkpoints; `RunConfigs.to_flat` / `RunConfigs.from_flat`).
"""

from trainers.config.names import (BASE_CLASSES, CLI_OPTIONS, all_config_classes, check_option_names,
                                   flat_field_types, option_class, option_fields, option_names, own_fields)
from trainers.config.sections import (DROPOUT_OFF, DTYPES, MODEL_SLOT_TYPES, SHARDINGS, CORYConfig, ModelConfig,
                                      exchange_reason, exchanges_happen, period_unread)
from trainers.config.tree import RunConfigs, plugin_origins
from trainers.learning.configs import GRPOConfig, PPOConfig, UpdateConfig

__all__ = ["BASE_CLASSES", "CLI_OPTIONS", "DROPOUT_OFF", "DTYPES", "MODEL_SLOT_TYPES", "SHARDINGS", "CORYConfig",
           "GRPOConfig", "ModelConfig", "PPOConfig", "RunConfigs", "UpdateConfig", "all_config_classes",
           "check_option_names", "exchange_reason", "exchanges_happen", "flat_field_types", "option_class",
           "option_fields", "option_names", "own_fields", "period_unread", "plugin_origins"]
