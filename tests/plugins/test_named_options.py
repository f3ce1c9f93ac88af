"""A YAML file's options are those of the learner and task it (or the command line) names, whatever is installed:
``cory train --config RUN/config.yaml --resume`` reads a ``module:attr`` plug-in's own options from a package that
declares no entry points, with or without ``--preset``; an installed plug-in that does not load is an error only for
a run that names it."""

from __future__ import annotations

import logging

import pytest
import yaml

from cory_env.seating import Seating
from tests.plugins.conftest import PACKAGE
from trainers.cli import main
from trainers.config.parser import parse_train_args
from trainers.config import RunConfigs
from trainers.config.unread import unread_options

MODULE_ATTR = {"learner": f"{PACKAGE}.plugins:REINFORCE", "task": f"{PACKAGE}.plugins:KEYWORD"}
ENTRY_POINTS = {"learner": "demo-reinforce", "task": "demo-keyword"}
#: (fixture putting the package on sys.path, the names a run gives): a package without entry points is named by
#: ``module:attr``; an installed one by either.
SITES = {"module:attr, no entry points": ("bare_plugins_on_path", MODULE_ATTR),
         "module:attr, installed": ("plugins_on_path", MODULE_ATTR),
         "entry points": ("plugins_on_path", ENTRY_POINTS)}
PRESETS = {"no preset": [], "--preset tiny": ["--preset", "tiny"]}


def _write(path, flat: dict) -> str:
    path.write_text(yaml.safe_dump(flat))
    return str(path)


@pytest.fixture(params=sorted(SITES))
def names(request) -> dict[str, str]:
    fixture, names = SITES[request.param]
    request.getfixturevalue(fixture)
    return names


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_runs_config_yaml_resumes_with_its_plugins_own_options(names, preset, tmp_path):
    """The documented resume: ``cory train --config runs/keyword/config.yaml --resume`` (docs/extending.md)."""
    run = RunConfigs.from_flat({**names, "keyword": "the", "baseline_decay": 0.5, "model": "tiny",
                                "output_dir": str(tmp_path / "run")}, strict=True)
    config = _write(tmp_path / "config.yaml", run.to_flat())
    configs = parse_train_args([*PRESETS[preset], "--config", config, "--resume", "--num_iterations", "4"])
    assert (configs.run.learner, configs.env.task) == (names["learner"], names["task"])
    assert configs.update.baseline_decay == 0.5 and configs.task_options.keyword == "the"
    assert configs.run.resume and configs.run.num_iterations == 4 and not configs.unread


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_yaml_file_holds_the_options_of_the_plugins_the_command_line_names(names, preset, tmp_path):
    config = _write(tmp_path / "options.yaml", {"baseline_decay": 0.25, "keyword": "good"})
    configs = parse_train_args([*PRESETS[preset], "--learner", names["learner"], "--task", names["task"],
                                "--config", config])
    assert configs.update.baseline_decay == 0.25 and configs.task_options.keyword == "good"


def test_a_plugin_a_yaml_file_names_but_the_command_line_replaces_is_named_as_unread(bare_plugins_on_path,
                                                                                      tmp_path):
    config = _write(tmp_path / "c.yaml", {**MODULE_ATTR, "baseline_decay": 0.5, "keyword": "the"})
    configs = parse_train_args(["--config", config, "--learner", "ppo", "--task", "imdb"])
    assert type(configs.update).__name__ == "PPOConfig" and type(configs.task_options).__name__ == "IMDBOptions"
    assert configs.unread == {"baseline_decay": 0.5, "keyword": "the"}
    text = " ".join(unread_options(configs, Seating.from_spec("cory")))
    assert f"baseline_decay=0.5 does nothing: read by learner {MODULE_ATTR['learner']} only" in text


def test_a_plugins_option_given_as_a_flag_to_a_run_of_another_learner_is_an_error(bare_plugins_on_path, tmp_path,
                                                                                   capsys):
    """The same option from a YAML file is warned about (above); typed on the command line it is a mistake."""
    config = _write(tmp_path / "c.yaml", {"learner": MODULE_ATTR["learner"]})  # the plug-in is known to this run
    status = main(["train", "--config", config, "--learner", "ppo", "--baseline_decay", "0.5",
                   "--output_dir", str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--baseline_decay is read by learner {MODULE_ATTR['learner']} only, not by this run (learner='ppo'" in err
    assert not (tmp_path / "never").exists()


def test_a_yaml_file_naming_a_plugin_that_does_not_import_names_it(tmp_path, capsys):
    config = _write(tmp_path / "c.yaml", {**MODULE_ATTR, "baseline_decay": 0.5})
    status = main(["train", "--config", config, "--output_dir", str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert status == 2 and f"learner '{MODULE_ATTR['learner']}': module '{PACKAGE}.plugins' does not import" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


@pytest.fixture()
def broken_site(tmp_path, registries, monkeypatch):
    """An installed package whose entry point names a module that does not exist."""
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cory.learners]\nbroken = no_such_module_for_cory:SPEC\n\n"
                                           "[cory.tasks]\nbroken-task = no_such_module_for_cory:TASK\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for registry in registries:
        registry.refresh()
    return tmp_path


def test_an_installed_plugin_that_does_not_load_fails_only_the_runs_that_name_it(broken_site, tmp_path, capsys,
                                                                                   caplog):
    config = _write(tmp_path / "c.yaml", {"batch_size": 8})
    with caplog.at_level(logging.WARNING, logger="cory_env.registry"):
        configs = parse_train_args(["--preset", "tiny", "--config", config])
    assert configs.update.batch_size == 8 and configs.run.learner == "ppo"
    assert "broken" not in caplog.text  # a run that does not name it neither imports it nor warns of it
    status = main(["train", "--learner", "broken", "--output_dir", str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert status == 2 and "learner 'broken' (entry point 'no_such_module_for_cory:SPEC'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "never").exists()
