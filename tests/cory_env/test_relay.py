"""The relay task: the query is private to the pioneer, so knowledge transfer is the observer's only information."""

import itertools

import numpy as np
import pytest

from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.tasks import Task, make_task, task_tokenizer
from cory_env.tasks.relay import WITHOUT_KT_OPTIMUM, relay_reward
from cory_env.tasks.tiny_vocab import SYMBOLS, VOCAB, tiny_vocab_records


def test_relay_reward_hand_values():
    q = ["a b c d"] * 5
    responses = ["a b", "a e", "b a", "a c", "e f"]
    records = [{}, {}, {"partner_response": "a b"}, {"partner_response": "a b"}, {"partner_response": "e f"}]
    # pioneer: symbols of q; observer: symbols of q that the pioneer also named (e, f are not in q)
    assert relay_reward(q, responses, records) == [1.0, 0.5, 1.0, 0.5, 0.0]


def test_only_the_first_two_words_count_and_repeats_count_once():
    assert relay_reward(["a b c d"], ["a a b"], [{}]) == [0.5]
    assert relay_reward(["a b c d"], ["c d"], [{"partner_response": "a b c d"}]) == [0.0]


def _play(kt: bool, pioneer_rule, observer_rule, batch=8, seed=0):
    tok = task_tokenizer("relay")
    env = BatchedCORYEnv(EnvConfig(task="relay", context_len=12, knowledge_transfer=kt), tok, batch_size=batch)
    env.reset(seed=seed)
    episode = env._episode
    for seat, rule in (("pioneer", pioneer_rule), ("observer", observer_rule)):
        prompts = [tok.decode(p).split() for p in episode.prompt_ids[seat]]
        words = [rule(p) for p in prompts]
        for k in range(2):
            env.step(np.array([VOCAB[w[k]] for w in words]))
    return env, episode


def test_observer_prompt_holds_the_pioneer_answer_and_never_the_query():
    env, episode = _play(True, lambda p: p[:2], lambda p: p[1:3])
    t = env.transcript()
    for q, prompt, a1 in zip(t.query_text, episode.prompt_ids["observer"], t.seats["pioneer"].response_text):
        words = env.tokenizer.decode(prompt).split()
        assert words == [":", *a1.split(), "?"]
        assert not set(q.split()) - set(a1.split()) & set(words)  # the query symbols a1 left out are not shown
    # copying the pioneer's answer is optimal: collective reward 2 on every row
    np.testing.assert_allclose(t.seats["pioneer"].reward, 2.0)


def test_without_knowledge_transfer_the_observer_sees_a_constant_prompt():
    env, episode = _play(False, lambda p: p[:2], lambda p: ["a", "b"])
    assert {tuple(p) for p in episode.prompt_ids["observer"]} == {tuple(env.tokenizer.encode(": ?"))}


def test_without_kt_optimum_is_one_and_a_quarter():
    """Brute force over every query: the best fixed observer answer, with the pioneer's best response to it, scores
    exactly `WITHOUT_KT_OPTIMUM` (the module docstring's bound); knowledge transfer reaches 2."""
    queries = [r["query"] for r in tiny_vocab_records()]

    def pioneer_best_response(q: str, fixed: tuple[str, str]) -> str:
        named = [s for s in fixed if s in q.split()]
        rest = [s for s in q.split() if s not in named]
        return " ".join((named + rest)[:2])

    best = 0.0
    for fixed in itertools.combinations(SYMBOLS[:4], 2):  # symbols are exchangeable: 4 cover every pattern
        a1 = [pioneer_best_response(q, fixed) for q in queries]
        r1 = relay_reward(queries, a1, [{}] * len(queries))
        r2 = relay_reward(queries, [" ".join(fixed)] * len(queries), [{"partner_response": a} for a in a1])
        best = max(best, float(np.mean(r1) + np.mean(r2)))
    assert best == pytest.approx(WITHOUT_KT_OPTIMUM)


def test_relay_shares_tiny_vocab_queries_split_and_mask():
    tok = task_tokenizer("relay")
    config = EnvConfig(task="relay", context_len=12, heldout_fraction=0.2, query_split="test")
    relay, tiny = make_task("relay", config, tok), make_task("tiny_vocab", EnvConfig(
        task="tiny_vocab", context_len=12, heldout_fraction=0.2, query_split="test"), tok)
    assert [r["query"] for r in relay.records] == [r["query"] for r in tiny.records]
    np.testing.assert_array_equal(relay.action_mask, tiny.action_mask)


def test_the_private_views_templates_may_show_only_what_their_seat_sees():
    base = {"name": "t", "records": [{"query": "q"}], "reward_fn": lambda q, r: [0.0] * len(q),
            "observer_template": "{query} {response}"}
    task = Task(**base, response_only_template="{response}", blank_template=": ?", private_query=True)
    assert (task.response_only_template, task.blank_template) == ("{response}", ": ?")
    with pytest.raises(ValueError, match=r"response_only_template 'q {query} a {response}' shows \{query\}, which its "
                                         r"seat does not see; remove it"):
        Task(**base, response_only_template="q {query} a {response}")
    with pytest.raises(ValueError, match=r"response_only_template ': \?' lacks the placeholder\(s\) \{response\}"):
        Task(**base, response_only_template=": ?")
    with pytest.raises(ValueError, match=r"blank_template 'saw \{response\}' shows \{response\}, which its seat does "
                                         r"not see"):
        Task(**base, blank_template="saw {response}")
