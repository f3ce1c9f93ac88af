"""Seatings as data: constructors, the reward matrix, templates per view, bad input, and the env for
N = 1 .. 4 seats (PettingZoo api_test / seed_test, Gymnasium and SB3 checks)."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from cory_env import BatchedCORYEnv, EnvConfig, PioneerEnv, Task, collective_reward, env
from cory_env.seating import (MAX_SEATS, SEATS, Seat, Seating, canonical_seating_spec, check_template,
                              config_seating, parse_seating_spec, seat_names, seating_of)
from cory_env.tasks import make_task

from .conftest import char_count_reward


def _task(**fields) -> Task:
    return Task(**{"name": "t", "records": [{"query": "Hi"}], "reward_fn": char_count_reward,
                   "observer_template": "{query}{response}", **fields})


def test_seat_names_follow_one_convention():
    assert seat_names(1) == ("pioneer",) and seat_names(2) == SEATS == ("pioneer", "observer")
    assert seat_names(3) == ("pioneer", "observer_1", "observer_2")


@pytest.mark.parametrize(("spec", "n"), [("cory", 2), ("ppo", 1), ("chain:1", 1), ("chain:4", 4), ("chain:12", 12)])
def test_seating_specs(spec, n):
    assert parse_seating_spec(spec) == n
    assert Seating.from_spec(spec).names == seat_names(n)


@pytest.mark.parametrize("spec", ["chain:0", "chain:-1", "chain:x", "chain", "mappo", "", "Cory", "Chain:3",
                                  " cory ", "chain:\u00b2", "chain:\u0663", f"chain:{MAX_SEATS + 1}",
                                  "chain:99999999999999999999"])
def test_bad_seating_specs_name_the_valid_forms(spec):
    """Superscript and Arabic-Indic digits are not N (int() reads the second); a chain longer than MAX_SEATS is
    refused before its N² reads are built (chain:100000 once ran out of memory)."""
    with pytest.raises(ValueError, match=r"is not a seating spec; use 'cory' .* 'ppo' .* 'chain:N' with 1 <= N <= "
                                         f"{MAX_SEATS}"):
        parse_seating_spec(spec)
    with pytest.raises(ValueError, match="seating="):
        EnvConfig(seating=spec)


@pytest.mark.parametrize(("spec", "canonical"), [("chain:04", "chain:4"), ("chain:2", "chain:2"), ("cory", "cory"),
                                                 ("ppo", "ppo"), (None, None), (f"chain:{MAX_SEATS}",
                                                                               f"chain:{MAX_SEATS}")])
def test_a_seating_spec_has_one_spelling(spec, canonical):
    """A run folder records the canonical spec, so resuming with another spelling of it compares equal."""
    assert canonical_seating_spec(spec) == canonical
    assert EnvConfig(seating=spec).seating == canonical


def test_the_constructors_by_hand():
    cory = Seating.cory()
    assert cory == Seating.chain(2) and cory.seat("observer").reads == ("pioneer",)
    assert cory.reward_matrix == ((1.0, 1.0), (1.0, 1.0))
    assert Seating.cory(partner_reward_coef=-1.0).reward_matrix == ((1.0, -1.0), (-1.0, 1.0))
    assert Seating.single_agent().reward_matrix == ((1.0,),) and Seating.single_agent().names == ("pioneer",)
    wo_kt = Seating.cory(knowledge_transfer=False)
    assert wo_kt.seat("observer").reads == () and wo_kt.seat("observer").sees_query
    chain = Seating.chain(4, reads="previous", private_query=True)
    assert [s.reads for s in chain.seats] == [(), ("pioneer",), ("observer_1",), ("observer_2",)]
    assert [s.sees_query for s in chain.seats] == [True, False, False, False]
    assert [s.reads for s in Seating.chain(3).seats] == [(), ("pioneer",), ("pioneer", "observer_1")]
    assert (Seating.chain(1).label, Seating.chain(2).label, Seating.chain(5).label) == ("ppo", "cory", "chain:5")
    assert Seating((Seat("pioneer"), Seat("critic", reads=("pioneer",)))).label == "seats:pioneer,critic"
    assert Seating.chain(np.int64(3)) == Seating.chain(3)  # any integral type


def test_rewards_are_the_matrix_times_the_task_rewards():
    r = [np.array([1.0, 0.0]), np.array([0.5, 2.0]), np.array([0.25, -1.0])]
    m = ((1.0, 0.5, 0.0), (0.0, 1.0, -1.0), (2.0, 0.0, 1.0))
    out = Seating(Seating.chain(3).seats, m).rewards(r)
    np.testing.assert_array_equal(out["pioneer"], [1.25, 1.0])
    np.testing.assert_array_equal(out["observer_1"], [0.25, 3.0])
    np.testing.assert_array_equal(out["observer_2"], [2.25, -1.0])
    with pytest.raises(ValueError, match="expected 3 task-reward arrays"):
        Seating.chain(3).rewards(r[:2])


@pytest.mark.parametrize("coef", [1.0, -1.0, 0.0, 0.3])
def test_two_seats_pay_exactly_the_collective_reward(coef):
    """Bit for bit r_i + c * r_j: the seeded numbers of two-seat runs do not move."""
    rng = np.random.default_rng(0)
    r1, r2 = rng.normal(size=64), rng.normal(size=64)
    out = Seating.cory(partner_reward_coef=coef).rewards([r1, r2])
    assert np.array_equal(out["pioneer"], r1 + coef * r2) and np.array_equal(out["observer"], r2 + coef * r1)
    assert np.array_equal(collective_reward(r1, r2, coef)["observer"], r2 + coef * r1)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Seating(()), r"at least one seat \(N >= 1\)"),
    (lambda: Seating((Seat("pioneer"), Seat("observer")), ((1.0, 1.0),)),
     r"reward_matrix is 1×2, expected N×N = 2×2 for 2 seat\(s\)"),
    (lambda: Seating((Seat("pioneer"),), ((1.0, 2.0),)), r"reward_matrix is 1×2, expected N×N = 1×1"),
    (lambda: Seating((Seat("pioneer"),), ((float("nan"),),)), r"reward_matrix\[0\]\[0\]=nan is invalid: use a finite"),
    (lambda: Seating((Seat("pioneer", reads=("observer",)), Seat("observer"))),
     r"seat 'pioneer' reads 'observer', which acts after its turn: a seat can read only earlier seats"),
    (lambda: Seating((Seat("a"), Seat("b", reads=("b",), template="{query}{b}"))), "which acts at its turn"),
    (lambda: Seating((Seat("a"), Seat("b", reads=("c",)))), r"reads 'c', which is not a seat of this seating"),
    (lambda: Seating((Seat("a"), Seat("a"))), r"seat name\(s\) \['a'\] used twice"),
    (lambda: Seat("query"), "seat name 'query' is invalid"),
    (lambda: Seat("observer 2"), "is invalid: use a Python identifier"),
    (lambda: Seat("b", reads="a"), r"reads must be a sequence of seat names, got the string 'a'; write reads=\('a',\)"),
    (lambda: Seat("b", reads=("a",), template="{query} only"),
     r"seat 'b' template '\{query\} only' lacks the placeholder\(s\) \{a\} \(or \{response\}\) that seat 'b' needs"),
    (lambda: Seat("b", reads=("a", "c"), template="{query} {a}"), r"lacks the placeholder\(s\) \{c\}"),
    (lambda: Seat("b", template="{response} {query}"), r"shows a \{response\}, but seat 'b' reads no seat"),
    (lambda: Seat("b", sees_query=False, reads=("a",), template="{query} {a}"),
     r"shows the \{query\}, which seat 'b' does not see"),
    (lambda: Seat("b", reads=("a",), template="{a}"), r"has no \{query\}, but seat 'b' sees the query"),
    (lambda: Seat("b", reads=("a",), template="{query} {c}"), r"uses the placeholder \{c\}"),
    (lambda: Seating.chain(0), rf"^n=0 is invalid: use an integer in \[1, {MAX_SEATS}\]; a number of seats$"),
    (lambda: Seating.chain(MAX_SEATS + 1), rf"^n={MAX_SEATS + 1} is invalid: use an integer in \[1, {MAX_SEATS}\]"),
    (lambda: Seating.chain(True), r"^n=True is invalid: use an integer \(got bool\)"),
    (lambda: Seating.chain(2.0), r"^n=2.0 is invalid: use an integer \(got float\)"),
    (lambda: Seating(tuple(Seat(f"s{k}") for k in range(MAX_SEATS + 1))),
     f"at most MAX_SEATS = {MAX_SEATS} seats, got {MAX_SEATS + 1}"),
    (lambda: seat_names(0), rf"^n=0 is invalid: use an integer in \[1, {MAX_SEATS}\]"),
    (lambda: seat_names(-1), rf"^n=-1 is invalid: use an integer in \[1, {MAX_SEATS}\]"),
    (lambda: Seating.chain(2, reads="some"), "reads must be one of"),
    (lambda: Seating.chain(3, knowledge_transfer="no"), r"^knowledge_transfer='no' is invalid: use True or False"),
    (lambda: Seating.chain(3, private_query="no"), r"^private_query='no' is invalid: use True or False \(got str\)$"),
    (lambda: Seat("b", sees_query=1), r"^seat 'b': sees_query=1 is invalid: use True or False \(got int\)$"),
    (lambda: _task(private_query="no"), r"^task 't': private_query='no' is invalid: use True or False \(got str\)$"),
    (lambda: _task(num_seats=0), rf"^task 't': num_seats=0 is invalid: use an integer in \[1, {MAX_SEATS}\]"),
    (lambda: _task(num_seats=True), r"^task 't': num_seats=True is invalid: use an integer \(got bool\)"),
    (lambda: Seating.chain(2, partner_reward_coef="abc"),
     r"^partner_reward_coef='abc' is invalid: use a number \(got str\); write it without quotes$"),
    (lambda: Seating.chain(2, partner_reward_coef=None), r"^partner_reward_coef=None is invalid: use a number"),
    (lambda: Seating.chain(2, partner_reward_coef=float("inf")), "partner_reward_coef=inf is invalid: use a finite"),
    (lambda: Seating.chain(2, partner_reward_coef="1e3"), r"^partner_reward_coef='1e3' is invalid: use a number"),
    (lambda: Seating.chain(2, partner_reward_coef=1e308),
     r"^partner_reward_coef=1e\+308 is invalid: use a magnitude of at most 1e\+06"),
    (lambda: Seating((Seat("a"), Seat("b")), ("11", "11")), r"reward_matrix must be N rows of N numbers, got \('11'"),
    (lambda: Seating((Seat("a"), Seat("b")), ((1, True), (1, 1))),
     r"^reward_matrix\[0\]\[1\]=True is invalid: use a number \(got bool\)"),
    (lambda: Seating((Seat("a"), Seat("b")), ((1, 1e308), (1, 1))),
     r"^reward_matrix\[0\]\[1\]=1e\+308 is invalid: use a magnitude of at most 1e\+06"),
    (lambda: seating_of(Seating.cory(), task=None, knowledge_transfer=False),
     r"knowledge_transfer=False and partner_reward_coef=1.0 do nothing beside a Seating object"),
    (lambda: seating_of(Seating.cory(), task=None, partner_reward_coef=-1.0), "do nothing beside a Seating object"),
])
def test_bad_seatings_name_the_field_and_the_fix(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_templates_by_view_and_a_task_without_one(tiny_tok):
    task = _task(response_only_template="R {response}", blank_template="B")
    assert Seating.cory().template_of(Seating.cory().seats[1], task) == ("{query}{response}", "observer_template")
    private = Seating.cory(private_query=True)
    assert private.template_of(private.seats[1], task) == ("R {response}", "response_only_template")
    blank = Seating.cory(private_query=True, knowledge_transfer=False)
    assert blank.template_of(blank.seats[1], task) == ("B", "blank_template")
    assert Seating.cory(knowledge_transfer=False).template_of(Seat("observer"), task)[1] == "pioneer_template"
    with pytest.raises(ValueError, match=r"task 't' has no response_only_template \(the prompt of a seat that sees "
                                         r"only the responses it reads\), which seat 'observer' needs; "
                                         r"give the Task a response_only_template, or the seat its own "
                                         r"Seat\(template=...\)"):
        private.check_task(_task())
    with pytest.raises(ValueError, match=r"task 't' has no blank_template \(the prompt of a seat that sees neither "
                                         r"the query nor a response\)"):
        blank.check_task(_task())
    # a template that does not fit its seat is named by where it came from (the Task refuses a bad template of its
    # own first, so the field is checked on check_template itself)
    with pytest.raises(ValueError, match=r"^task 't' observer_template '\{query\} \{c\}' uses the placeholder "
                                         r"\{c\}"):
        check_template("{query} {c}", Seat("b", reads=("a",)), field="task 't' observer_template")


@pytest.mark.parametrize(("seat", "template", "message"), [
    (Seat("b", reads=("a",)), "{a}", "seat 'b' template '{a}' has no {query}, but seat 'b' sees the query "
     "(sees_query=True); add {query}, or make the query private to the earlier seats (Seat(sees_query=False), "
     "private_query=True)"),
    (Seat("b", reads=("a",), sees_query=False), "{query} {a}", "seat 'b' template '{query} {a}' shows the {query}, "
     "which seat 'b' does not see (sees_query=False); remove {query}, or set sees_query=True"),
    (Seat("c", reads=("a", "b")), "{query}", "seat 'c' template '{query}' lacks the placeholder(s) {a}, {b} (or "
     "{response}) that seat 'c' needs: it reads ['a', 'b']; add them, or drop those seats from its reads"),
    (Seat("b"), "{query} {response}", "seat 'b' template '{query} {response}' shows a {response}, but seat 'b' reads "
     "no seat (reads=()); remove {response}, or let it read the earlier seats (knowledge transfer)"),
])
def test_a_template_that_does_not_show_what_its_seat_sees_says_the_whole_fix(seat, template, message):
    """The messages whole (docs/errors.md row 79): each ends with the two ways to fix it."""
    with pytest.raises(ValueError) as err:
        check_template(template, seat, field=f"seat {seat.name!r} template")
    assert str(err.value) == message


def test_lookups_and_type_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"^a seating needs at least one seat \(N >= 1\); use Seating.single_agent\(\) "
                                         r"for one$"):
        Seating([])
    with pytest.raises(ValueError, match=r"^seats must be Seat objects, got 'pioneer'; write Seat\('name', "
                                         r"reads=\(...\)\)$"):
        Seating(("pioneer",))
    listed = Seating([Seat("pioneer"), Seat("observer", reads=("pioneer",))])  # any sequence, kept as a tuple
    assert listed.seats == Seating.cory().seats and hash(listed) == hash(Seating.cory())
    assert Seating.from_spec("chain:3", knowledge_transfer=False) == Seating.chain(3, knowledge_transfer=False)
    with pytest.raises(KeyError, match=r"no seat 'critic'; seats are \['pioneer', 'observer'\]"):
        Seating.cory().seat("critic")
    with pytest.raises(ValueError, match=r"seating must be a seating spec such as 'cory', got 3 \(int\); pass a "
                                         r"Seating object to the env as `seating=` instead"):
        parse_seating_spec(3)
    with pytest.raises(ValueError, match=r"\{query\}, or make the query private"):
        Seat("b", reads=("a",), template="{a}")


def test_seat_rewards_are_float64_whatever_the_task_returns():
    """R = M · r in float64 (`Seating.rewards`): float32 or int task rewards are not kept in their own dtype (numpy 2
    would keep float32 * a Python float in float32)."""
    for r in ([np.array([1, 2]), np.array([3, 4])],
              [np.array([0.1, 0.2], np.float32), np.array([1.0, 2.0], np.float32)]):
        out = Seating.cory(partner_reward_coef=0.5).rewards(r)
        assert all(v.dtype == np.float64 for v in out.values())
        np.testing.assert_array_equal(out["pioneer"], np.float64(r[0]) + 0.5 * np.float64(r[1]))


def test_a_prompt_of_no_token_is_refused(tiny_tok):
    empty = Seating((Seat("pioneer"), Seat("observer", sees_query=False, template="")))
    with pytest.raises(ValueError, match=r"seat 'observer': its prompt '' \(seat 'observer' template\) holds no token"):
        BatchedCORYEnv(tokenizer=tiny_tok, seating=empty)


def test_a_seat_reads_earlier_answers_by_name_or_all_at_once(tiny_tok):
    """{response} holds every read seat's answer in seat order; {<seat>} one of them (EOS stripped)."""
    seats = (Seat("pioneer"), Seat("critic", reads=("pioneer",), template="{query} A:{pioneer}"),
             Seat("judge", reads=("pioneer", "critic"), template="{query} both:{response} first:{pioneer}"))
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1, reward_fn=char_count_reward,
                          seating=Seating(seats), min_new_tokens=2, max_new_tokens=2)
    benv.reset(seed=0, options={"queries": ["Hi"]})
    answers = {}
    for seat, ids in (("pioneer", [5, 6]), ("critic", [7, 8]), ("judge", [9, 10])):
        for t in ids:
            benv.step(np.array([t]))
        answers[seat] = ids
    tr = benv.transcript()
    q = tiny_tok.encode("Hi", add_special_tokens=False)
    enc = lambda text: tiny_tok.encode(text, add_special_tokens=False)  # noqa: E731
    assert tr.seats["critic"].prompt_ids[0] == q + enc(" A:") + [5, 6]
    assert tr.seats["judge"].prompt_ids[0] == q + enc(" both:") + [5, 6, 7, 8] + enc(" first:") + [5, 6]
    np.testing.assert_array_equal(tr.seats["judge"].reward, sum(tr.seats[s].task_reward for s in tr.seats))


def test_later_seats_records_carry_the_earlier_answers(tiny_tok):
    seen = []

    def spy(queries, responses, records):
        seen.extend(records)
        return [0.0] * len(queries)

    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1, reward_fn=spy, seating="chain:3", min_new_tokens=1,
                          max_new_tokens=1)
    benv.reset(seed=0)
    for token in (5, 6, 7):
        benv.step(np.array([token]))
    texts = [t.response_text[0] for t in benv.transcript().seats.values()]
    assert "partner_response" not in seen[0]
    assert seen[1]["partner_response"] == texts[0] and seen[1]["partner_responses"] == texts[:1]
    assert seen[2]["partner_response"] == texts[1] and seen[2]["partner_responses"] == texts[:2]


def test_the_config_seating_and_the_tasks_defaults():
    def seating(**fields):
        config = EnvConfig(**fields)
        return config_seating(config, make_task(config.task, config, None))

    relay = seating(task="relay")
    assert relay == Seating.cory(private_query=True)
    chain = seating(task="chain_relay")
    assert chain == Seating.chain(3, private_query=True, reads="previous")
    assert seating(task="chain_relay", seating="chain:4").num_seats == 4
    assert seating(task="tiny_vocab", seating="ppo") == Seating.single_agent()
    assert seating(task="tiny_vocab", knowledge_transfer=False, partner_reward_coef=-1.0) == \
        Seating.cory(knowledge_transfer=False, partner_reward_coef=-1.0)
    custom = Seating.chain(3)
    assert seating_of(custom, task=make_task("relay", EnvConfig(task="relay"), None)) is custom
    with pytest.raises(ValueError, match=r"task 'imdb' has no response_only_template"):
        config_seating(EnvConfig(task="imdb"), task=_imdb_private())


def _imdb_private() -> Task:
    import dataclasses

    return dataclasses.replace(make_task("imdb", EnvConfig(), None), private_query=True)


@pytest.mark.parametrize("seats", [1, 2, 3, 4])
def test_pettingzoo_api_and_seed_tests_for_n_seats(tiny_tok, seats):
    kwargs = {"tokenizer": tiny_tok, "seating": f"chain:{seats}", "max_new_tokens": 4}
    aec = env(**kwargs)
    assert aec.possible_agents == list(seat_names(seats))
    api_test(aec, num_cycles=60)
    seed_test(lambda: env(**kwargs), num_cycles=60)


@pytest.mark.parametrize("seats", [1, 2, 3, 4])
def test_relay_style_seatings_pass_the_api_test(seats):
    from cory_env.tasks import task_tokenizer

    kwargs = {"task": "chain_relay", "tokenizer": task_tokenizer("chain_relay"), "context_len": 12,
              "seating": f"chain:{seats}"}
    api_test(env(**kwargs), num_cycles=60)
    seed_test(lambda: env(**kwargs), num_cycles=60)


@pytest.mark.parametrize("seats", [1, 2, 3, 4])
def test_the_gymnasium_view_for_n_seats(seats):
    """The pioneer seat as a Gymnasium env, the later seats played by the partner policy: gymnasium's env checker."""
    from gymnasium.utils.env_checker import check_env

    view = PioneerEnv(task="tiny_vocab", context_len=16, seating=f"chain:{seats}")  # chain:4 needs 14 (the env says so)
    check_env(view, skip_render_check=True)
    assert view.seating.num_seats == seats


def test_the_pioneer_with_partners_is_paid_its_seat_reward():
    """Two seats, a partner that names the 2 query symbols the pioneer did not: the collective reward 2."""
    from cory_env.tasks.tiny_vocab import VOCAB

    def complement(seat, observation):
        ids = observation["input_ids"][observation["attention_mask"] == 1].tolist()
        query, answer = set(ids[:4]), set(ids[5:7])  # "{query} : {response} ?": 4 symbols, ':', the answer, '?'
        named = ids[8:]  # what this seat wrote so far
        left = sorted(query - answer - set(named))
        return left[0] if left else VOCAB["<eos>"]

    view = PioneerEnv(task="tiny_vocab", context_len=12, seating="cory", partner_policy=complement)
    obs, info = view.reset(seed=3)
    query = [VOCAB[s] for s in info["query_text"].split()]
    _, reward, terminated, _, step_info = view.step(query[0])
    assert not terminated
    _, reward, terminated, _, step_info = view.step(query[1])
    assert terminated and step_info["task_reward"] == 1.0 and reward == 2.0
    alone = PioneerEnv(task="tiny_vocab", context_len=12)
    assert alone.seating == Seating.single_agent()


def test_a_seating_object_is_played_as_given(tiny_tok):
    """A Seating object (the trainer hands down the one `plan_run` built) is trusted: the env plays it without
    deriving the config's seating again; the config's seating fields describe a seating only when no object is
    given."""
    assert BatchedCORYEnv(EnvConfig(), tiny_tok, seating=Seating.chain(3)).seating == Seating.chain(3)
    built = Seating.cory(knowledge_transfer=False, partner_reward_coef=-1.0)
    same = EnvConfig(seating="cory", knowledge_transfer=False, partner_reward_coef=-1.0)
    assert BatchedCORYEnv(same, tiny_tok, seating=built).seating is built
    assert BatchedCORYEnv(EnvConfig(seating="chain:3"), tiny_tok, seating=Seating.cory()).seating == Seating.cory()
    assert BatchedCORYEnv(same, tiny_tok).seating == built  # no object: the config's fields
