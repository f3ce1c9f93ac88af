"""Every bad input named in the issue raises a clear error naming the problem and the fix."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from cory_env import BatchedCORYEnv, EnvConfig, Task, env, raw_env
from cory_env.tasks.imdb import IMDBOptions
from cory_env.gym_env import PioneerEnv
from cory_env.rewards import RewardFunctionError

from .conftest import char_count_reward


@pytest.fixture()
def aec(tiny_tok):
    e = raw_env(tokenizer=tiny_tok, reward_fn=char_count_reward, min_new_tokens=2, max_new_tokens=2)
    e.reset(seed=0)
    return e


@pytest.mark.parametrize("action", [-1, 384, 10_000, np.int64(384)])
def test_action_outside_vocabulary(aec, action):
    with pytest.raises(ValueError, match=r"seat 'pioneer': action -?\d+ is outside the vocabulary \[0, 384\)"):
        aec.step(action)


@pytest.mark.parametrize("action", [1.0, "5", True, None, np.array([1, 2])])
def test_non_integer_action(aec, action):
    with pytest.raises(TypeError, match="seat 'pioneer': action must be an integer token id"):
        aec.step(action)


def test_numpy_integer_actions_are_accepted(aec):
    aec.step(np.int32(5))
    aec.step(np.array(6))
    assert aec.agent_selection == "observer"


def test_wrapped_env_rejects_out_of_bounds_actions(tiny_tok):
    wrapped = env(tokenizer=tiny_tok)
    wrapped.reset(seed=0)
    with pytest.raises(AssertionError, match="action is not in action space"):
        wrapped.step(384)


def test_step_before_reset(tiny_tok):
    with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\)"):
        raw_env(tokenizer=tiny_tok).step(1)
    with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\)"):
        BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2).step(np.ones(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="before reset"):
        raw_env(tokenizer=tiny_tok).observe("pioneer")


def test_action_for_a_finished_seat(aec):
    for action in (5, 6, 7, 8):
        aec.step(action)
    assert aec.terminations["pioneer"] and aec.agent_selection == "pioneer"
    with pytest.raises(ValueError, match="seat 'pioneer' has finished its episode; step it with None, got 3"):
        aec.step(3)
    aec.step(None)
    aec.step(None)
    with pytest.raises(RuntimeError, match="call reset"):
        aec.step(None)


def test_batched_bad_actions(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=3)
    benv.reset(seed=0)
    with pytest.raises(ValueError, match=r"seat 'pioneer': action 999 in row 1 is outside the vocabulary"):
        benv.step(np.array([1, 999, 2]))
    with pytest.raises(TypeError, match="integer token ids, got dtype float64"):
        benv.step(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"shape \(B,\) = \(3,\), got \(2,\)"):
        benv.step(np.array([1, 2]))
    with pytest.raises(ValueError, match="got 2 queries for batch_size=3"):
        benv.reset(options={"queries": ["a", "b"]})


def test_batched_actions_accept_exactly_the_vocabulary_and_name_the_first_bad_row(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=3, min_new_tokens=4, max_new_tokens=4)
    benv.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 384 in row 2 is outside the vocabulary \[0, 384\)"):
        benv.step(np.array([5, 6, 384]))  # V itself is not a token id
    with pytest.raises(ValueError, match=r"action -1 in row 1 is outside"):
        benv.step(np.array([0, -1, 6]))  # 0 is a token id (EOS here); -1 is the first bad one
    benv.step(np.array([7, 383, 6]))  # both ends of [0, V) are accepted


def test_masked_actions_check_the_last_token_and_ignore_finished_rows(tiny_tok):
    mask = np.ones(len(tiny_tok), dtype=np.int8)
    mask[382] = 0  # the last token (383) stays allowed, the one before it is banned
    task = Task(name="t", records=[{"query": "Hi"}], reward_fn=char_count_reward,
                observer_template="{query}{response}", action_mask=mask, min_new_tokens=4, max_new_tokens=4)
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, task=task)
    benv.reset(seed=0)
    benv.step(np.array([383, 383]))
    benv.step(np.array([tiny_tok.eos_token_id, 7]))  # row 0 ends at EOS
    benv.step(np.array([999, 7]))  # a finished row's action is ignored, even outside the vocabulary
    with pytest.raises(ValueError, match="^seat 'pioneer': action 382 in row 1 is banned by the task's action_mask; "
                                         "sample from the allowed tokens$"):
        benv.step(np.array([5, 382]))


def test_stepping_a_finished_batch_says_so(tiny_tok):
    from cory_env.episode import EpisodeBatch

    batch = EpisodeBatch.from_config(EnvConfig(min_new_tokens=1, max_new_tokens=1), tiny_tok, batch_size=2,
                                     reward_fn=char_count_reward)
    with pytest.raises(RuntimeError, match=r"^step\(\) before reset\(\)$"):
        batch.step(np.array([5, 6]))
    batch.reset(seed=0)
    batch.step(np.array([5, 6]))  # the pioneer's one token
    batch.step(np.array([5, 6]))  # the observer's one token: done
    with pytest.raises(RuntimeError, match=r"^the episode is done; call reset\(\) to start a new one$"):
        batch.step(np.array([5, 6]))


@pytest.mark.parametrize(("group_size", "message"), [
    (3, "4 rows (batch_size) do not split into groups of group_size=3; pass a group_size that divides the env's "
        "batch_size"),
    *[(bad, f"group_size={bad!r} is invalid: use {what}; pass a group_size that divides the env's batch_size")
      for bad, what in ((0, "an integer >= 1"), (True, "an integer (got bool)"), (2.0, "an integer (got float)"))]])
def test_group_size_must_be_a_positive_int_dividing_the_batch(tiny_tok, group_size, message):
    """The one group rule (`cory_env.checks.check_groups`), at the env's input."""
    from cory_env.episode import EpisodeBatch

    batch = EpisodeBatch.from_config(EnvConfig(), tiny_tok, batch_size=4, reward_fn=char_count_reward)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        batch.reset(seed=0, group_size=group_size)
    batch.reset(seed=0, group_size=2)  # 2 divides 4


def test_banned_token(tiny_tok):
    mask = np.ones(len(tiny_tok), dtype=np.int8)
    mask[5] = 0
    task = Task(name="t", records=[{"query": "Hi"}], reward_fn=char_count_reward,
                observer_template="{query}{response}", action_mask=mask)
    aec = raw_env(tokenizer=tiny_tok, task=task)
    aec.reset(seed=0)
    assert aec.observe("pioneer")["action_mask"][5] == 0
    with pytest.raises(ValueError, match="action 5 is banned by the task's action_mask"):
        aec.step(5)
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, task=task)
    benv.reset(seed=0)
    with pytest.raises(ValueError, match="action 5 in row 0 is banned"):
        benv.step(np.array([5, 6]))


def test_long_query_truncated_from_the_left_with_a_warning(tiny_tok, caplog):
    aec = raw_env(tokenizer=tiny_tok, context_len=64, max_new_tokens=4, min_new_tokens=4)
    budget = aec._episode.query_budget
    query = list(range(1, budget + 11))
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        aec.reset(seed=0, options={"query": query})
    assert [r.getMessage() for r in caplog.records] == [
        f"query of {budget + 10} tokens truncated from the left to {budget} to fit context_len=64; raise "
        "--context_len (or lower max_new_tokens) to keep it whole"]
    assert aec._episode.query_ids[0] == query[10:]
    obs = aec.observe("pioneer")
    assert obs["input_ids"][-budget:].tolist() == query[10:]


def test_long_query_raises_without_truncation(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, context_len=64, max_new_tokens=4, min_new_tokens=4, truncate_query=False)
    with pytest.raises(ValueError, match="does not fit context_len=64.*set truncate_query=True"):
        aec.reset(seed=0, options={"query": "word " * 100})


@pytest.mark.parametrize("query", ["", []])
def test_empty_query(tiny_tok, query):
    aec = raw_env(tokenizer=tiny_tok)
    with pytest.raises(ValueError, match="empty query"):
        aec.reset(seed=0, options={"query": query})


def test_bad_query_types(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 384\)"):
        aec.reset(options={"query": [1, 500]})
    with pytest.raises(TypeError, match="text or a sequence of token ids"):
        aec.reset(options={"query": 3.5})
    with pytest.raises(ValueError, match="seed='1' is invalid: use an integer"):
        aec.reset(seed="1")


def test_token_id_queries_accept_exactly_the_vocabulary(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok)
    aec.reset(seed=0, options={"query": [0, 383]})  # both ends of [0, V) are token ids
    assert aec._episode.query_ids[0] == [0, 383]
    with pytest.raises(ValueError, match=r"^query token ids \[384, 385, 386, 387, 388\] are outside the vocabulary "
                                         r"\[0, 384\) of the queries' tokenizer"):  # the first five of six bad ids
        aec.reset(options={"query": [5, 384, 385, 386, 387, 388, 389]})
    for not_ids in ([True, 2], [1.5, 2]):  # bools and floats are not token ids
        with pytest.raises(TypeError, match=r"^a query must be text or a sequence of token ids, got list: "):
            aec.reset(options={"query": not_ids})
    with pytest.raises(TypeError, match=r"^a query must be text or a sequence of token ids, got float: 3.5$"):
        aec.reset(options={"query": 3.5})


def test_a_cut_is_clean_where_the_text_itself_holds_a_replacement_character(tiny_tok):
    from cory_env.episode import _clean_cut

    ids = tiny_tok.encode("ab\ufffd", add_special_tokens=False)
    assert _clean_cut(tiny_tok, ids, "ab\ufffd", end=True)  # the text's own U+FFFD, not a cut character
    ids = tiny_tok.encode("\ufffdab", add_special_tokens=False)
    assert _clean_cut(tiny_tok, ids, "\ufffdab", end=False)
    e_acute = tiny_tok.encode("\u00e9", add_special_tokens=False)  # 2 bytes: 2 byte-level tokens
    assert len(e_acute) == 2 and not _clean_cut(tiny_tok, e_acute[:1], "\u00e9", end=True)
    assert not _clean_cut(tiny_tok, e_acute[1:], "\u00e9", end=False)


def test_empty_record_query(tiny_tok):
    with pytest.raises(ValueError, match="^task 'blank': record 1 is not a dict with a non-empty 'query' text: "):
        Task(name="blank", records=[{"query": "fine"}, {"query": ""}], reward_fn=char_count_reward,
             observer_template="{query}{response}")


def test_a_record_that_encodes_to_no_token_is_refused_when_the_env_is_built(tiny_tok):
    """An empty query was found when first drawn (iteration 5 of a run, all work lost)."""
    import copy

    from tokenizers import normalizers

    tok = copy.deepcopy(tiny_tok)
    tok.backend_tokenizer.normalizer = normalizers.Replace("~", "")  # "~~~" encodes to nothing
    records = [{"query": "a fine film"}] * 5 + [{"query": "~~~"}]
    task = Task(name="blank", records=records, reward_fn=char_count_reward, observer_template="{query}{response}")
    with pytest.raises(ValueError, match="^task 'blank': record 5 has an empty query '~~~' \\(no token\\); drop "
                                         "empty rows from the data$"):
        raw_env(tokenizer=tok, task=task)


def _finish(aec):
    """Pioneer writes "xy", observer "ab" (2 tokens each)."""
    tok = aec.tokenizer
    for letter in "xyab":
        aec.step(tok.convert_tokens_to_ids(letter))


def test_reward_function_that_raises(tiny_tok):
    def picky(queries, responses):
        if any("y" in r for r in responses):
            raise KeyError("no")
        return [0.0] * len(queries)

    aec = raw_env(tokenizer=tiny_tok, reward_fn=picky, min_new_tokens=2, max_new_tokens=2)
    aec.reset(seed=0, options={"query": "Fine"})
    with pytest.raises(RewardFunctionError, match=r"task 'imdb': the reward function raised KeyError.*"
                                                  r"offending text: 'Finexy'") as info:
        _finish(aec)
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_reward_function_non_finite(tiny_tok, value):
    aec = raw_env(tokenizer=tiny_tok, reward_fn=lambda q, r: [1.0, value], min_new_tokens=2, max_new_tokens=2)
    aec.reset(seed=0, options={"query": "Fine"})
    with pytest.raises(RewardFunctionError, match=rf"task 'imdb': the reward function returned {value} for the "
                                                  r"text 'Fineab'"):
        _finish(aec)


def test_reward_function_wrong_count(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, reward_fn=lambda q, r: [1.0], min_new_tokens=2, max_new_tokens=2)
    aec.reset(seed=0, options={"query": "Fine"})
    with pytest.raises(RewardFunctionError, match="task 'imdb': the reward function returned 1 values for 2 texts"):
        _finish(aec)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"observer_template": "no placeholders"}, r"observer_template 'no placeholders' lacks the placeholder\(s\) "
                                               r"\{query\}, \{response\}"),
    ({"observer_template": "{response} only"}, r"lacks the placeholder\(s\) \{query\}"),
    ({"observer_template": "{query} only"}, r"lacks the placeholder\(s\) \{response\}"),
    ({"pioneer_template": "Review:"}, r"pioneer_template 'Review:' lacks the placeholder\(s\) \{query\}"),
    ({"observer_template": "{query}{response}{answer}"}, r"uses the placeholder \{answer\}"),
    ({"max_new_tokens": 0}, "^max_new_tokens=0 is invalid: use an integer >= 4; at least min_new_tokens=4"),
    ({"max_new_tokens": -3}, "^max_new_tokens=-3 is invalid: use an integer >= 4"),
    ({"context_len": 30}, r"context_len=30 is too small.*raise context_len to >= \d+"),
    ({"bogus": 1}, r"unknown env argument\(s\) \['bogus'\]"),
])
def test_bad_construction_arguments(tiny_tok, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        raw_env(tokenizer=tiny_tok, **kwargs)


def test_context_len_error_names_the_required_length(tiny_tok):
    with pytest.raises(ValueError, match=r"needs (\d+) tokens") as info:
        raw_env(tokenizer=tiny_tok, context_len=40)
    need = int(info.value.args[0].split("needs ")[1].split(" ")[0])
    raw_env(tokenizer=tiny_tok, context_len=need)  # exactly enough is fine
    with pytest.raises(ValueError):
        raw_env(tokenizer=tiny_tok, context_len=need - 1)


class _BadEosTokenizer:
    eos_token_id = 1000
    pad_token_id = 0

    def __len__(self) -> int:
        return 384


def test_tokenizer_eos_outside_vocabulary():
    with pytest.raises(ValueError, match=r"tokenizer EOS id 1000 is outside the vocabulary \[0, 384\)"):
        raw_env(tokenizer=_BadEosTokenizer())
    with pytest.raises(ValueError, match="needs a tokenizer"):
        raw_env()


def test_render_mode_must_be_ansi(tiny_tok):
    from cory_env.config import RenderModeError

    for make in (lambda: raw_env(tokenizer=tiny_tok, render_mode="human"),
                 lambda: PioneerEnv(tokenizer=tiny_tok, render_mode="rgb_array")):
        with pytest.raises(ValueError, match="render_mode must be None or one of \\['ansi'\\]") as err:
            make()
        assert isinstance(err.value, TypeError) and isinstance(err.value, RenderModeError)  # SB3's fallback


def test_config_errors_name_field_value_and_fix():
    with pytest.raises(ValueError,
                       match="^query_max_tokens=3 is invalid: use an integer >= 5; at least query_min_tokens=5$"):
        IMDBOptions(query_min_tokens=5, query_max_tokens=3)
    with pytest.raises(ValueError, match="^max_new_tokens=3 is invalid: use an integer >= 4; at least "
                                         "min_new_tokens=4; raise max_new_tokens or lower min_new_tokens$"):
        EnvConfig(max_new_tokens=3)
    with pytest.raises(ValueError, match=r"^partner_reward_coef=nan is invalid: use a finite number"):
        EnvConfig(partner_reward_coef=float("nan"))
    with pytest.raises(ValueError, match=r"^context_len=12.5 is invalid: use an integer \(got float\)"):
        EnvConfig(context_len=12.5)
