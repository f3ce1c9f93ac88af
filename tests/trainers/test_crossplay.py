"""`cory crossplay`: the self-play / cross-play summary on a hand-made matrix, the command on two tiny runs (every
ordered pair of distinct models, the JSON and the heatmap), and the refusal of runs of another game."""

from __future__ import annotations

import json

import pytest

from trainers.cli import main
from trainers.cli.crossplay import group_summary, parse_groups
from trainers.loop.cory import CORYTrainer


def _pair(a, b, reward):
    return {"pioneer": a, "observer": b, "collective_reward": reward}


def test_self_play_cross_play_and_the_gap_on_a_hand_made_matrix():
    run_of = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    pairs = [_pair(x, y, 2.0 if run_of[x] == run_of[y] else 1.0) for x in run_of for y in run_of if x != y]
    out = group_summary(pairs, run_of, {"first": ["A"], "second": ["B"]})
    assert out["first"]["self_play"]["values"] == [2.0] and out["first"]["cross_play"]["values"] == [1.0, 1.0]
    assert out["first"]["gap"] == 1.0
    assert out["p_improvement_cross_play"] == {"first > second": 0.5, "second > first": 0.5}


def test_groups_name_given_runs_once():
    assert parse_groups(None, ["r1", "r2"]) == {"all": ["r1", "r2"]}
    with pytest.raises(ValueError, match="is in two groups"):
        parse_groups(["a=r1", "b=r1"], ["r1"])
    with pytest.raises(ValueError, match="is not one of the runs given"):
        parse_groups(["a=r9"], ["r1"])


def test_crossplay_plays_every_ordered_pair_of_two_runs(tiny_run, tmp_path, capsys):
    runs = []
    for seed in (0, 1):
        trainer = CORYTrainer(tiny_run(f"s{seed}", task="relay", context_len=12, batch_size=8, mini_batch_size=4,
                                       num_iterations=1, seed=seed))
        trainer.train()
        runs.append(str(trainer.output_dir))
    out = tmp_path / "cp" / "crossplay.json"
    assert main(["crossplay", *runs, "--episodes", "8", "--out", str(out), "--groups", f"x={runs[0]}",
                 f"y={runs[1]}"]) == 0
    result = json.loads(out.read_text())
    assert len(result["pairs"]) == 4 * 3 and out.with_suffix(".png").exists()
    assert {(p["pioneer"], p["observer"]) for p in result["pairs"]} == \
        {(a, b) for a in result["models"] for b in result["models"] if a != b}
    assert {"influence", "copy_rate", "pioneer_kl", "observer_kl"} <= set(result["pairs"][0])
    assert result["groups"]["x"]["self_play"]["n"] == 1 and result["groups"]["x"]["cross_play"]["n"] == 2
    assert main(["crossplay", *runs, "--episodes", "8", "--out", str(out)]) == 2  # no --overwrite
    assert "exists; pass --overwrite" in capsys.readouterr().err


def test_runs_of_another_game_are_refused(tiny_run, tmp_path, capsys):
    runs = []
    for task in ("relay", "tiny_vocab"):
        trainer = CORYTrainer(tiny_run(task, task=task, context_len=12, batch_size=4, num_iterations=1))
        trainer.train()
        runs.append(str(trainer.output_dir))
    assert main(["crossplay", *runs, "--out", str(tmp_path / "x.json")]) == 2
    assert "is another game than" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_runs_of_one_folder_name_under_different_parents_keep_apart():
    from trainers.cli.crossplay import run_labels

    assert run_labels(["runs/pair/s0", "runs/pop/s0"]) == {"runs/pair/s0": "pair/s0", "runs/pop/s0": "pop/s0"}
    with pytest.raises(ValueError, match="given twice"):
        run_labels(["runs/a", "runs/./a"])
