"""Nothing the user owns is lost: what `--overwrite` may remove, when the old run goes, and what a stop keeps.

`trainers.loop.run_dir` (the folder rules), `trainers.loop.cory.CORYTrainer` (the old run kept aside until the new
run's first checkpoint) and `trainers.cli.train.run_train` (every stop reports what was kept and how to continue).
"""

from __future__ import annotations

import json
import os
import shlex
import signal

import pytest
import yaml

import trainers.loop.cast as cast_module
import trainers.loop.job as job
import trainers.loop.run_state as run_state
import trainers.loop.cory as cory_loop
from trainers.cli import main as cory_main
from trainers.loop.cory import CORYTrainer
from trainers.loop.run_dir import RUN_MARKER, foreign_files, is_run

TINY = ["train", "--preset", "tiny", "--num_iterations", "1", "--torch_threads", "1", "--tensorboard", "false",
        "--eval_episodes", "0"]


def tree(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def finished_run(tiny_run, tmp_path):
    """A finished one-iteration run in tmp_path/proj/run, and its files."""
    configs = tiny_run("proj/run", num_iterations=1)
    CORYTrainer(configs).train()
    run = tmp_path / "proj" / "run"
    return run, tree(run)


@pytest.fixture
def no_model_load(monkeypatch):
    """A refusal must come before any model loads: loading one fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output folder was refused")

    monkeypatch.setattr(cast_module, "load_policy_model", refuse)


def test_a_run_is_marked_and_holds_only_its_own_files(finished_run):
    run, _ = finished_run
    assert (run / RUN_MARKER).is_file() and is_run(run) and foreign_files(run) == []


def test_overwrite_refuses_a_run_with_user_files_and_keeps_everything(finished_run, tiny_run, capsys,
                                                                      no_model_load):
    """Before: ``--overwrite`` of a run folder that also held thesis.tex and data.csv deleted them, exit 0."""
    run, files = finished_run
    (run / "thesis.tex").write_text("my thesis")
    (run / "checkpoints" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"thesis\.tex.*nothing was changed|checkpoints/notes\.txt"):
        CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True))
    assert tree(run) == {**files, "thesis.tex": b"my thesis", "checkpoints/notes.txt": b"mine"}


@pytest.mark.parametrize("where", ["cwd", "parent"])
def test_overwrite_refuses_the_current_folder_and_its_parents(finished_run, tiny_run, monkeypatch, where,
                                                              no_model_load):
    """Before: from d/sub, ``--output_dir ../../d --overwrite`` deleted the current folder and crashed."""
    run, files = finished_run
    (run / "sub").mkdir()  # a folder the user works in, inside the run
    monkeypatch.chdir(run if where == "cwd" else run / "sub")
    with pytest.raises(ValueError, match="current folder"):
        CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True))
    assert tree(run) == files


def test_another_tools_folder_is_not_a_run(tmp_path, tiny_run, no_model_load):
    """Before: Lightning's checkpoints/epoch=9.ckpt or a Hydra config.yaml beside user files counted as a run and
    ``--overwrite`` wiped the whole folder."""
    other = tmp_path / "lightning"
    (other / "checkpoints").mkdir(parents=True)
    (other / "checkpoints" / "epoch=9.ckpt").write_bytes(b"weights")
    (other / "config.yaml").write_text("trainer:\n  max_epochs: 10\n")  # a Hydra config, not cory options
    (other / "data.csv").write_text("a,b\n")
    files = tree(other)
    assert not is_run(other)
    for overrides in ({"overwrite": True}, {}, {"resume": True}):
        with pytest.raises((ValueError, FileExistsError, FileNotFoundError)) as err:
            CORYTrainer(tiny_run("lightning", num_iterations=1, **overrides))
        assert "nothing was changed" in str(err.value) or "no run to resume" in str(err.value)
        assert tree(other) == files


def test_a_symlink_to_a_run_is_refused_naming_its_target(finished_run, tmp_path, tiny_run, no_model_load):
    """Before: the link was replaced by a new folder, then rmtree failed."""
    run, files = finished_run
    link = tmp_path / "link"
    link.symlink_to(run)
    with pytest.raises(ValueError, match=f"symbolic link to {run}"):
        CORYTrainer(tiny_run("link", num_iterations=1, overwrite=True))
    assert link.is_symlink() and tree(run) == files


def test_a_new_run_starts_only_in_a_new_or_empty_folder(tmp_path, tiny_run, no_model_load):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("x")
    with pytest.raises(FileExistsError, match="not empty and holds no cory run.*thesis.tex"):
        CORYTrainer(tiny_run("mine", num_iterations=1))
    assert tree(folder) == {"thesis.tex": b"x"}


def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(finished_run, tiny_run, tmp_path,
                                                                         monkeypatch):
    """Before: a new run whose reward raised at its first call had already deleted the old checkpoints."""
    run, files = finished_run
    trainer = CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True))
    aside = [p for p in run.parent.iterdir() if p.name.startswith(".run.replaced-")]
    assert len(aside) == 1 and tree(aside[0]) == files  # kept whole while the new run has no checkpoint

    def broken(*args, **kwargs):
        raise RuntimeError("the reward service is down")

    monkeypatch.setattr(trainer.env, "step_batch", broken, raising=False)
    monkeypatch.setattr(cory_loop, "run_episodes", broken)
    with pytest.raises(RuntimeError, match="reward service"):
        trainer.train()
    assert tree(run) == files and not aside[0].exists()  # the old run is back, unchanged

    trainer = CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True))
    monkeypatch.undo()
    trainer.train()  # the new run's first checkpoint: now the old run goes
    assert [p for p in run.parent.iterdir() if p.name.startswith(".run.replaced-")] == []
    assert (run / RUN_MARKER).is_file() and (run / "checkpoints" / "latest").is_file()


def test_overwrite_stopped_during_the_first_evaluation_gives_the_old_run_back(finished_run, tmp_path, monkeypatch,
                                                                              capsys):
    run, files = finished_run
    monkeypatch.chdir(tmp_path)

    def stop(trainer, when):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "heldout_eval", stop)
    status = cory_main([*TINY, "--output_dir", str(run), "--overwrite", "--eval_episodes", "4"])
    assert status == 130 and tree(run) == files
    assert "the run it was replacing is back" in capsys.readouterr().err


def test_a_stop_before_the_first_checkpoint_resumes_from_the_beginning(tmp_path, monkeypatch, capsys):
    """Before: only config.yaml was left; a rerun said "pass --resume", --resume said "has no checkpoint; drop
    --resume or --overwrite": advice that loops."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    real = job.heldout_eval

    def sigterm(trainer, when):
        os.kill(os.getpid(), signal.SIGTERM)  # a real SIGTERM: before, the process died with 143 and no word
        return real(trainer, when)

    monkeypatch.setattr(job, "heldout_eval", sigterm)
    assert cory_main([*TINY, "--output_dir", str(run), "--eval_episodes", "4"]) == 130
    err = capsys.readouterr().err
    command = f"cory train --config {run / 'config.yaml'} --output_dir {run} --resume"
    assert "before the first checkpoint" in err and command in err
    monkeypatch.undo()
    monkeypatch.chdir(run.parent.parent)  # the printed command works from another folder
    assert cory_main(shlex.split(command)[1:]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0] and (run / "checkpoints" / "latest").is_file()


def test_a_stop_during_the_final_evaluation_says_what_was_kept(tmp_path, monkeypatch, capsys):
    """Before: SIGTERM during the evaluation after training exited 143 with no message and no eval.json."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    real = job.heldout_eval

    def sigterm_after(trainer, when):
        if when == "after":
            os.kill(os.getpid(), signal.SIGTERM)
        return real(trainer, when)

    monkeypatch.setattr(job, "heldout_eval", sigterm_after)
    assert cory_main([*TINY, "--output_dir", str(run), "--eval_episodes", "4"]) == 130
    err = capsys.readouterr().err
    assert "eval.json was not written" in err and f"cory eval {run}" in err and "training is complete" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the command's handler is gone again


def test_a_run_started_with_overwrite_resumes_from_its_config(finished_run, tmp_path, monkeypatch):
    """config.yaml records the run, not the invocation: ``--config run/config.yaml --resume`` of a run started with
    ``--overwrite`` refused "pass either --resume or --overwrite"."""
    run, _ = finished_run
    monkeypatch.chdir(tmp_path)
    assert cory_main([*TINY, "--output_dir", str(run), "--overwrite"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["overwrite"] is False and saved["resume"] is False
    assert cory_main(["train", "--config", str(run / "config.yaml"), "--resume", "--num_iterations", "2"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]


def test_rotation_deletes_only_checkpoint_folders(tiny_run, tmp_path):
    """Checkpoint rotation matched ``iter-*``: a user's copy ``iter-000000-best`` beside the checkpoints was deleted
    as an old checkpoint."""
    trainer = CORYTrainer(tiny_run("rot", num_iterations=1, keep_checkpoints=1))
    trainer.train()
    root = tmp_path / "rot" / "checkpoints"
    best = root / "iter-000000-best"
    best.mkdir()
    (best / "mine.txt").write_text("keep me")
    trainer.save_checkpoint(5)
    assert (best / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("iter-")) == ["iter-000000-best", "iter-000005"]


def test_a_runtime_error_on_two_processes_is_printed_once(tmp_path):
    """Before: under ``--num_processes 2`` a reward failing in both processes printed its error twice, then
    accelerate's ChildFailedError traceback and failure table."""
    import subprocess
    import sys

    (tmp_path / "down_reward.py").write_text(
        "def score(queries, responses):\n"
        "    raise ValueError('the reward service is down; start it, then resume')\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "trainers.cli", "train", "--preset", "tiny", "--num_processes", "2",
                           "--reward", "down_reward:score", "--eval_episodes", "0", "--tensorboard", "false",
                           "--output_dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("the reward service is down") == 1, proc.stderr[-3000:]
    assert "ChildFailedError" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_few_option_like_keys_do_not_make_a_folder_a_run(tmp_path, tiny_run, no_model_load):
    """Found by trying: a config.yaml of another tool with keys that are also cory options (``seed``,
    ``learning_rate``, ``batch_size``) made the folder a run and --overwrite deleted it."""
    other = tmp_path / "h5"
    other.mkdir()
    (other / "config.yaml").write_text("seed: 42\nlearning_rate: 0.001\nbatch_size: 32\n")
    assert not is_run(other)
    with pytest.raises(ValueError, match="is not a cory run"):
        CORYTrainer(tiny_run("h5", num_iterations=1, overwrite=True))
    assert tree(other) == {"config.yaml": b"seed: 42\nlearning_rate: 0.001\nbatch_size: 32\n"}


@pytest.mark.parametrize("inside", ["checkpoints/iter-000000/notes.txt", "checkpoints/iter-000000/llm1/notes.txt"])
def test_user_files_inside_a_checkpoint_are_foreign(finished_run, tiny_run, inside, no_model_load):
    run, files = finished_run
    (run / inside).write_text("precious")
    assert foreign_files(run) == [inside]
    with pytest.raises(ValueError, match="notes.txt"):
        CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True))
    assert (run / inside).read_text() == "precious"


@pytest.mark.parametrize("inside", ["checkpoints/iter-000000", "tensorboard/sub"])
def test_a_new_run_inside_another_runs_checkpoints_is_refused(finished_run, tiny_run, inside, no_model_load):
    """Found by trying: ``--output_dir run/checkpoints/iter-000000`` started a run there, which the outer run's
    rotation and --overwrite then deleted."""
    run, files = finished_run
    with pytest.raises(ValueError, match="is inside the run"):
        CORYTrainer(tiny_run(f"proj/run/{inside}", num_iterations=1))
    assert tree(run) == files


def test_a_stop_while_the_old_run_is_deleted_keeps_the_new_run(finished_run, tiny_run, monkeypatch):
    """Found by trying: a second Ctrl-C while the replaced run was being deleted (after the new run's first
    checkpoint) put the half-deleted old run back and deleted the new run's checkpoint."""
    run, _ = finished_run

    def interrupted(aside):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_state, "discard_replaced", interrupted)
    with CORYTrainer(tiny_run("proj/run", num_iterations=1, overwrite=True)) as trainer:
        with pytest.raises(KeyboardInterrupt):
            trainer.train()
    assert not trainer.replaced_restored and (run / "checkpoints" / "iter-000000" / "trainer_state.json").is_file()


@pytest.mark.parametrize("replace", [False, True])
def test_a_stop_during_start_up_leaves_nothing_behind(finished_run, tiny_run, tmp_path, monkeypatch, replace):
    """Found by trying: a stop after the folder was made and before the run began left a config-only folder (or the
    old run hidden aside) and no word of it."""
    from trainers.distributed import DataParallel

    run, files = finished_run

    def stop(self, params):
        raise KeyboardInterrupt

    monkeypatch.setattr(DataParallel, "broadcast_parameters", stop)
    name = "proj/run" if replace else "fresh"
    with pytest.raises(KeyboardInterrupt):
        CORYTrainer(tiny_run(name, num_iterations=1, overwrite=replace))
    if replace:
        assert tree(run) == files and not [p for p in run.parent.iterdir() if ".replaced-" in p.name]
    else:
        assert not (tmp_path / "fresh").exists()


def test_overwrite_of_an_unnormalised_path_and_a_left_aside_name(finished_run, tiny_run, tmp_path, monkeypatch):
    """Found by trying: ``run/checkpoints/..`` failed after the model loaded (renaming ``..``); a folder left with
    this process's moved-aside name made every overwrite fail with [Errno 39]."""
    run, _ = finished_run
    (run.parent / f".run.replaced-{os.getpid()}").mkdir()
    trainer = CORYTrainer(tiny_run("proj/run/checkpoints/..", num_iterations=1, overwrite=True))
    trainer.train()
    assert (run / RUN_MARKER).is_file() and (run.parent / f".run.replaced-{os.getpid()}").is_dir()
