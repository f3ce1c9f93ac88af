"""Task rewards by name and callable, the checked reward call, and the collective reward."""

from __future__ import annotations

import numpy as np
import pytest

from cory_env.rewards import REWARD_CONTRACT, RewardFunctionError, collective_reward, make_reward_fn, score_texts
from cory_env.tasks.imdb_rewards import DistilbertImdbReward, VaderReward


def test_collective_reward_hand_computed():
    r1, r2 = np.array([1.0, -0.5]), np.array([0.25, 2.0])
    out = collective_reward(r1, r2)
    np.testing.assert_array_equal(out["pioneer"], [1.25, 1.5])
    np.testing.assert_array_equal(out["observer"], out["pioneer"])
    out = collective_reward(r1, r2, coef=-1.0)
    np.testing.assert_array_equal(out["pioneer"], [0.75, -2.5])
    np.testing.assert_array_equal(out["observer"], [-0.75, 2.5])
    out = collective_reward(r1, r2, coef=0.0)
    np.testing.assert_array_equal(out["pioneer"], r1)
    assert out["pioneer"].dtype == np.float64 and out["pioneer"] is not r1
    with pytest.raises(ValueError, match="same shape"):
        collective_reward(r1, r2[:1])


def test_collective_reward_computes_in_float64_and_rejects_a_non_finite_coef():
    # float32 rewards (e.g. from a torch reward model) are widened first: the sums are float64 sums of the float32
    # values, not float32 sums rounded afterwards
    r1, r2 = np.array([0.1, 0.7], dtype=np.float32), np.array([0.3, 0.2], dtype=np.float32)
    w1, w2 = r1.astype(np.float64), r2.astype(np.float64)
    out = collective_reward(r1, r2, coef=0.3)
    assert out["pioneer"].dtype == np.float64 and out["observer"].dtype == np.float64
    np.testing.assert_array_equal(out["pioneer"], w1 + 0.3 * w2)
    np.testing.assert_array_equal(out["observer"], w2 + 0.3 * w1)
    assert not np.array_equal(out["observer"], (r2 + np.float32(0.3) * r1).astype(np.float64))  # the test can tell
    with pytest.raises(ValueError, match="^coef=nan is invalid: use a finite number"):
        collective_reward(r1, r2, coef=float("nan"))


def test_vader_scores_query_plus_response():
    vader = make_reward_fn("vader")
    assert isinstance(vader, VaderReward)
    good, bad, neutral = vader(["This movie", "This movie", "This movie"], [" is wonderful", " is awful", " is"], [])
    assert good > 0.3 and bad < -0.3 and neutral == 0.0
    assert -1.0 <= bad < good <= 1.0
    # neutral responses after opinionated queries: scored on the response alone they would all be 0.0
    queries = ["I loved this film, it was wonderful.", "This movie was terrible."]
    scores = vader(queries, [" The end.", " I went home."], [{}, {}])
    assert scores == pytest.approx([0.8225, -0.4767], abs=1e-4)  # VADER compound of the whole texts, by hand
    assert vader([""], [" The end."], [{}]) == [0.0]


def test_vader_gain_subtracts_the_query_score():
    gain = make_reward_fn("vader-gain")
    vader = make_reward_fn("vader")
    queries, responses = ["I loved this film, it was wonderful.", "This movie"], [" The end.", " is wonderful"]
    expected = [v - q for v, q in zip(vader(queries, responses, [{}, {}]), vader(queries, ["", ""], [{}, {}]))]
    assert gain(queries, responses, [{}, {}]) == pytest.approx(expected) and expected[0] == 0.0 and expected[1] > 0.3


def test_distilbert_reward_is_lazy():
    reward = make_reward_fn("distilbert-imdb")
    assert isinstance(reward, DistilbertImdbReward) and reward._pipe is None  # nothing loaded yet
    assert (reward.model, reward.batch_size, reward.device) == ("lvwerra/distilbert-imdb", 16, None)  # the paper's


def test_callables_of_two_and_three_arguments():
    two = make_reward_fn(lambda q, r: [len(x) for x in r])
    three = make_reward_fn(lambda q, r, rec: [rec_i["w"] for rec_i in rec])
    assert two(["a"], ["bcd"], [{}]) == [3]
    assert three(["a"], ["b"], [{"w": 7.0}]) == [7.0]
    with pytest.raises(TypeError, match=r"<lambda>\(q\) takes neither \(queries, responses\) nor"):
        make_reward_fn(lambda q: q)
    with pytest.raises(ValueError, match="unknown reward 'sentiment'"):
        make_reward_fn("sentiment")
    with pytest.raises(TypeError, match="a name or a callable"):
        make_reward_fn(3)


_NAMES = "['vader', 'vader-gain', 'distilbert-imdb']"


@pytest.mark.parametrize(("spec", "error", "message"), [
    ("sentiment", ValueError, "unknown reward 'sentiment'; known rewards: vader, vader-gain, distilbert-imdb; or give "
                              "an importable module:attr, or install a package that registers it under the entry "
                              "point group 'cory.rewards'"),
    ("<callable f from m, not importable by name>", ValueError,
     "reward '<callable f from m, not importable by name>' records a callable that cannot be rebuilt by name; pass "
     f"the callable itself (reward_fn=...), a name in {_NAMES} or an importable 'module:function'"),
    (3, TypeError, "reward must be a name or a callable, got int: 3"),
    (None, TypeError, "reward must be a name or a callable, got NoneType: None"),
])
def test_reward_spec_errors_name_the_input_and_every_accepted_form(spec, error, message):
    import re

    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        make_reward_fn(spec)


def test_a_callable_of_one_argument_is_refused_with_the_two_forms():
    import re

    def one(queries):
        return queries

    with pytest.raises(TypeError, match=r"^reward tests\.cory_env\.test_rewards:test_a_callable_of_one_argument_is_"
                                        r"refused_with_the_two_forms\.<locals>\.one\(queries\) takes neither "
                                        r"\(queries, responses\) nor \(queries, responses, records\); "
                                        + re.escape(REWARD_CONTRACT) + "$"):
        make_reward_fn(one)


def test_score_texts_checks_outputs():
    ok = score_texts(lambda q, r, rec: [1, 2], "t", ["a", "b"], ["c", "d"], [{}, {}])
    assert ok.dtype == np.float64 and ok.tolist() == [1.0, 2.0]
    with pytest.raises(RewardFunctionError, match="task 't': the reward function returned 3 values for 2 texts"):
        score_texts(lambda q, r, rec: [1, 2, 3], "t", ["a", "b"], ["c", "d"], [{}, {}])
    with pytest.raises(RewardFunctionError, match=r"^task 't': the reward function returned list \['x', 'y'\], not a "
                                                  r"sequence of numbers \(item 0 is str 'x'\); a reward is called as "
                                                  r".*\(reward tests\.cory_env\.test_rewards:.*<lambda>\)$"):
        score_texts(lambda q, r, rec: ["x", "y"], "t", ["a", "b"], ["c", "d"], [{}, {}])
    with pytest.raises(RewardFunctionError, match="returned nan for the text 'bd'"):
        score_texts(lambda q, r, rec: [1, float("nan")], "t", ["a", "b"], ["c", "d"], [{}, {}])

    def numeric(queries, responses, records):
        return [float(r) for r in responses]

    with pytest.raises(RewardFunctionError, match="raised ValueError.*offending text: 'bd'"):
        score_texts(numeric, "t", ["a", "b"], ["1", "d"], [{}, {}])

    def batch_only_failure(queries, responses, records):
        if len(queries) > 1:
            raise RuntimeError("batch too big")
        return [0.0]

    with pytest.raises(RewardFunctionError, match="batch too big.*offending text: 'a1 \\| b2'"):
        score_texts(batch_only_failure, "t", ["a", "b"], ["1", "2"], [{}, {}])

    def record_failure(queries, responses, records):
        return [1.0 / rec["weight"] for rec in records]  # a record without weight fails

    with pytest.raises(RewardFunctionError, match="raised KeyError.*offending text: 'b2'"):
        score_texts(record_failure, "t", ["a", "b"], ["1", "2"], [{"weight": 2}, {}])


def test_score_texts_takes_numpy_arrays_and_column_vectors():
    # numpy >= 2 arrays carry a string ``device`` ("cpu"), not a torch.device: still CPU numbers
    arr = score_texts(lambda q, r, rec: np.array([0.5, 2.0], dtype=np.float32), "t", ["a", "b"], ["c", "d"],
                      [{}, {}])
    assert arr.dtype == np.float64 and arr.shape == (2,) and arr.tolist() == [0.5, 2.0]
    # an (N, 1) column (a classifier's one-logit output) is one value per text
    col = score_texts(lambda q, r, rec: [[1.0], [3.0]], "t", ["a", "b"], ["c", "d"], [{}, {}])
    assert col.shape == (2,) and col.tolist() == [1.0, 3.0]


def test_a_wrong_count_names_the_first_text_also_for_one_text():
    with pytest.raises(RewardFunctionError, match=r"^task 't': the reward function returned 2 values for 1 texts "
                                                  r"\(first text: 'qr'\); it must return one float per \(query, "
                                                  r"response\) pair \(reward .*<lambda>\)$"):
        score_texts(lambda q, r, rec: [1.0, 2.0], "t", ["q"], ["r"], [{}])


def test_a_reward_from_the_main_script_is_not_recorded_by_name(monkeypatch):
    """``python my_script.py`` runs as ``__main__``: "__main__:score" imports back to it inside the script, but
    names another module (or nothing) in ``cory eval`` or a resumed run."""
    import sys

    from cory_env.rewards import reward_name

    def score(queries, responses):
        return [0.0] * len(queries)

    score.__module__, score.__qualname__ = "__main__", "score"
    monkeypatch.setattr(sys.modules["__main__"], "score", score, raising=False)  # as a script defines it
    assert reward_name(score) == "<callable score from __main__, not importable by name>"


def test_reward_by_module_function_name_and_what_a_run_records():
    """An importable callable round-trips through its recorded 'module:function' name."""
    from cory_env.rewards import make_reward_fn, reward_name

    name = reward_name(collective_reward)
    assert name == "cory_env.rewards:collective_reward" and make_reward_fn("operator:add")([3.0], [4.0], [{}]) == [3.0, 4.0]
    lam = reward_name(lambda q, r: [0.0] * len(q))
    assert lam.startswith("<callable") and "<lambda>" in lam
    with pytest.raises(ValueError, match="cannot be rebuilt by name"):
        make_reward_fn(lam)
    with pytest.raises(ValueError, match="module 'no_such_module_xyz' does not import"):
        make_reward_fn("no_such_module_xyz:score")
    with pytest.raises(ValueError, match="reward 'math:pi' is a float, not a RewardSpec"):
        make_reward_fn("math:pi")


class _Scorer:
    @staticmethod
    def score(queries, responses):
        return [float(len(r)) for r in responses]


def test_reward_names_of_nested_callables_instances_and_the_errors():
    from cory_env.rewards import make_reward_fn, reward_name

    name = reward_name(_Scorer.score)  # a dotted qualified name imports back attribute by attribute
    assert name == "tests.cory_env.test_rewards:_Scorer.score"
    assert make_reward_fn(name)(["a"], ["bcd"], [{}]) == [3.0]
    # an instance has no __qualname__: its class names it, with its module
    assert reward_name(VaderReward()) == \
        "<callable VaderReward from cory_env.tasks.imdb_rewards, not importable by name>"
    with pytest.raises(ValueError, match="does not import \\(ModuleNotFoundError: "):
        make_reward_fn("no_such_module_xyz:score")
    with pytest.raises(ValueError, match="is a float, not a RewardSpec"):
        make_reward_fn("math:pi")


def test_distilbert_reward_reads_the_raw_positive_logit_of_query_plus_response(monkeypatch, caplog):
    """The paper's reward through a stand-in pipeline (no model download): one lazy build with the model, device;
    every call scores ``query + response`` with raw logits (no softmax) and keeps the POSITIVE label's score."""
    import transformers.pipelines

    built, calls = [], []

    def fake_pipeline(task, model, device):
        built.append((task, model, device))

        def pipe(texts, top_k, function_to_apply, batch_size):
            calls.append((list(texts), top_k, function_to_apply, batch_size))
            # labels in either order and case, as classifiers name them
            return [[{"label": "NEGATIVE", "score": -float(len(t))}, {"label": "positive", "score": float(len(t))}]
                    for t in texts]
        return pipe

    # `from transformers import pipeline` resolves through transformers' lazy module to this attribute
    monkeypatch.setattr(transformers.pipelines, "pipeline", fake_pipeline)
    reward = DistilbertImdbReward("some/classifier", batch_size=3, device="cpu")
    with caplog.at_level("INFO", logger="cory_env.tasks.imdb_rewards"):
        assert reward(["ab", "c"], ["d", "efg"]) == [3.0, 4.0]
    assert [r.getMessage() for r in caplog.records] == ["loading sentiment reward model some/classifier"]
    assert reward(["x"], ["y"]) == [2.0]
    assert built == [("sentiment-analysis", "some/classifier", "cpu")]  # built once, on the first call
    assert calls[0] == (["abd", "cefg"], None, "none", 3)


@pytest.mark.parametrize(("scores", "message"), [
    (["1.0", "2.0"], "not a sequence of numbers"),
    ([1e308, 0.0], r"rewards must be finite numbers of magnitude at most 1e\+12"),
])
def test_reward_values_are_numbers_of_bounded_size(scores, message):
    with pytest.raises(RewardFunctionError, match=message):
        score_texts(lambda q, r, rec: scores, "t", ["a", "b"], ["c", "d"], [{}, {}])
