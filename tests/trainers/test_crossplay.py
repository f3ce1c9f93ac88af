"""`cory crossplay`: the self-play / cross-play summary on a hand-made matrix, the command on two tiny runs (every
ordered pair of distinct models, the JSON and the heatmap), and the refusal of runs of another game."""

from __future__ import annotations

import json
import logging
import re

import pytest

from trainers.cli import main
from trainers.evaluation.crossplay import group_summary, parse_groups, to_marl_eval
from trainers.loop.cory import CORYTrainer


def _pair(a, b, reward):
    return {"pioneer": a, "observer": b, "line_up": [a, b], "collective_reward": reward}


def test_self_play_cross_play_and_the_gap_on_a_hand_made_matrix():
    run_of = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    pairs = [_pair(x, y, 2.0 if run_of[x] == run_of[y] else 1.0) for x in run_of for y in run_of if x != y]
    out = group_summary(pairs, run_of, {"first": ["A"], "second": ["B"]})
    assert out["first"]["self_play"]["values"] == [2.0] and out["first"]["cross_play"]["values"] == [1.0, 1.0]
    assert out["first"]["gap"] == 1.0
    improvement = out["p_improvement_cross_play"]
    assert improvement["first > second"]["p"] == improvement["second > first"]["p"] == 0.5
    lo, hi = improvement["first > second"]["ci"]
    assert lo <= 0.5 <= hi
    assert out["first"]["cross_play"]["why"].startswith("two values")  # n = 2: the interval is the range


def test_line_ups_of_runs_of_one_origin_are_neither_self_play_nor_cross_play():
    """Runs of one seed and base model (one origin) never met, but started alike: their line-ups are counted apart
    (same-origin), not as cross-play, which holds partners of another origin only."""
    run_of = {f"{r}{i}": r for r in "ABC" for i in (1, 2)}
    origin_of = {"A": "o1", "B": "o1", "C": "o2"}
    reward = {frozenset("A"): 4.0, frozenset("B"): 4.0, frozenset("C"): 4.0, frozenset("AB"): 3.0,
              frozenset("AC"): 1.0, frozenset("BC"): 1.0}
    pairs = [_pair(x, y, reward[frozenset(run_of[x] + run_of[y])]) for x in run_of for y in run_of if x != y]
    out = group_summary(pairs, run_of, {"g": ["A", "B", "C"]}, origin_of)
    assert out["g"]["cross_play"]["values"] == [1.0] * 6 and out["g"]["same_origin"]["values"] == [3.0] * 4
    assert out["g"]["self_play"]["values"] == [4.0] * 3 and out["g"]["gap"] == 3.0
    assert group_summary(pairs, run_of, {"g": ["A", "B", "C"]})["g"]["cross_play"]["values"] == [2.0] * 4 + [1.0] * 2


def _hand_made_result():
    """Two groups of two runs (seeds 0 and 1) of two models each; self-play 2, cross-play 1 (pair) or 1.5 (pop)."""
    run_of = {f"{g}{s}:{m}": f"{g}{s}" for g in ("pair", "pop") for s in (0, 1) for m in ("llm1", "llm2")}
    pairs = [_pair(x, y, 2.0 if run_of[x] == run_of[y] else 1.5 if "pop" in x and "pop" in y else 1.0)
             for x in run_of for y in run_of if x != y]
    groups = {"pair": ["pair0", "pair1"], "pop": ["pop0", "pop1"]}
    meta = {run: {"seed": int(run[-1]), "queries": 64, "origin": run} for run in set(run_of.values())}
    return {"task": "relay", "run_of": run_of, "pairs": pairs, "run_meta": meta,
            "groups": group_summary(pairs, run_of, groups)}


def _seed_disjoint():
    """`_hand_made_result` with the pop group on seeds 6 (pop0) and 5 (pop1): no seed shared with the pair's."""
    result = _hand_made_result()
    for run, seed in (("pop0", 6), ("pop1", 5)):
        result["run_meta"][run]["seed"] = seed
    return result


def test_the_marl_eval_export_holds_each_groups_runs_by_seed_in_the_pairs_order():
    raw = to_marl_eval(_hand_made_result())
    algorithms = raw["cory_relay"]["crossplay"]
    assert list(algorithms) == ["pair", "pop"] and set(algorithms["pop"]) == {"seed_0", "seed_1"}
    run = algorithms["pop"]["seed_1"]
    assert run["step_0"] == run["absolute_metrics"] and run["step_0"]["step_count"] == 64
    assert run["step_0"]["self_play_return"] == [2.0, 2.0]  # llm1 -> llm2 and llm2 -> llm1
    # 2 models x 6 models of other runs x 2 seats, in the pairs' order (pioneers in model order): pair0's and
    # pair1's models as pioneers first (1.0), then pop0's (1.5)
    assert sorted(run["step_0"]["return"]) == [1.0] * 16 + [1.5] * 8
    assert run["step_0"]["return"][:12] == [1.0] * 8 + [1.5] * 4
    result = _hand_made_result()
    result["run_meta"]["pop1"]["seed"] = 0
    with pytest.raises(ValueError, match=r"the groups have \{'pair': \[0, 1\], 'pop': \[0, 0\]\}"):
        to_marl_eval(result)
    result = _seed_disjoint()  # pop on seeds 6 and 5: its runs are the group's runs in seed order
    pop = to_marl_eval(result)["cory_relay"]["crossplay"]["pop"]
    assert list(pop) == ["seed_0", "seed_1"] and pop == {"seed_0": algorithms["pop"]["seed_1"],
                                                         "seed_1": algorithms["pop"]["seed_0"]}
    result["run_meta"]["pop1"]["seed"] = 5
    result["groups"]["pop"]["runs"] = ["pop0"]
    with pytest.raises(ValueError, match="groups of as many runs"):
        to_marl_eval(result)
    from trainers.evaluation.crossplay import check_marl_eval_groups

    with pytest.raises(ValueError, match="needs models of two runs or more"):
        check_marl_eval_groups({"all": ["r"]}, {"r": 0})


def test_marl_evals_own_checks_accept_the_crossplay_export():
    """Read by marl-eval itself (``pip install --no-deps id-marl-eval==0.0.4``, as for the ladder's export), with
    seed-disjoint groups: its checks pass, and its probability of improvement ranks the population's cross-play above the pair's."""
    pytest.importorskip("colorama")
    pytest.importorskip("marl_eval")
    import copy

    from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
    from marl_eval.utils.diagnose_data_errors import DiagnoseData

    raw = to_marl_eval(_seed_disjoint())  # marl-eval looks the pop runs up by the pair's keys (issue #60.2)
    assert all(DiagnoseData(copy.deepcopy(raw)).check_data()["cory_relay"].values())
    processed = data_process_pipeline(copy.deepcopy(raw), metrics_to_normalize=[])
    matrices, _ = create_matrices_for_rliable(processed, "cory_relay", [])
    assert matrices["mean_self_play_return"]["pop"].tolist() == [[2.0], [2.0]]
    assert matrices["mean_return"]["pop"].mean() > matrices["mean_return"]["pair"].mean()


def test_outputs_are_checked_before_any_model_loads_and_never_replace_a_users_file(tmp_path):
    from trainers.cli.crossplay import output_paths

    mine = tmp_path / "mine.png"
    mine.write_text("the user's")
    with pytest.raises(FileExistsError, match="mine.png"):  # the heatmap beside --out mine.json
        output_paths(str(tmp_path / "mine.json"), None, replace=False)
    with pytest.raises(ValueError, match="the heatmap beside --out .* is also --out"):
        output_paths(str(tmp_path / "res.png"), None, replace=True)
    with pytest.raises(ValueError, match="--marl_eval .*o.json is also --out"):
        output_paths(str(tmp_path / "o.json"), str(tmp_path / "o.json"), replace=True)
    with pytest.raises(NotADirectoryError):
        output_paths(str(tmp_path / "x.json"), str(mine / "x.json"), replace=False)
    (tmp_path / "outdir").mkdir()
    with pytest.raises(IsADirectoryError):
        output_paths(str(tmp_path / "outdir"), None, replace=True)
    with pytest.raises(ValueError, match="--out '' names no file"):
        output_paths("", None, replace=False)
    assert mine.read_text() == "the user's"
    assert output_paths(str(tmp_path / "mine.json"), str(tmp_path / "me.json"), replace=True) == (
        tmp_path / "mine.json", mine, tmp_path / "me.json")


def test_groups_name_given_runs_once():
    with pytest.raises(ValueError, match="names 'a' twice"):
        parse_groups(["a=r1", "a=r2"], ["r1", "r2"])
    with pytest.raises(ValueError, match="needs a name and at least one run"):
        parse_groups(["a=", "b=r1"], ["r1"])
    for name in ("a,b", "p_improvement_cross_play"):
        with pytest.raises(ValueError, match=f"--groups name '{name}' is invalid"):
            parse_groups([f"{name}=r1"], ["r1"])
    assert parse_groups(None, ["r1", "r2"]) == {"all": ["r1", "r2"]}
    with pytest.raises(ValueError, match="is in two groups"):
        parse_groups(["a=r1", "b=r1"], ["r1"])
    with pytest.raises(ValueError, match="is not one of the runs given"):
        parse_groups(["a=r9"], ["r1"])


def test_crossplay_plays_every_ordered_pair_of_two_runs(tiny_run, tmp_path, capsys, caplog):
    runs = []
    for seed in (0, 1):
        trainer = CORYTrainer(tiny_run(f"s{seed}", task="relay", context_len=12, batch_size=8, mini_batch_size=4,
                                       heldout_fraction=0.5, num_iterations=1, seed=seed))
        trainer.train()
        runs.append(str(trainer.output_dir))
    out = tmp_path / "cp" / "crossplay.json"
    with caplog.at_level(logging.INFO):
        assert main(["crossplay", *runs, "--episodes", "8", "--out", str(out), "--groups", f"x={runs[0]}",
                     f"y={runs[1]}", "--log_every_seconds", "0"]) == 0
    printed = capsys.readouterr().out
    # the console: each group's IQM with its interval (n = 2: the range, said so) and P(A > B) with its interval
    assert re.search(r"x: self-play [\d.]+ \(n=1\); cross-play [\d.]+ \[[\d.]+, [\d.]+\] \(n=2, \[min, max\]\)",
                     printed), printed
    assert re.search(r"P\(x > y\) on cross-play: [\d.]+ \[[\d.]+, [\d.]+\]", printed), printed
    assert re.search(r"line-up 12/12 \(100%\), .* ETA 0s: collective reward", caplog.text)  # the progress line
    result = json.loads(out.read_text())
    assert len(result["pairs"]) == 4 * 3 and out.with_suffix(".png").exists()
    assert {(p["pioneer"], p["observer"]) for p in result["pairs"]} == \
        {(a, b) for a in result["models"] for b in result["models"] if a != b}
    assert {"influence", "copy_rate", "pioneer_kl", "observer_kl"} <= set(result["pairs"][0])
    assert result["groups"]["x"]["self_play"]["n"] == 1 and result["groups"]["x"]["cross_play"]["n"] == 2
    assert main(["crossplay", *runs, "--episodes", "8", "--out", str(out)]) == 2  # no --overwrite
    assert "already exists; nothing was changed. Pass --overwrite" in capsys.readouterr().err
    meta = result["run_meta"][runs[1]]
    assert result["task"] == "relay" and (meta["seed"], meta["queries"], meta["iterations"]) == (1, 8, 1)
    assert meta["origin"] != result["run_meta"][runs[0]]["origin"]  # seeds 0 and 1: other origins, so cross-play
    assert result["heldout"]["query_split"] == "test"  # the held-out side the pairs played on, not the training side
    assert result["matrix"][0][0] is None and len(result["matrix"]) == 4
    # marl-eval reads seed-disjoint groups: x (seed 0) and y (seed 1), one run each
    other, exported = tmp_path / "cp2" / "crossplay.json", tmp_path / "cp2" / "marl_eval.json"
    assert main(["crossplay", *runs, "--episodes", "8", "--out", str(other), "--marl_eval", str(exported),
                 "--groups", f"x={runs[0]}", f"y={runs[1]}"]) == 0
    assert set(json.loads(exported.read_text())["cory_relay"]["crossplay"]) == {"x", "y"}
    exported.unlink()
    # one run given twice (its run folder and one of its checkpoint folders) is refused before anything is written
    checkpoint = tmp_path / "s0" / "checkpoints" / "iter-000000"
    assert main(["crossplay", runs[0], str(checkpoint), "--out", str(tmp_path / "cp3" / "x.json")]) == 2
    assert "are one run (run id" in capsys.readouterr().err and not (tmp_path / "cp3").exists()
    assert main(["crossplay", *runs, "--episodes", "8", "--out", str(other), "--marl_eval", str(exported),
                 "--overwrite"]) == 0
    runs_of_all = json.loads(exported.read_text())["cory_relay"]["crossplay"]["all"]
    assert set(runs_of_all) == {"seed_0", "seed_1"} and runs_of_all["seed_0"]["step_0"]["step_count"] == 8
    assert len(runs_of_all["seed_0"]["step_0"]["return"]) == 8  # 2 models x 2 partners x 2 seats


def test_runs_of_another_game_are_refused_and_each_seat_samples_with_its_settings(tiny_run, tmp_path, capsys,
                                                                                   monkeypatch):
    runs = []
    for name, options in (("relay", {"task": "relay"}), ("tiny_vocab", {"task": "tiny_vocab"}),
                          ("hot", {"task": "relay", "seat_generation": ["observer.temperature=2"]})):
        trainer = CORYTrainer(tiny_run(name, context_len=12, batch_size=4, num_iterations=1, **options))
        trainer.train()
        runs.append(str(trainer.output_dir))
    # a seat that sampled otherwise played another game: its numbers would not compare
    assert main(["crossplay", runs[0], runs[2], "--out", str(tmp_path / "x.json")]) == 2
    assert "seat_generation=" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    # the runs' own per-seat settings are applied: whoever sits in the observer seat samples at temperature 2
    from agents.policy import LLMAgent

    seen, act_batch = [], LLMAgent.act_batch

    def spy(self, obs, generator=None, *, sampling=None):
        seen.append((self.adapter_name or id(self), sampling.temperature))
        return act_batch(self, obs, generator, sampling=sampling)

    monkeypatch.setattr(LLMAgent, "act_batch", spy)
    assert main(["crossplay", runs[2], "--episodes", "2", "--out", str(tmp_path / "hot.json")]) == 0
    result = json.loads((tmp_path / "hot.json").read_text())
    assert result["played"]["seat_generation"] == {"observer": {"temperature": 2.0}}  # what was played, recorded
    temperatures = [t for _, t in dict.fromkeys(seen)]  # each (model, temperature) once, in order of first use
    assert sorted(temperatures) == [1.0, 1.0, 2.0, 2.0]  # both models sat in both seats, each seat at its own
    assert main(["crossplay", *runs, "--out", str(tmp_path / "x.json")]) == 2
    assert "played another game than" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    assert main(["crossplay", runs[0], str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.json")]) == 2
    assert "nowhere' does not exist" in capsys.readouterr().err


def test_the_help_shows_each_options_default(capsys):
    with pytest.raises(SystemExit):
        main(["crossplay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "held-out queries per line-up (default: 64)" in text and "(default: crossplay.json)" in text


def test_runs_of_one_folder_name_under_different_parents_keep_apart():
    from trainers.evaluation.crossplay import run_labels

    assert run_labels(["runs/pair/s0", "runs/pop/s0"]) == {"runs/pair/s0": "pair/s0", "runs/pop/s0": "pop/s0"}
    with pytest.raises(ValueError, match="given twice"):
        run_labels(["runs/a", "runs/./a"])
