"""The collapse summary: repetition measured from the kept response texts, read at equal episodes and equal KL."""

from __future__ import annotations

import pytest

from benchmarks import collapse


def _point(episodes, kl, responses, distinct_2):
    return {"episodes": episodes, "reward": 0.1 * episodes / 400, "kl_k1": kl, "distinct_2": distinct_2,
            "responses": responses, "samples": [{"response": responses[0]}]}


def _run(arm, seed, points):
    return {"arm": arm, "seed": seed, "curve": points}


def test_repetition_is_read_from_the_responses_at_equal_episodes_and_equal_kl():
    fluent = ["a fine film", "the plot moves well", "good acting here", "it ends"]
    stuck = ["love love love", "love love love", "love love love", "love it"]
    runs = [_run("ppo-4x", 0, [_point(0, 0.0, fluent, 0.9), _point(400, 8.0, stuck, 0.3)]),
            _run("cory-4x", 0, [_point(0, 0.0, fluent, 0.9), _point(400, 4.0, fluent, 0.9)])]
    summary = collapse.summarise(runs, episodes=(400,), levels=(4.0,))
    assert set(summary) == {"cory", "ppo"}  # the -Nx suffix dropped
    ppo = summary["ppo"]["at_episodes"]
    assert ppo["seq_rep_2"]["400"]["iqm"] == pytest.approx(3 * 0.5 / 4)  # three responses repeat 1 of 2 bigrams
    assert ppo["top_opening"]["400"]["iqm"] == 0.75 and ppo["distinct_2"]["400"]["iqm"] == 0.3
    # at KL 4 ppo is halfway from its first point to its second: values interpolated there
    assert summary["ppo"]["at_kl"]["distinct_2"]["4.0"]["iqm"] == pytest.approx(0.6)
    assert summary["cory"]["at_kl"]["seq_rep_2"]["4.0"]["iqm"] == 0.0
    assert summary["cory"]["samples"] == {0: [{"response": "a fine film"}]}


def test_a_point_without_texts_is_refused():
    with pytest.raises(ValueError, match="keeps no response texts"):
        collapse.degeneration({"episodes": 400, "reward": 0.5})


def test_a_seed_that_never_reaches_a_kl_level_is_left_out_of_that_cell():
    texts = ["a b c", "d e f"]
    runs = [_run("ppo-4x", s, [_point(0, 0.0, texts, 0.9), _point(400, kl, texts, 0.8)]) for s, kl in ((0, 2.0),
                                                                                                      (1, 6.0))]
    cell = collapse.summarise(runs, episodes=(400,), levels=(4.0,))["ppo"]["at_kl"]["distinct_2"]["4.0"]
    assert cell["n"] == 1


def _curve(rewards, kls):
    texts = ["a b c", "d e f"]
    return [{**_point(100 * i, kl, texts, 0.9), "reward": r} for i, (r, kl) in enumerate(zip(rewards, kls))]


def test_gain_kept_is_the_share_of_the_best_gain_so_far():
    kept = collapse.gain_kept(_curve([0.2, 0.25, 0.6, 0.4, 0.7, 0.2], [0, 1, 2, 3, 4, 5]))
    assert kept[:2] == [None, None]  # best gain 0.05 < MIN_GAIN: nothing learnt yet
    assert kept[2:] == pytest.approx([1.0, 0.5, 1.0, 0.0])  # 0.4 keeps half of 0.4; 0.7 a new best; back to base


def test_a_run_diverges_where_it_loses_most_of_its_gain_and_the_summary_says_where():
    diverging = _curve([0.15, 0.5, 0.9, 0.8, 0.4, 0.16], [0, 4, 10, 20, 40, 78])
    steady = _curve([0.15, 0.5, 0.6, 0.5, 0.6, 0.55], [0, 4, 8, 10, 12, 14])
    assert collapse.divergence(steady) is None
    assert collapse.divergence(diverging) == {"episodes": 500, "reward": 0.16, "peak_reward": 0.9, "kl_k1": 78,
                                              "kl_k1_before": 40}  # 0.4 keeps 1/3 of 0.75: not yet
    summary = collapse.summarise([_run("ppo-4x", 0, diverging), _run("cory-4x", 1, steady)], episodes=(500,),
                                 levels=(4.0,))
    assert summary["ppo"]["diverged"][0]["episodes"] == 500 and summary["cory"]["diverged"] == {1: None}
    assert summary["ppo"]["at_episodes"]["gain_kept"]["500"]["iqm"] == pytest.approx(0.01 / 0.75)
    rows = collapse.divergence_table(summary).splitlines()
    assert rows[2] == "| cory | 1 | no | — | — |"
    assert rows[3] == "| ppo | 0 | 500 | 0.900 → 0.160 | 40.0 → 78.0 |"
    assert collapse.report(summary).endswith(collapse.divergence_table(summary))


def test_p_of_improvement_is_over_each_arms_seeds_in_a_cell():
    texts = ["a b c", "d e f"]

    def run(arm, seed, distinct, kl):
        return _run(arm, seed, [_point(0, 0.0, texts, 0.95), _point(400, kl, texts, distinct)])

    runs = [run("cory-4x", 0, 0.9, 8.0), run("cory-4x", 1, 0.8, 8.0), run("ppo-4x", 0, 0.7, 8.0),
            run("ppo-4x", 1, 0.85, 2.0)]  # ppo seed 1 never reaches KL 4
    summary = collapse.summarise(runs, episodes=(400,), levels=(4.0,))
    cells = collapse.improvements(summary, metric="distinct_2")
    # at 400 episodes: cory (0.9, 0.8) vs ppo (0.7, 0.85): pairs won 0.9>0.7, 0.9>0.85, 0.8>0.7 -> 3 of 4
    assert cells["at_episodes"]["400"]["p"] == pytest.approx(0.75)
    # at KL 4 ppo's seed 1 is left out: cory (0.9, 0.8) vs ppo's seed 0 (0.7 there): every pair won
    assert cells["at_kl"]["4.0"]["p"] == 1.0 and cells["at_kl"]["4.0"]["seeds"] == [[0, 1], [0]]
    shown = collapse.improvement_table(summary, metrics=("distinct_2",)).splitlines()
    assert shown[2].startswith("| distinct_2 | 0.75 [") and shown[-1] == "| distinct_2 | 1.00 |"


def test_the_same_arm_and_seed_twice_is_refused(tmp_path, capsys):
    import json

    texts = ["a b c", "d e f"]
    run = _run("ppo-4x", 0, [_point(0, 0.0, texts, 0.9), _point(400, 4.0, texts, 0.8)])
    with pytest.raises(ValueError, match=r"ppo seed 0 is given twice \(ppo-4x and ppo-4x\)"):
        collapse.summarise([run, run], episodes=(400,), levels=(4.0,))
    with pytest.raises(ValueError, match=r"ppo seed 0 is given twice \(ppo-4x and ppo-2x\)"):  # one arm, suffix dropped
        collapse.summarise([run, {**run, "arm": "ppo-2x"}], episodes=(400,), levels=(4.0,))
    path = tmp_path / "ppo-4x-s0.json"
    path.write_text(json.dumps({"runs": [run]}), encoding="utf-8")
    with pytest.raises(SystemExit) as stop:  # the command line: the same file twice
        collapse.main([str(path), str(path), "--out", str(tmp_path / "c.json")])
    assert stop.value.code == 2 and "given twice" in capsys.readouterr().err and not (tmp_path / "c.json").exists()


def test_runs_without_response_texts_are_refused(tmp_path, capsys):
    import json

    bare = _run("ppo-4x", 0, [{"episodes": 0, "reward": 0.1, "kl_k1": 0.0}, {"episodes": 400, "reward": 0.5,
                                                                             "kl_k1": 4.0}])
    with pytest.raises(ValueError, match="ppo-4x seed 0 keeps no response texts at any point"):
        collapse.summarise([bare], episodes=(400,), levels=(4.0,))
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"runs": [bare]}), encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        collapse.main([str(path), "--out", str(tmp_path / "c.json")])
    assert stop.value.code == 2 and "keeps no response texts" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()
