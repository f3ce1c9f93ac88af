"""Every option of `cory train` is checked before anything is written: an out-of-range value of any field of any
config class (the base configs and every registered learner's and task's options) is one line and exit 2, and no
run folder exists afterwards. The walk is generated from the config classes, so a new field is walked too."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from trainers.cli import main
from trainers.config import all_config_classes

TINY = ["--model", "tiny", "--num_iterations", "1", "--batch_size", "4", "--mini_batch_size", "2",
        "--min_new_tokens", "2", "--max_new_tokens", "4", "--context_len", "64", "--tensorboard", "false"]
#: Fields where -1 is a valid value (a competitive partner coefficient): given another out-of-range value.
BAD = {"partner_reward_coef": "1e9", "output_dir": None, "data_path": "/nonexistent/queries.csv",
       "model": "/nonexistent/model", "stop_strings": ""}


def _bad_value(cls: type, f: dataclasses.Field) -> str | None:
    """An out-of-range value of field `f` as a command-line string (None: the field has no invalid value)."""
    if f.name in BAD:
        return BAD[f.name]
    hint = typing.get_type_hints(cls)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if args[0] is bool:
        return "maybe"  # neither true nor false
    if args[0] in (int, float):
        return "-1"
    return "no-such-value{}"  # no known name, no file, no valid template


CASES = [(cls.__name__, f.name, value) for cls in all_config_classes() for f in dataclasses.fields(cls)
         if (value := _bad_value(cls, f)) is not None]


@pytest.mark.parametrize(("owner", "name", "value"), CASES, ids=[f"{c}.{n}" for c, n, _ in CASES])
def test_an_out_of_range_value_is_refused_before_anything_is_written(tmp_path, capsys, owner, name, value):
    run = tmp_path / "run"
    extra = {"group_size": ["--learner", "grpo"], "scale_rewards": ["--learner", "grpo"],
             "kl_in_loss": ["--learner", "grpo"], "lora_target_modules": ["--use_lora", "true"]}.get(name, [])
    status = main(["train", *TINY, *extra, f"--{name}", value, "--output_dir", str(run)])
    err = capsys.readouterr().err.strip()
    assert status == 2, f"--{name} {value} ({owner}) was not refused (exit {status}): {err[-500:]}"
    assert len(err.splitlines()) == 1 and err.startswith("cory train: error:"), err
    assert name in err or value in err, f"the message does not name --{name}: {err}"
    assert not run.exists(), f"--{name} {value} was refused only after {run} was written"
