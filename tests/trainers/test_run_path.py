"""The path from `cory train` to the learner is short and reads everything once (issue 50): argv is read by one first
pass and one parse, each config is built once, the learner and the task are looked up once by the parser and once
by `RunConfigs` (the specs it then carries), and the learner is built two frames below the CLI (`CORYTrainer` →
`LearnerSpec.build`), with no closure or wrapper in between."""

from __future__ import annotations

import argparse
import collections
import traceback

from agents.sampling import SamplingConfig
from cory_env.config import EnvConfig
from cory_env.tasks import TASKS
from trainers.cli import main
from trainers.config import CORYConfig, ModelConfig
from trainers.learning import grpo
from trainers.learning.configs import GRPOConfig
from trainers.learning.registry import LEARNERS

CONFIGS = (CORYConfig, ModelConfig, EnvConfig, SamplingConfig, GRPOConfig)


def test_cory_train_parses_once_builds_each_config_once_and_builds_the_learner_two_frames_down(tmp_path,
                                                                                               monkeypatch):
    counts = collections.Counter()
    stepped, frames = [], []
    real_parse = argparse.ArgumentParser.parse_known_args

    def parse(self, args=None, namespace=None):
        counts["parses"] += 1
        return real_parse(self, args, namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)
    for registry, key in ((LEARNERS, "learner lookups"), (TASKS, "task lookups")):
        def get(name, _real=registry.get, _key=key):
            counts[_key] += 0 if stepped else 1
            return _real(name)
        monkeypatch.setattr(registry, "get", get)
    for cls in CONFIGS:
        def post_init(self, _real=cls.__post_init__, _cls=cls):
            counts[_cls.__name__] += 0 if stepped or type(self) is not _cls else 1
            _real(self)
        monkeypatch.setattr(cls, "__post_init__", post_init)
    real_init, real_step = grpo.GRPOLearner.__init__, grpo.GRPOLearner.step

    def init(self, *args, **kwargs):
        names = [frame.name for frame in traceback.extract_stack()[:-1]]
        frames.append(names[max(i for i, name in enumerate(names) if name == "run_train"):])
        real_init(self, *args, **kwargs)

    def step(self, *args, **kwargs):
        stepped.append(True)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(grpo.GRPOLearner, "__init__", init)
    monkeypatch.setattr(grpo.GRPOLearner, "step", step)
    assert main(["train", "--preset", "tiny", "--learner", "grpo", "--group_size", "2", "--num_iterations", "1",
                 "--output_dir", str(tmp_path / "run"), "--tensorboard", "false", "--log_samples", "0"]) == 0
    assert stepped and frames[0] == ["run_train", "__init__", "build"]  # CLI → CORYTrainer → LearnerSpec.build
    assert counts["parses"] == 2  # the first pass and the one parse
    assert all(counts[cls.__name__] == 1 for cls in CONFIGS), counts
    assert counts["learner lookups"] == 2 and counts["task lookups"] == 2, counts
