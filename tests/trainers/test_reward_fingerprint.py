"""A reward's fingerprint follows what it computes: a docstring, a comment or the layout may change (an older run
still resumes), a constant, an operation or a module constant it reads may not; checkpoints that recorded the hash
of the whole source text still match."""

from __future__ import annotations

import importlib.util
import inspect
import itertools

import pytest

from cory_env.rewards import make_reward_fn
from cory_env.tasks import tiny_vocab
from trainers.loop.checkpoint import CheckpointError
from trainers.loop.fingerprint import check_fingerprints, reward_fingerprint

_count = itertools.count()


def _load(tmp_path, source: str):
    """The module `source`, written to a file of its own (so that Python can read the functions' source)."""
    name = f"reward_variant_{next(_count)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ORIGINAL = inspect.getsource(tiny_vocab)
REWARD = inspect.getsource(tiny_vocab.tiny_vocab_reward)
DOCSTRING = REWARD[REWARD.index('"""'):REWARD.index('"""', REWARD.index('"""') + 3) + 3]

#: Edits of cory_env/tasks/tiny_vocab.py that keep what `tiny_vocab_reward` computes.
SAME = {
    "docstring": (DOCSTRING, '"""The share of the query\'s symbols the response names (reworded)."""'),
    "comment": ("    out = []\n", "    out = []  # one score per row\n"),
    "layout": ("        out.append(len(named & allowed) / ANSWER_LEN)\n",
               "        out.append(\n            len(named & allowed) / ANSWER_LEN\n        )\n"),
}
#: Edits that change it.
OTHER = {
    "a constant": ('(record or {}).get("partner_response", "")', '(record or {}).get("partner_answer", "")'),
    "an operation": ("len(named & allowed) / ANSWER_LEN", "len(named | allowed) / ANSWER_LEN"),
    "a module constant it reads": ("\nANSWER_LEN = ", "\nANSWER_LEN = 1 + "),
}


def _fingerprint(tmp_path, old: str = "", new: str = ""):
    assert not old or ORIGINAL.count(old) == 1, old
    module = _load(tmp_path, ORIGINAL.replace(old, new) if old else ORIGINAL)
    return reward_fingerprint(module.tiny_vocab_reward, "tiny_vocab")


@pytest.mark.parametrize("edit", sorted(SAME))
def test_an_edit_that_computes_the_same_keeps_the_fingerprint(tmp_path, edit):
    assert _fingerprint(tmp_path, *SAME[edit]) == _fingerprint(tmp_path)


@pytest.mark.parametrize("edit", sorted(OTHER))
def test_an_edit_of_what_it_computes_changes_the_fingerprint(tmp_path, edit):
    before, after = _fingerprint(tmp_path), _fingerprint(tmp_path, *OTHER[edit])
    assert after != before
    with pytest.raises(CheckpointError, match=r"reward \(the reward function"):
        check_fingerprints({"reward": before}, {"reward": after}, "ckpt")


def test_the_name_still_counts_and_a_function_without_source_is_its_name():
    fn = tiny_vocab.tiny_vocab_reward
    assert reward_fingerprint(fn, "a") != reward_fingerprint(fn, "b")
    assert reward_fingerprint(len, "a") == reward_fingerprint(len, "a") != reward_fingerprint(len, "b")


PAIR = '''
SCALE = 10


def length(queries, responses):
    """Longer answers score higher: the number of words, over SCALE."""
    return [len(response.split()) / SCALE for response in responses]
'''


def _pair_fingerprint(tmp_path, old: str = "", new: str = ""):
    """The fingerprint of the 2-argument reward `PAIR` (edited) as a run sees it: normalised by make_reward_fn."""
    return reward_fingerprint(make_reward_fn(_load(tmp_path, PAIR.replace(old, new)).length), "mypkg:length")


def test_a_two_argument_reward_is_fingerprinted_by_its_own_code(tmp_path):
    """make_reward_fn wraps a (queries, responses) reward; the wrapper's code is the same for every such reward."""
    first = _pair_fingerprint(tmp_path)
    assert _pair_fingerprint(tmp_path, "Longer answers score higher", "More words, more reward") == first
    assert _pair_fingerprint(tmp_path, "/ SCALE", "// SCALE") != first
    assert _pair_fingerprint(tmp_path, "SCALE = 10", "SCALE = 5") != first
