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
