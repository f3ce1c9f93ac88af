"""Each preset that claims a benchmark's settings trains with exactly those settings: `cory train --preset NAME`
and the learning ladder's arm (benchmarks/learning.py) parse to one config, but for where and what they write."""

from __future__ import annotations

import pytest

from benchmarks.rungs import RUNGS, arm_configs
from trainers.config.parser import parse_train_args

#: preset -> (the ladder's rung, its arm) that the preset's comment names.
CLAIMED = {"tiny-vocab": ("tiny_vocab", "cory"), "relay": ("relay", "cory"), "chain-relay": ("chain_relay", "chain3")}
#: What the benchmark harness sets for its own bookkeeping (outputs, evaluations it runs itself): not training.
HARNESS = {"output_dir", "overwrite", "tensorboard", "log_samples", "checkpoint_every_minutes", "eval_episodes",
           "eval_influence"}


@pytest.mark.parametrize("name", sorted(CLAIMED))
def test_a_ladder_preset_trains_with_the_ladders_settings_and_budget(name, tmp_path):
    rung, arm = CLAIMED[name]
    ladder, iterations = arm_configs(rung, arm, seed=0, episodes=RUNGS[rung].episodes, run_dir=str(tmp_path / "r"))
    preset = parse_train_args(["--preset", name])
    assert preset.run.num_iterations == iterations
    mine, theirs = preset.to_flat(), ladder.to_flat()
    differ = {k: (mine.get(k), theirs.get(k)) for k in set(mine) | set(theirs)
              if k not in HARNESS and mine.get(k) != theirs.get(k)}
    assert differ == {}
    assert rung.replace("_", "-") == name  # the preset is named after its rung

