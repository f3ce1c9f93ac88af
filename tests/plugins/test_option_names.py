"""A plug-in's option names and registered names: every name `cory train` already takes (a config field, its own
``--preset``/``--config``/``--num_processes``/``--help``, an alias such as ``--algo``, a ``--no_X`` switch) is refused
in one line naming both, exit 2, before any folder; a learner's config inherits the shared `UpdateConfig` fields and
may change their defaults; ``register_*`` of a name an installed plug-in claims is refused naming both
(``overwrite=True`` replaces it)."""

from __future__ import annotations

import dataclasses

import pytest

from cory_env.rewards import REWARDS, register_reward
from cory_env.tasks import TaskSpec, register_task, task_spec
from tests.plugins.conftest import PACKAGE
from trainers.cli import main
from trainers.config.parser import build_train_parser
from trainers.config import BASE_CLASSES, CLI_OPTIONS, RunConfigs, all_config_classes, option_names
from trainers.config.parser import parse_train_args
from trainers.learning.configs import UpdateConfig
from trainers.learning.registry import LearnerSpec, learner_spec, register_learner

#: Every name `cory train` takes that is no plain field: its own options, aliases, ``--no_X`` switches (of the
#: configs every run has: the base configs and the shared update).
TAKEN = sorted({*CLI_OPTIONS, *(name for cls in (*BASE_CLASSES, UpdateConfig) for name in option_names(cls)
                                if name not in {f.name for f in dataclasses.fields(cls)})})
#: The taken names a learner's config may not use: those its own `UpdateConfig` base does not bring.
LEARNER_TAKEN = sorted(set(TAKEN) - set(option_names(UpdateConfig)))


def _options(field_name: str, *, base: type | None = None) -> type:
    """A one-field options class (a learner's: on `base`, `UpdateConfig`)."""
    return dataclasses.make_dataclass("PluginOptions", [(field_name, int, dataclasses.field(default=1))],
                                      bases=(base,) if base else ())


def _learner(agent, ref_model, args):
    return None


def _run(tmp_path, capsys, *args) -> tuple[int, str]:
    status = main(["train", "--model", "tiny", *args, "--output_dir", str(tmp_path / "never")])
    assert not (tmp_path / "never").exists()
    return status, capsys.readouterr().err


def test_the_taken_names_are_every_option_the_parser_has_beyond_the_fields():
    parser, classes, _ = build_train_parser([])
    strings = {s.lstrip("-").replace("-", "_") for a in parser._actions for s in a.option_strings if s != "-h"}
    fields = {f.name for cls in classes for f in dataclasses.fields(cls)}
    assert strings - fields == set(TAKEN) and {"preset", "config", "num_processes", "help", "algo"} <= set(TAKEN)


@pytest.mark.parametrize("name", [*LEARNER_TAKEN, "seed", "max_new_tokens"])
def test_a_learner_option_with_a_taken_name_is_one_line_naming_both(registries, tmp_path, capsys, name):
    register_learner("taken", _learner, config_class=_options(name, base=UpdateConfig))
    status, err = _run(tmp_path, capsys, "--learner", "taken")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"option {name!r} is " in err and "PluginOptions" in err and "rename the plug-in's field" in err
    other = err.split(f"option {name!r} is ", 1)[1].split(": every option", 1)[0].replace("PluginOptions", "")
    assert any(s in other for s in ("CORYConfig", "EnvConfig", "ModelConfig", "SamplingConfig",
                                    f"`cory train`'s own --{name}")), err


def test_a_learner_field_named_like_a_switch_of_its_own_config_is_one_line(registries, tmp_path, capsys):
    """``no_adap_kl_ctrl`` on a learner's config would be both its field and the ``--no_adap_kl_ctrl`` switch of the
    inherited ``adap_kl_ctrl`` (argparse would refuse the clash with a traceback)."""
    register_learner("switch", _learner, config_class=_options("no_adap_kl_ctrl", base=UpdateConfig))
    status, err = _run(tmp_path, capsys, "--learner", "switch")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "option 'no_adap_kl_ctrl' is a field of PluginOptions and the --no_adap_kl_ctrl switch of its field " \
           "'adap_kl_ctrl'" in err


def test_a_learner_config_may_change_a_shared_fields_default(registries):
    """A shared field redeclared on the learner's config is the same option with its own default (TRL's
    `GRPOConfig` lowers `learning_rate`'s), not a clash."""
    config = dataclasses.make_dataclass("PluginOptions", [("learning_rate", float, dataclasses.field(default=1e-3))],
                                        bases=(UpdateConfig,))
    register_learner("own-default", _learner, config_class=config)
    assert parse_train_args(["--learner", "own-default"]).update.learning_rate == 1e-3
    assert parse_train_args(["--learner", "own-default", "--learning_rate", "0.5"]).update.learning_rate == 0.5


@pytest.mark.parametrize("name", ["preset", "no_tensorboard", "algo", "learning_rate", "no_adap_kl_ctrl"])
def test_a_task_option_with_a_taken_name_is_refused_the_same_way(registries, tmp_path, capsys, name):
    base = task_spec("tiny_vocab")
    register_task("taken", dataclasses.replace(base, builder=lambda config, tokenizer, options=None: None,
                                                options=_options(name)))
    status, err = _run(tmp_path, capsys, "--task", "taken")
    assert status == 2 and len(err.strip().splitlines()) == 1 and f"option {name!r} is " in err, err


def test_every_builtin_options_class_has_names_of_its_own():
    """Beyond the shared `UpdateConfig` a learner's config inherits, every option name is one class's."""
    seen: dict[str, str] = {name: "cory train" for name in CLI_OPTIONS}
    shared = option_names(UpdateConfig)
    for cls in all_config_classes():
        own = option_names(cls) if cls is UpdateConfig or not issubclass(cls, UpdateConfig) else \
            {name: what for name, what in option_names(cls).items() if name not in shared}
        for name in own:
            assert name not in seen, (name, cls, seen.get(name))
            seen[name] = cls.__name__
    assert {"PPOConfig", "GRPOConfig"} <= set(seen.values())  # the built-in learners' own fields were checked
    RunConfigs()  # the defaults pass the check


def _installed_spec(kind: str):
    return {"learner": lambda: LearnerSpec(_learner),
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
