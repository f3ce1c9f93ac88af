"""`cory eval` never loses what the user owns and never presents something else as the run's own evaluation:
``--out`` may not name a run's file, a folder, or an existing file without ``--overwrite`` (refused before any model
loads); a run whose query data changed is refused (or, with ``--data_path``, evaluated with a warning and both
fingerprints recorded); a held-out evaluation of one distinct query writes its numbers, the standard error "n/a"
with the reason, said before it starts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trainers.cli import main as cory_main
from trainers.evaluation.episodes import gain_summary
from trainers.loop.cory import CORYTrainer

REVIEW = "a long and winding film with many twists, some of them earned and most of them not, " * 3


def _reviews(path: Path, tag: str = "") -> Path:
    path.write_text("".join(json.dumps({"text": f"Review {i}{tag}: {REVIEW}"}) + "\n" for i in range(20)))
    return path


def _train(tiny_run, name: str, **overrides) -> Path:
    configs = tiny_run(name, num_iterations=1, **overrides)
    CORYTrainer(configs).train()
    return Path(configs.run.output_dir)


def test_eval_out_never_replaces_a_runs_file_a_folder_or_an_existing_file(tiny_run, tmp_path, capsys,
                                                                          monkeypatch):
    run = _train(tiny_run, "run", log_samples=2)
    other = tmp_path / "mine.json"
    other.write_text("mine")
    (tmp_path / "afolder").mkdir()
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    def no_model(*args, **kwargs):
        raise AssertionError("--out must be checked before any model loads")

    with monkeypatch.context() as patch:
        patch.setattr("trainers.cli.eval.load_target", no_model)
        for out in (run / "config.yaml", run / "metrics.jsonl", run / "samples.jsonl", run / "eval.json",
                    run / "checkpoints" / "x.json", tmp_path / "afolder", other):
            assert cory_main(["eval", str(run), "--episodes", "2", "--out", str(out)]) == 2, out
            err = capsys.readouterr().err
            assert err.startswith("cory eval: error: --out ") and err.count("\n") == 1, err
        assert cory_main(["eval", str(run), "--out", str(run / "config.yaml"), "--overwrite"]) == 2  # never
    assert "a run's own files are never replaced" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files  # nothing written, no .tmp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afolder", "mine.json", "run"]
    assert list((tmp_path / "afolder").iterdir()) == [] and other.read_text() == "mine"
    assert cory_main(["eval", str(run), "--episodes", "2", "--out", str(other), "--overwrite"]) == 0
    assert json.loads(other.read_text())["after"]["num_queries"] == 2
    assert cory_main(["eval", str(run), "--episodes", "2"]) == 0  # the default file: a rerun replaces it
    assert cory_main(["eval", str(run), "--episodes", "2"]) == 0
    assert len(list(run.glob("eval-llm*-iter-000000.json"))) == 1 and not list(run.glob("*.tmp*"))


def test_eval_refuses_a_run_whose_query_data_changed_and_records_its_source(tiny_run, tmp_path, capsys, caplog):
    data = _reviews(tmp_path / "reviews.jsonl")
    run = _train(tiny_run, "data", data_path=str(data), heldout_fraction=0.2)
    out = tmp_path / "same.json"
    assert cory_main(["eval", str(run), "--episodes", "2", "--out", str(out)]) == 0
    same = json.loads(out.read_text())["data"]
    assert same["data_path"] == str(data) and same["same_as_run"] is True
    assert same["fingerprint"] == same["run_fingerprint"]

    _reviews(data, tag=" (edited)")  # the same file name, other queries
    capsys.readouterr()
    assert cory_main(["eval", str(run), "--episodes", "2", "--out", str(tmp_path / "changed.json")]) == 2
    err = capsys.readouterr().err
    assert "its query data changed since the run trained" in err and "--data_path" in err
    assert not (tmp_path / "changed.json").exists()

    with caplog.at_level(logging.WARNING):
        assert cory_main(["eval", str(run), "--episodes", "2", "--data_path", str(data), "--out",
                          str(tmp_path / "other.json")]) == 0
    assert "holds other queries than the run trained on" in caplog.text
    other = json.loads((tmp_path / "other.json").read_text())["data"]
    assert other["same_as_run"] is False and other["run_fingerprint"] == same["run_fingerprint"]
    assert other["fingerprint"] != same["fingerprint"]


def test_one_distinct_query_keeps_the_finished_evaluation(tmp_path, capsys, caplog):
    """--eval_episodes 1: training ends, eval.json holds the numbers with gain_sem null and the reason, the line
    says "s.e. n/a"; `cory eval` says so before it evaluates and writes its file too."""
    run = tmp_path / "one"
    argv = ["train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "1", "--heldout_fraction",
            "0.2", "--eval_episodes", "1", "--torch_threads", "1", "--tensorboard", "false"]
    assert cory_main(argv) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "s.e. n/a: 1 episode of 1 distinct query" in line
    result = json.loads((run / "eval.json").read_text())
    assert result["gain_sem"] is None and "at least 2 distinct queries" in result["gain_sem_note"]
    assert result["gain"] == pytest.approx(result["after"]["reward"] - result["before"]["reward"])
    assert result["data"]["fingerprint"] and "data_path" in result["data"]

    with caplog.at_level(logging.WARNING):
        assert cory_main(["eval", str(run)]) == 0
    assert "the held-out gain will have no standard error" in caplog.text
    (written,) = run.glob("eval-llm*-iter-*.json")
    assert json.loads(written.read_text())["gain_sem"] is None
    assert "s.e. n/a" in capsys.readouterr().out


def test_gain_summary_of_one_query_and_the_start_time_warning():
    from trainers.evaluation.episodes import heldout_sem_warning

    one = {"rewards": [0.0, 0.0], "query_keys": ["a", "a"], "combined_reward": 0.0}
    out = gain_summary(one, {**one, "rewards": [1.0, 2.0]})
    assert (out["gain"], out["gain_sem"], out["distinct_queries"]) == (1.5, None, 1)
    assert out["gain_sem_note"] == ("2 episodes of 1 distinct query; a standard error clustered by query needs at "
                                    "least 2 distinct queries")
    two = gain_summary({**one, "query_keys": ["a", "b"]}, {**one, "query_keys": ["a", "b"], "rewards": [1.0, 2.0]})
    assert two["gain_sem"] == pytest.approx(0.5) and two["gain_sem_note"] is None

    class Env:  # what heldout_sem_warning reads of a held-out env
        def __init__(self, records):
            self.task = type("Task", (), {"records": [{"query": str(i)} for i in range(records)]})()
            self.config = type("Config", (), {"query_split": "test"})()

    assert "--eval_episodes" in heldout_sem_warning(Env(50), 1)
    assert "holds 1 record" in heldout_sem_warning(Env(1), 8)
    assert heldout_sem_warning(Env(50), 8) is None


def test_a_task_brings_its_own_evaluation_callable(tiny_run, tmp_path, capsys, registries):
    """`TaskSpec.evaluation` may be the task's own callable: `cory eval` hands it the trained model (an
    `EvalTarget`) and the options, and reports the file it returns; a name that is no built-in evaluation is
    refused when the spec is made."""
    import dataclasses

    from cory_env.tasks import TASKS, register_task, task_spec
    from cory_env.tasks.base import TaskSpec
    from trainers.loop.evaluate import EvalTarget

    seen = []

    def my_evaluation(target, args):
        seen.append((type(target), target.model_name, target.checkpoint is not None, args.episodes))
        out = tmp_path / "mine-eval.json"
        out.write_text(json.dumps({"model": target.model_name}))
        return out

    register_task("own-eval", dataclasses.replace(task_spec("imdb"), evaluation=my_evaluation))
    run = _train(tiny_run, "run", task="own-eval")
    assert cory_main(["eval", str(run), "--episodes", "3"]) == 0
    assert seen == [(EvalTarget, "llm2", True, 3)]  # the pioneer now (one role exchange after iteration 1)
    assert f"wrote {tmp_path / 'mine-eval.json'}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="TaskSpec.evaluation must be one of .* or a callable"):
        dataclasses.replace(TASKS.get("imdb"), evaluation="bleu")
    assert isinstance(TASKS.get("imdb"), TaskSpec)


def test_cory_eval_defaults_to_the_model_the_runs_own_evaluation_followed(tmp_path, capsys):
    """A model per slot: the run's held-out evaluations follow llm1 (eval.json's ``model``, the checkpoint's
    ``evaluated``) also after an odd number of role exchanges, when llm2 sits in the pioneer seat. Before, `cory eval
    RUN` took the pioneer seat's model (llm2): another model than eval.json's, presented as the run's evaluation."""
    run = tmp_path / "slots"
    assert cory_main(["train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "1",
                      "--role_exchange_period", "1", "--models", "llm2=tiny-bpe", "--heldout_fraction", "0.2",
                      "--eval_episodes", "4", "--torch_threads", "1", "--tensorboard", "false"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["cory/role_exchange"] == 1.0  # llm2 is in the pioneer seat now
    ran = json.loads((run / "eval.json").read_text())
    capsys.readouterr()
    assert cory_main(["eval", str(run)]) == 0
    printed = capsys.readouterr().out
    (written,) = run.glob("eval-*.json")
    result = json.loads(written.read_text())
    assert (written.name, result["model_name"], ran["model"]) == ("eval-llm1-iter-000000.json", "llm1", "llm1")
    assert result["after"]["rewards"] == ran["after"]["rewards"] and result["gain"] == ran["gain"]
    line = next(line for line in printed.splitlines() if "in the pioneer seat" in line)
    assert line.startswith("llm1 in the pioneer seat")
    state = json.loads(next(run.glob("checkpoints/iter-*/trainer_state.json")).read_text())
    assert state["evaluated"] == "llm1"
    # an empty --model_name is refused in one line, not read as "the default"
    assert cory_main(["eval", str(run), "--model_name", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cory eval: error: --model_name '' names no model") and err.count("\n") == 1
