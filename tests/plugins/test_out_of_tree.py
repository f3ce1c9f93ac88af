"""A package this project has never seen plugs in a task, a learner and a reward, and `cory train` trains them, by
``module:attr`` and by entry point, resumes them and `cory eval` evaluates them, with no edit to the package; bad
plug-in input is one line and exit 2 before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.plugins.conftest import PACKAGE, plugin_env, write_plugins
from trainers.cli import main

TINY = ["--model", "tiny", "--num_iterations", "2", "--role_exchange_period", "1", "--batch_size", "4",
        "--mini_batch_size", "4", "--min_new_tokens", "2", "--max_new_tokens", "4", "--context_len", "64",
        "--learning_rate", "1e-3", "--tensorboard", "false", "--torch_threads", "1"]


def cory(args: list[str], site: Path | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainers.cli", *args], capture_output=True, text=True,
                          env=plugin_env(site), timeout=600)


def _train_resume_eval(site: Path, run: Path, names: dict[str, str]) -> dict:
    """Train 2 iterations, resume to 3, evaluate: the three `cory` commands a user types; returns trainer_state."""
    args = ["train", *TINY, "--task", names["task"], "--keyword", "the", "--learner", names["learner"],
            "--baseline_decay", "0.5", "--output_dir", str(run)]
    first = cory(args, site)
    assert first.returncode == 0, first.stderr[-3000:]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["task"], config["learner"], config["keyword"], config["baseline_decay"]) == (
        names["task"], names["learner"], "the", 0.5)
    resumed = cory(["train", "--config", str(run / "config.yaml"), "--resume", "--num_iterations", "3"], site)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2] and all("pioneer/policy_loss" in r for r in rows)
    evaluated = cory(["eval", str(run), "--episodes", "2"], site)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    state_path = sorted((run / "checkpoints").glob("iter-*"))[-1]
    assert evaluated.stdout.strip().splitlines()[-1].startswith(f"wrote {run}/eval-llm")
    return json.loads((state_path / "trainer_state.json").read_text())


@pytest.mark.slow
def test_entry_points_train_resume_and_eval_with_no_edit_to_the_package(plugin_site, tmp_path):
    state = _train_resume_eval(plugin_site, tmp_path / "ep", {"task": "demo-keyword", "learner": "demo-reinforce"})
    assert state["plugins"]["learner"] == f"{PACKAGE}.plugins:REINFORCE (entry point of cory-demo-plugins 0.1)"
    assert state["plugins"]["task"] == f"{PACKAGE}.plugins:KEYWORD (entry point of cory-demo-plugins 0.1)"


@pytest.mark.slow
def test_module_attr_names_train_resume_and_eval(bare_site, tmp_path):
    """The package declares no entry points: the resume reads the plug-ins' options from config.yaml by the
    ``module:attr`` names it records, not from what is installed."""
    names = {"task": f"{PACKAGE}.plugins:KEYWORD", "learner": f"{PACKAGE}.plugins:REINFORCE"}
    state = _train_resume_eval(bare_site, tmp_path / "ma", names)
    assert state["plugins"] == {"learner": names["learner"], "task": names["task"]}


@pytest.mark.slow
@pytest.mark.parametrize("reward", ["demo-length", f"{PACKAGE}.plugins:length"])
def test_a_plugin_reward_scores_the_imdb_task(plugin_site, tmp_path, reward):
    run = tmp_path / "reward"
    out = cory(["train", *TINY, "--reward", reward, "--num_iterations", "1", "--output_dir", str(run)], plugin_site)
    assert out.returncode == 0, out.stderr[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["reward"] == reward
    for line in (run / "samples.jsonl").read_text().splitlines():  # the plug-in scored every response
        sample = json.loads(line)
        for seat in ("pioneer", "observer"):
            assert sample[f"{seat}_task_reward"] == pytest.approx(len(sample[f"{seat}_response"].split()) / 10)


@pytest.mark.slow
def test_the_launched_workers_find_a_plugin_task_by_entry_point(plugin_site, tmp_path):
    run = tmp_path / "ddp"
    out = cory(["train", *TINY, "--task", "demo-keyword", "--num_iterations", "1", "--num_processes", "2",
                "--output_dir", str(run)], plugin_site)
    assert out.returncode == 0, out.stderr[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["task"] == "demo-keyword"


def test_help_shows_the_plugins_options_grouped(plugins_on_path, capsys):
    for flag, shared in (("--help_all", ("learning_rate", "init_kl_coef")), ("--help", ("learning_rate",))):
        with pytest.raises(SystemExit):
            main(["train", "--task", "demo-keyword", "--learner", "demo-reinforce", flag])
        text = capsys.readouterr().out
        group = text.split("update options read by learner 'demo-reinforce' (ReinforceConfig):", 1)[1]
        group = group.split("\n\n", 1)[0]
        assert all(f"--{name}" in group for name in ("baseline_decay", *shared))  # own + shared (--help: a first run's)
        assert "keyword task options (--task keyword)" in text and "--keyword" in text
        assert "--gamma" not in text and "--min_review_chars" not in text  # what this run does not read is hidden


@pytest.mark.parametrize(("args", "message"), [
    (["--learner", "nope"], "unknown learner 'nope'; known learners: ppo, grpo, mappo, magrpo, demo-reinforce"),
    (["--learner", "no_such_pkg.mod:SPEC"], "learner 'no_such_pkg.mod:SPEC': module 'no_such_pkg.mod' does not import"),
    (["--learner", f"{PACKAGE}.plugins:KEYWORD"], f"learner '{PACKAGE}.plugins:KEYWORD' is a TaskSpec, not a LearnerSpec"),
    (["--task", f"{PACKAGE}.plugins:nothing"], f"module '{PACKAGE}.plugins' has no attribute 'nothing'"),
    (["--reward", f"{PACKAGE}.plugins:KeywordOptions"],  # a class is a factory of reward functions: this one is not
     f"reward '{PACKAGE}.plugins:KeywordOptions' built a KeywordOptions, not a reward function"),
    (["--learner", "demo-reinforce", "--baseline_decay", "2"], "baseline_decay=2.0 is invalid: use a value in [0, 1)"),
    (["--task", "demo-keyword", "--keyword", " "], "keyword=' ' is invalid: give a non-empty word"),
])
def test_bad_plugin_input_is_one_line_and_exit_2_before_any_folder(plugins_on_path, tmp_path, capsys, args, message):
    run = tmp_path / "never"
    status = main(["train", *TINY, *args, "--output_dir", str(run)])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not run.exists()


def test_two_packages_claiming_one_name_are_refused_naming_both(plugins_on_path, tmp_path, capsys):
    write_plugins(plugins_on_path, name="other-plugins", entry_points={"cory.learners": {"demo-reinforce": "KEYWORD"}})
    from trainers.learning.registry import LEARNERS

    LEARNERS.refresh()
    status = main(["train", *TINY, "--learner", "demo-reinforce", "--output_dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert status == 2 and "two installed packages register the learner 'demo-reinforce'" in err
    assert "cory-demo-plugins 0.1" in err and "other-plugins 0.1" in err


@pytest.mark.slow
def test_a_resume_whose_plugin_no_longer_imports_is_refused_with_the_reason(plugin_site, tmp_path):
    run = tmp_path / "gone"
    first = cory(["train", *TINY, "--learner", "demo-reinforce", "--num_iterations", "1", "--output_dir", str(run)],
                 plugin_site)
    assert first.returncode == 0, first.stderr[-3000:]
    again = cory(["train", "--config", str(run / "config.yaml"), "--resume", "--num_iterations", "2"], None)
    assert again.returncode == 2
    assert "unknown learner 'demo-reinforce'" in again.stderr and "entry point group 'cory.learners'" in again.stderr
    evaluated = cory(["eval", str(run), "--episodes", "2"], None)
    assert evaluated.returncode == 2 and "demo-reinforce" in evaluated.stderr
