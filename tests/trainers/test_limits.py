"""Limits that name their option: each refused at config time (before any folder), naming the option and the fix."""

from __future__ import annotations

import os

import pytest

from agents.sampling import SamplingConfig
from cory_env.checks import check_path
from trainers.cli import main as cory_main
from trainers.cli.launch import process_errors
from trainers.learning.configs import PPOConfig
from trainers.learning.kl_control import make_kl_controller


def test_a_horizon_that_can_turn_beta_negative_is_refused():
    """Before: --horizon 0.5 --batch_size 4 made beta negative at iteration 2 ("kl_coef must be >= 0", no option)."""
    with pytest.raises(ValueError, match=r"horizon=0\.5 is invalid with batch_size=4.*use horizon > 0\.8"):
        PPOConfig(horizon=0.5, batch_size=4, mini_batch_size=4)
    PPOConfig(horizon=0.5, batch_size=4, mini_batch_size=4, adap_kl_ctrl=False)  # a fixed beta never moves
    ok = PPOConfig(horizon=0.81, batch_size=4, mini_batch_size=4)
    ctl = make_kl_controller(adap_kl_ctrl=True, init_kl_coef=0.2, target=6.0, horizon=ok.horizon)
    ctl.update(current_kl=0.0, n_steps=ok.batch_size)  # the largest step down keeps beta > 0
    assert ctl.value > 0


def test_the_horizon_rule_counts_every_process(tmp_path):
    """n_steps = batch_size x processes: a horizon fine for one process is refused for two before any process."""
    status = cory_main(["train", "--preset", "tiny", "--batch_size", "4", "--mini_batch_size", "2",
                        "--horizon", "1.2", "--num_processes", "2", "--output_dir", str(tmp_path / "r")])
    assert status == 2 and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["init_kl_coef", "vf_coef", "ent_coef"])
def test_loss_weights_that_overflow_are_refused(name):
    """Before: 1e300 was accepted and the run ended in a NonFiniteLossError advising a lower learning rate."""
    with pytest.raises(ValueError, match=rf"{name}=1e\+300 is invalid: use a value <= 1e\+06"):
        PPOConfig(**{name: 1e300})
    PPOConfig(**{name: 1e6})


@pytest.mark.parametrize("overrides, option", [({"temperature": 1e-300}, "temperature"),
                                               ({"repetition_penalty": 1e-300}, "repetition_penalty"),
                                               ({"repetition_penalty": 1e300}, "repetition_penalty")])
def test_sampling_values_that_overflow_the_logits_are_refused(overrides, option):
    """Before: --temperature 1e-300 gave a RuntimeError traceback from the sampler."""
    with pytest.raises(ValueError, match=rf"^{option}=1e[-+]300 is invalid: use a value "
                                         r"(>= 0\.001|in \[0\.001, 1000\]); logits divided by"):
        SamplingConfig(**overrides)


def test_a_cli_limit_is_one_line_before_any_folder(tmp_path, capsys):
    status = cory_main(["train", "--preset", "tiny", "--temperature", "1e-300", "--output_dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and not (tmp_path / "r").exists() and len(err) == 1 and "temperature" in err[0]


def test_a_pipe_as_data_path_is_refused_naming_the_option(tmp_path, capsys):
    """Before: a FIFO as --data_path said "Unable to find" (datasets); opened, it would block forever."""
    fifo = tmp_path / "reviews.csv"
    os.mkfifo(fifo)
    status = cory_main(["train", "--preset", "tiny", "--data_path", str(fifo), "--output_dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "r").exists()
    assert "data_path" in err and "is not a regular file" in err


def test_a_file_in_an_unreadable_folder_names_the_option(tmp_path, monkeypatch):
    """Before: a raw ``[Errno 13] Permission denied`` without the option (root reads everything, so the folder's
    refusal is simulated)."""
    from pathlib import Path

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "stat", denied)
    with pytest.raises(PermissionError, match="data_path '.*' cannot be reached: a folder on its path cannot be read"):
        check_path(tmp_path / "locked" / "reviews.csv", "data_path")


def test_process_errors_print_one_error_once_and_different_ones_by_process(tmp_path):
    (tmp_path / "rank-0.txt").write_text("cory train: error: reward raised (offending text: 'a b')\n")
    (tmp_path / "rank-1.txt").write_text("cory train: error: reward raised (offending text: 'c')\n")
    assert process_errors(str(tmp_path)) == ["cory train: error: reward raised (offending text: 'a b')"]
    (tmp_path / "rank-1.txt").write_text("cory train: error: connection closed by peer\n")
    assert process_errors(str(tmp_path)) == ["cory train: error: reward raised (offending text: 'a b') (process 0)",
                                             "cory train: error: connection closed by peer (process 1)"]


def test_a_reward_in_small_units_trains_with_score_scaling(tiny_run):
    """Before: a reward above 1e6 was refused at the first rollout even with score scaling and normalisation on,
    leaving a folder; rewards up to `MAX_REWARD` (1e12) are numbers the run can train on."""
    from cory_env.checks import MAX_REWARD
    from trainers.loop.cory import CORYTrainer

    def micro_units(queries, responses):
        return [3e6 * len(r) for r in responses]

    trainer = CORYTrainer(tiny_run("micro", num_iterations=1, use_score_scaling=True, use_score_norm=True),
                          reward_fn=micro_units)
    rows = trainer.train()
    assert rows[0]["pioneer/task_reward"] > 1e6 and MAX_REWARD == 1e12


def test_a_plugin_task_builder_returning_the_wrong_object_is_one_line(tmp_path, monkeypatch, capsys):
    """Before: a TypeError traceback and exit 1 (the same kind as a reward of the wrong signature)."""
    (tmp_path / "broken_task.py").write_text(
        "from cory_env.tasks import TaskSpec\n"
        "SPEC = TaskSpec(lambda config, tokenizer: {'query': 'x'})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    status = cory_main(["train", "--preset", "tiny", "--task", "broken_task:SPEC", "--output_dir",
                        str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "returned dict, not a cory_env.tasks.Task" in err[0]
    assert not (tmp_path / "r").exists()


def test_a_learner_whose_stats_lack_the_protocols_keys_is_one_line(tiny_run, tmp_path):
    """Before: a KeyError after the update (the learner stats' task_reward and kl are the protocol's)."""
    from cory_env.registry import PluginContractError
    from trainers.loop.cory import CORYTrainer

    trainer = CORYTrainer(tiny_run("nostats", num_iterations=1))
    real = trainer.algorithm.step
    trainer.algorithm.step = lambda batch: {seat: {k: v for k, v in stats.items() if k != "kl"}
                                            for seat, stats in real(batch).items()}
    with pytest.raises(PluginContractError, match=r"returned stats without \['kl'\] for llm1 in seat pioneer"):
        trainer.train()
    assert not (tmp_path / "nostats" / "checkpoints").exists()
