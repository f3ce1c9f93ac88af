"""A learner's config is one class on the shared `UpdateConfig` base: a spec whose `config_class` is anything else is
refused naming the fix; the factory receives the run's instance as ``args``; each built-in spec is its module's
``SPEC``; another learner's option is an error as a flag and a warning from a YAML file."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field

import pytest
import yaml

from cory_env.seating import Seating
from trainers.cli import main
from trainers.config.parser import parse_train_args
from trainers.config import RunConfigs
from trainers.learning.configs import PPOConfig, UpdateConfig
from trainers.learning.registry import LEARNERS, LearnerSpec, learner_spec, make_learner, register_learner
from trainers.config.unread import unread_options


@dataclass
class PlainOptions:
    """Options on no base: what a plug-in wrote before the learners' configs shared `UpdateConfig`."""

    plain_option: int = 1


@dataclass
class RecordingConfig(UpdateConfig):
    recording_option: int = field(default=3, metadata={"help": "A plug-in learner's own option."})


class RecordingLearner:
    """A per-seat learner that keeps what its factory was given."""

    kl_coef = 0.0

    def __init__(self, agent, ref_model, args):
        self.agent, self.ref_model, self.args = agent, ref_model, args

    def step(self, rollout, *, generator=None):
        return {"task_reward": 0.0, "kl": 0.0}

    def reset_state(self):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@pytest.mark.parametrize("config_class", [PlainOptions, dict], ids=["plain dataclass", "dict"])
def test_a_config_class_not_on_update_config_is_refused_naming_the_fix(registries, config_class):
    fix = "write `@dataclass class MyConfig(UpdateConfig): ...`"
    with pytest.raises(TypeError, match="must be a dataclass subclassing trainers.learning.configs.UpdateConfig") \
            as err:
        LearnerSpec(RecordingLearner, config_class=config_class)
    assert fix in str(err.value) and repr(config_class) in str(err.value)
    with pytest.raises(TypeError, match="subclassing trainers.learning.configs.UpdateConfig"):
        register_learner("plain", RecordingLearner, config_class=config_class)
    assert "plain" not in LEARNERS.names()


def test_a_learner_without_a_config_class_reads_the_shared_update(registries):
    assert LearnerSpec(RecordingLearner).config_class is UpdateConfig


def test_the_factory_gets_the_runs_config_instance_as_args(registries):
    register_learner("recording", RecordingLearner, config_class=RecordingConfig)
    configs = RunConfigs.from_flat({"learner": "recording", "recording_option": 5, "learning_rate": 0.5},
                                   strict=True)
    assert type(configs.update) is RecordingConfig and configs.update.recording_option == 5
    assert configs.update.learning_rate == 0.5  # the shared fields are the learner's too
    agents = {"llm1": object(), "llm2": object()}
    built = configs.learner_spec.build(agents, "ref", configs.update)
    assert all(built.learners[m].args is configs.update and built.learners[m].agent is agents[m] for m in agents)
    assert make_learner("recording", "agent", "ref").args == RecordingConfig()  # no args: the class's defaults
    with pytest.raises(TypeError, match="the learner reads a RecordingConfig, got a PPOConfig"):
        make_learner("recording", "agent", "ref", PPOConfig())
    assert LEARNERS.origin("recording") == f"{__name__}:RecordingLearner"


@pytest.mark.parametrize("name", ["ppo", "grpo", "mappo", "magrpo"])
def test_each_builtin_spec_is_its_modules_spec_next_to_its_class(name):
    module = importlib.import_module(f"trainers.learning.{name}")
    spec = learner_spec(name)
    assert spec is module.SPEC and LEARNERS.origin(name) == f"trainers.learning.{name}:SPEC"
    assert issubclass(spec.config_class, UpdateConfig) and dataclasses.is_dataclass(spec.config_class)


@pytest.mark.parametrize(("learner", "flag", "readers"), [
    ("ppo", "--group_size", "learner grpo and learner magrpo"),
    ("grpo", "--vf_coef", "learner ppo and learner mappo"),
])
def test_another_learners_option_as_a_flag_is_one_line_naming_who_reads_it(tmp_path, capsys, learner, flag,
                                                                            readers):
    status = main(["train", "--model", "tiny", "--learner", learner, flag, "4", "--output_dir",
                   str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{flag} is read by {readers} only, not by this run (learner={learner!r}" in err
    assert not (tmp_path / "never").exists()


def test_another_learners_option_from_a_yaml_file_is_warned_as_unread(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"group_size": 8, "vf_coef": 0.5}))
    configs = parse_train_args(["--learner", "ppo", "--config", str(path)])
    assert configs.unread == {"group_size": 8} and configs.update.vf_coef == 0.5
    text = " ".join(unread_options(configs, Seating.from_spec("cory")))
    assert "group_size=8 does nothing: read by learner grpo and learner magrpo only (this run: learner='ppo'" in text
