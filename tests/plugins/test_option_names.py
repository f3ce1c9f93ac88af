"""A plug-in's option names and registered names: every name `cory train` already takes (a config field, its own
``--preset``/``--config``/``--num_processes``/``--help``, an alias such as ``--algo``, a ``--no_X`` switch) is refused
in one line naming both, exit 2, before any folder; ``register_*`` of a name an installed plug-in claims is refused
naming both (``overwrite=True`` replaces it)."""

from __future__ import annotations

import dataclasses

import pytest

from cory_env.rewards import REWARDS, register_reward
from cory_env.tasks import TaskSpec, register_task, task_spec
from tests.plugins.conftest import PACKAGE
from trainers.cli import main
from trainers.cli.train import build_train_parser
from trainers.config import BASE_CLASSES, CLI_OPTIONS, RunConfigs, all_config_classes, option_names
from trainers.learning.learners import LearnerSpec, learner_spec, register_learner

#: Every name `cory train` takes that is no plain field: its own options, aliases, ``--no_X`` switches.
TAKEN = sorted({*CLI_OPTIONS, *(name for cls in BASE_CLASSES for name in option_names(cls)
                                if name not in {f.name for f in dataclasses.fields(cls)})})


def _options(field_name: str) -> type:
    return dataclasses.make_dataclass("PluginOptions", [(field_name, int, dataclasses.field(default=1))])


def _run(tmp_path, capsys, *args) -> tuple[int, str]:
    status = main(["train", "--model", "tiny", *args, "--output_dir", str(tmp_path / "never")])
    assert not (tmp_path / "never").exists()
    return status, capsys.readouterr().err


def test_the_taken_names_are_every_option_the_parser_has_beyond_the_fields():
    parser, classes, _ = build_train_parser([])
    strings = {s.lstrip("-").replace("-", "_") for a in parser._actions for s in a.option_strings if s != "-h"}
    fields = {f.name for cls in classes for f in dataclasses.fields(cls)}
    assert strings - fields == set(TAKEN) and {"preset", "config", "num_processes", "help", "algo"} <= set(TAKEN)


@pytest.mark.parametrize("name", [*TAKEN, "learning_rate", "seed"])
def test_a_learner_option_with_a_taken_name_is_one_line_naming_both(registries, tmp_path, capsys, name):
    register_learner("taken", lambda agent, ref_model, config, options=None: None, config_class=_options(name))
    status, err = _run(tmp_path, capsys, "--learner", "taken")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"option {name!r} is " in err and "PluginOptions" in err and "rename the plug-in's field" in err
    other = err.split(f"option {name!r} is ", 1)[1].split(": every option", 1)[0].replace("PluginOptions", "")
    assert any(s in other for s in ("PPOConfig", "CORYConfig", "EnvConfig", "ModelConfig", "SamplingConfig",
                                    f"`cory train`'s own --{name}")), err


@pytest.mark.parametrize("name", ["preset", "no_tensorboard", "algo"])
def test_a_task_option_with_a_taken_name_is_refused_the_same_way(registries, tmp_path, capsys, name):
    base = task_spec("tiny_vocab")
    register_task("taken", dataclasses.replace(base, builder=lambda config, tokenizer, options=None: None,
                                                options=_options(name)))
    status, err = _run(tmp_path, capsys, "--task", "taken")
    assert status == 2 and len(err.strip().splitlines()) == 1 and f"option {name!r} is " in err, err


def test_every_builtin_options_class_has_names_of_its_own():
    seen: dict[str, str] = {name: "cory train" for name in CLI_OPTIONS}
    for cls in all_config_classes():
        for name in option_names(cls):
            assert name not in seen, (name, cls, seen.get(name))
            seen[name] = cls.__name__
    RunConfigs()  # the defaults pass the check


def _installed_spec(kind: str):
    return {"learner": lambda: LearnerSpec(lambda agent, ref_model, config: None),
            "task": lambda: dataclasses.replace(task_spec("tiny_vocab")),
            "reward": lambda: (lambda queries, responses: [0.0] * len(queries))}[kind]()


@pytest.mark.parametrize(("kind", "name", "register", "lookup"), [
    ("learner", "demo-reinforce", register_learner, learner_spec),
    ("task", "demo-keyword", register_task, task_spec),
    ("reward", "demo-length", register_reward, REWARDS.get),
])
def test_registering_an_installed_plugins_name_is_refused_naming_both(plugins_on_path, kind, name, register,
                                                                      lookup):
    spec = _installed_spec(kind)
    with pytest.raises(ValueError, match=f"two {kind}s are registered as {name!r}") as err:
        register(name, spec)
    assert f"{PACKAGE}.plugins:" in str(err.value) and "(entry point of cory-demo-plugins 0.1)" in str(err.value)
    assert "overwrite=True" in str(err.value)
    installed = lookup(name)  # the installed one, unchanged
    assert (installed.factory() is not spec) if kind == "reward" else (installed != spec)
    register(name, spec, overwrite=True)  # asked for: replaces it in this process
    assert (lookup(name).factory() is spec) if kind == "reward" else (lookup(name) == spec)
