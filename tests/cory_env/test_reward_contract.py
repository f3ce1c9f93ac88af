"""The reward contract: a reward is called as ``reward(queries, responses)`` or ``reward(queries, responses,
records)`` and returns one finite number per (query, response) pair, in order. Anything else is refused at the first
call in one line naming the task, the reward, what it returned and the contract (never flattened, read by key or
reported as NaN); a callable that cannot be called so is refused when the reward is resolved, so ``cory train``
stops in one line, exit 2, before any folder exists."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from cory_env.rewards import (REWARD_CONTRACT, RewardFunctionError, RewardSignatureError, make_reward_fn,
                              score_texts)
from trainers.cli import main as cory_main

QUERIES, RESPONSES, RECORDS = ["a", "b", "c", "d"], ["1", "2", "3", "4"], [{}, {}, {}, {}]


def _score(returned):
    def reward(queries, responses):
        return returned

    return score_texts(make_reward_fn(reward), "t", QUERIES, RESPONSES, RECORDS)


@pytest.mark.parametrize(("returned", "what"), [
    ([[0.1, 0.2], [0.3, 0.4]], r"list \[\[0\.1, 0\.2\], \[0\.3, 0\.4\]\], not a sequence of numbers \(item 0 is list "
                               r"\[0\.1, 0\.2\], one number per pair, not a row of 2\)"),
    (np.array([[0.1, 0.2], [0.3, 0.4]]), r"ndarray array\(\[\[0\.1, 0\.2\], \[0\.3, 0\.4\]\]\), not a sequence of "
                                         r"numbers \(item 0 is list \[0\.1, 0\.2\], one number per pair, not a row "
                                         r"of 2\)"),
    (torch.ones(2, 2), r"Tensor tensor\(\[\[1\., 1\.\], \[1\., 1\.\]\]\), not a sequence of numbers \(item 0 is list"),
    ({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5}, r"dict \{0: 0\.5, 1: 0\.5, 2: 0\.5, 3: 0\.5\}, not a sequence of numbers \(a "
                                       r"mapping: its keys are not the pairs' rewards\)"),
    ([None, 1.0, 1.0, 1.0], r"list \[None, 1\.0, 1\.0, 1\.0\], not a sequence of numbers \(item 0 is NoneType None\)"),
    ([0.5, "1", 0.5, 0.5], r"list \[0\.5, '1', 0\.5, 0\.5\], not a sequence of numbers \(item 1 is str '1'\)"),
    ({0.5, 1.0, 1.5, 2.0}, r"set \{.*\}, not a sequence of numbers \(unordered\)"),
    ("0.5", r"str '0\.5', not a sequence of numbers \(not a sequence\)"),
    (np.float64(0.5), r"float64 np\.float64\(0\.5\), not a sequence of numbers \(not a sequence\)"),
    (np.array(0.5), r"ndarray array\(0\.5\), not a sequence of numbers \(a single number\)"),
    ([1j, 0.0, 0.0, 0.0], r"list \[1j, 0\.0, 0\.0, 0\.0\], not a sequence of numbers \(item 0 is complex 1j\)"),
])
def test_a_reward_of_the_wrong_shape_or_kind_is_refused_naming_it(returned, what):
    with pytest.raises(RewardFunctionError) as info:
        _score(returned)
    message = str(info.value)
    assert message.count("\n") == 0
    assert re.match(rf"task 't': the reward function returned {what}", message), message
    assert message.endswith(f"; {REWARD_CONTRACT} (reward tests.cory_env.test_reward_contract:_score.<locals>."
                            "reward)")


@pytest.mark.parametrize("returned", [
    [0.0, 1.0, 2.0, 3.0], (False, 1, 2.0, np.float32(3.0)), np.arange(4.0), torch.arange(4.0),
    np.arange(4.0).reshape(4, 1), [[0.0], [1.0], [2.0], [3.0]], [torch.tensor(x) for x in (0.0, 1.0, 2.0, 3.0)],
])
def test_one_number_per_pair_in_any_flat_form_is_accepted(returned):
    scores = _score(returned)
    assert scores.dtype == np.float64 and scores.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_rows_of_n_over_two_pairs_are_never_spread_over_the_texts():
    """N/2 pairs are N numbers, but not the N texts' rewards: refused even though the count would match."""
    with pytest.raises(RewardFunctionError, match="one number per pair, not a row of 2"):
        _score([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RewardFunctionError, match="returned 2 values for 4 texts"):  # a flat wrong count as before
        _score([1.0, 2.0])


def _one(queries):
    return [0.0] * len(queries)


def _four(queries, responses, records, extra):
    return [0.0] * len(queries)


def _keyword(queries, responses, *, scale):
    return [scale] * len(queries)


@pytest.mark.parametrize(("fn", "signature"), [(_one, "(queries)"), (_four, "(queries, responses, records, extra)"),
                                               (_keyword, "(queries, responses, *, scale)")])
def test_a_reward_that_cannot_be_called_so_is_refused_when_resolved(fn, signature):
    with pytest.raises(RewardSignatureError) as info:
        make_reward_fn(fn)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)  # cory: one line, exit 2
    assert str(info.value) == (f"reward tests.cory_env.test_reward_contract:{fn.__name__}{signature} takes neither "
                               f"(queries, responses) nor (queries, responses, records); {REWARD_CONTRACT}")


class _Scorer:
    def __call__(self, queries, responses):
        return [float(len(r)) for r in responses]


@pytest.mark.parametrize(("fn", "expected"), [
    (lambda q, r: [1.0] * len(q), [1.0, 1.0]),
    (lambda q, r, rec: [rec_i["w"] for rec_i in rec], [2.0, 3.0]),
    (lambda q, r, records=None: [float(records is not None)] * len(q), [1.0, 1.0]),  # the built-ins' form
    (lambda q, r, rec, extra=5.0: [extra] * len(q), [5.0, 5.0]),
    (lambda *args: [float(len(args))] * len(args[0]), [3.0, 3.0]),
    (_Scorer(), [1.0, 2.0]),
])
def test_the_accepted_signatures_and_how_each_is_called(fn, expected):
    reward = make_reward_fn(fn)
    assert make_reward_fn(reward) is reward  # normalising twice (Task rebuilt by dataclasses.replace) is a no-op
    assert score_texts(reward, "t", ["q", "q"], ["a", "bb"], [{"w": 2.0}, {"w": 3.0}]).tolist() == expected


def test_cory_train_refuses_a_reward_of_the_wrong_signature_before_any_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_rewards.py").write_text("def one(queries):\n    return [0.0] * len(queries)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    assert cory_main(["train", "--preset", "tiny", "--reward", "my_rewards:one", "--output_dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (f"cory train: error: reward my_rewards:one(queries) takes neither (queries, responses) nor "
                   f"(queries, responses, records); {REWARD_CONTRACT}\n")
    assert not run.exists()
