"""Property-based fuzzing of both env views: random valid and invalid actions, seeds, queries and settings.

Properties (checked after every step, on > 1000 generated episodes):

* only the documented errors are raised (TypeError, ValueError; RuntimeError once the episode is over), and a
  rejected action leaves the env exactly as it was;
* PettingZoo AEC invariants: ``agents`` is an ordered subset of ``possible_agents``; ``rewards``,
  ``_cumulative_rewards``, ``terminations``, ``truncations`` and ``infos`` are keyed by ``agents``;
  ``agent_selection`` is live; observations lie in ``observation_space``; rewards are 0 until every seat terminates
  together; a finished seat only accepts ``None`` (dead step) and is then removed;
* reward accumulation: summing ``last()`` rewards per seat over an episode gives exactly its collective reward
  r_i + c * Σ_{j≠i} r_j, where r is the (scripted) task reward of the decoded response; seatings of 1 to 4 seats;
* the batched view: windows keep shape and dtype, ``active`` only falls within a phase, rewards are 0 until done
  and then the collective reward, every response is 1..max_new_tokens tokens and ends at its first EOS.

Hypothesis runs derandomized (same examples on every run) so CI cannot flake.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cory_env import BatchedCORYEnv, raw_env
from cory_env.seating import seat_names

from .conftest import char_count_reward

V = 384  # tiny tokenizer
EOS = 0
DOCUMENTED = (TypeError, ValueError)
FUZZ = settings(max_examples=600, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# (min_new_tokens, max_new_tokens, context_len, truncate_query)
SETTINGS = [(1, 1, 48, True), (1, 4, 64, True), (2, 6, 96, False), (3, 3, 64, True), (1, 5, 64, False)]

texts = st.one_of(
    st.text(max_size=30),  # any unicode (emoji, combining marks, RTL, NUL), possibly empty
    st.text(alphabet=st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), min_size=1, max_size=60),
    st.sampled_from(["", " ", "\n\t", "a" * 3000, "é" * 400, "The movie was", "\x00\x01", "lone \ud800"]),
)
token_queries = st.lists(st.one_of(st.integers(0, V - 1), st.integers(-3, V + 3)), max_size=80)
queries = st.one_of(st.none(), texts, token_queries)
actions = st.one_of(
    st.integers(0, V - 1), st.integers(0, V - 1), st.integers(0, V - 1), st.just(EOS),
    st.sampled_from([-1, V, V + 10, None, 1.5, "7", True, np.float32(3.0)]),
    st.integers(0, V - 1).map(np.int64),
)

_ENVS: dict[tuple, object] = {}


def _cached(kind: str, key: tuple, make):
    """Envs are rebuilt per setting only (reset() starts a fresh episode), to keep > 1000 examples fast."""
    if (kind, key) not in _ENVS:
        _ENVS[(kind, key)] = make()
    return _ENVS[(kind, key)]


def _aec(tok, setting, coef, kt, seats):
    lo, hi, L, trunc = setting
    return _cached("aec", (setting, coef, kt, seats), lambda: raw_env(
        tokenizer=tok, reward_fn=char_count_reward, min_new_tokens=lo, max_new_tokens=hi, context_len=L,
        truncate_query=trunc, partner_reward_coef=coef, knowledge_transfer=kt, seating=f"chain:{seats}"))


def _is_token(action) -> bool:
    if isinstance(action, (bool, np.bool_)):
        return False
    return isinstance(action, (int, np.integer)) and 0 <= int(action) < V


def _snapshot_aec(env) -> tuple:
    obs = {a: {k: np.array(v) for k, v in env.observe(a).items()} for a in env.agents}
    return (list(env.agents), env.agent_selection, dict(env.rewards), dict(env._cumulative_rewards),
            dict(env.terminations), dict(env.truncations), obs)


def _same(a, b) -> bool:
    (agents1, sel1, *dicts1, obs1), (agents2, sel2, *dicts2, obs2) = a, b
    return (agents1 == agents2 and sel1 == sel2 and dicts1 == dicts2
            and all(np.array_equal(obs1[s][k], obs2[s][k]) for s in obs1 for k in obs1[s]))


def _check_aec_invariants(env) -> None:
    assert env.agents == [a for a in env.possible_agents if a in env.agents]
    for table in (env.rewards, env._cumulative_rewards, env.terminations, env.truncations, env.infos):
        assert set(table) == set(env.agents)
    if env.agents:
        assert env.agent_selection in env.agents
    assert not any(env.truncations.values())
    if env.agents and not any(env.terminations.values()):  # every seat terminates at once, at the end
        assert all(r == 0.0 for r in env.rewards.values()) and all(i == {} for i in env.infos.values())
        assert env.agents == env.possible_agents
    else:
        assert all(env.terminations.values())  # every seat terminates together
    for agent in env.agents:
        obs = env.observe(agent)
        assert env.observation_space(agent).contains(obs)
        pad = obs["attention_mask"] == 0
        assert (obs["input_ids"][pad] == env.tokenizer.pad_token_id).all()


def _check_transcript(transcript, coef: float, max_new: int) -> None:
    seats = transcript.seats
    for seat, t in seats.items():
        for ids, text, r in zip(t.response_ids, t.response_text, t.task_reward):
            assert 1 <= len(ids) <= max_new
            assert EOS not in ids[:-1]  # a response ends at its first EOS
            assert r == len(text)  # the scripted reward scored the decoded response text
    r = [t.task_reward for t in seats.values()]
    for i, t in enumerate(seats.values()):  # R_i = r_i + c * (sum of the other seats' r_j)
        others = sum((r[j] for j in range(len(r)) if j != i), np.zeros_like(r[i]))
        np.testing.assert_allclose(t.reward, r[i] + coef * others)


@pytest.mark.slow
@FUZZ
@given(seed=st.integers(0, 2**31 - 1), query=queries, moves=st.lists(actions, max_size=40),
       setting=st.sampled_from(SETTINGS), coef=st.sampled_from([1.0, -1.0, 0.0, 0.5]), kt=st.booleans(),
       seats=st.integers(1, 4), data=st.data())
def test_aec_env_under_random_actions(tiny_tok, seed, query, moves, setting, coef, kt, seats, data):
    env = _aec(tiny_tok, setting, coef, kt, seats)
    assert env.possible_agents == list(seat_names(seats))
    try:
        env.reset(seed=seed, options=None if query is None else {"query": query})
    except DOCUMENTED as err:  # empty query, ids outside the vocabulary, too long without truncation
        assert query is not None and str(err)
        event(f"reset refused: {type(err).__name__}")
        return
    _check_aec_invariants(env)
    seen = dict.fromkeys(env.possible_agents, 0.0)
    finished_at = None
    pending = list(moves)
    for _ in range(200):
        if not env.agents:
            break
        agent = env.agent_selection
        _, reward, termination, truncation, _ = env.last()
        assert not truncation and termination == env.terminations[agent]
        move = pending.pop(0) if pending else (None if termination else data.draw(st.integers(0, V - 1)))
        valid = move is None if termination else _is_token(move)
        before = _snapshot_aec(env)
        try:
            env.step(move)
        except DOCUMENTED as err:
            assert not valid, f"valid action {move!r} for {agent} rejected: {err}"
            assert _same(before, _snapshot_aec(env)), "a rejected action changed the env"
            event(f"action refused: {type(err).__name__}")
            continue
        assert valid, f"invalid action {move!r} for {agent} (terminated={termination}) accepted"
        seen[agent] += reward
        if finished_at is None and any(env.terminations.values()):
            finished_at = env.transcript()
        _check_aec_invariants(env)
    assert env.agents == [], "the episode did not end within 200 steps"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(None)
    _check_transcript(finished_at, coef, setting[1])
    for seat, t in finished_at.seats.items():  # last() handed every seat its collective reward exactly once
        assert seen[seat] == pytest.approx(float(t.reward[0]))


batch_actions = st.one_of(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=3),
    st.lists(st.integers(-2, V + 2), min_size=1, max_size=3),
    st.lists(st.sampled_from([EOS, 5, 6]), min_size=1, max_size=3),
    st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=3).map(lambda x: np.asarray(x)),
    st.lists(st.booleans(), min_size=1, max_size=3).map(np.asarray),
)


@pytest.mark.slow
@FUZZ
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 3), query_pool=st.lists(queries, max_size=3),
       moves=st.lists(batch_actions, max_size=30), setting=st.sampled_from(SETTINGS),
       coef=st.sampled_from([1.0, -1.0, 0.0]), seats=st.integers(1, 4), data=st.data())
def test_batched_env_under_random_actions(tiny_tok, seed, batch, query_pool, moves, setting, coef, seats, data):
    lo, hi, L, trunc = setting
    env = _cached("batched", (setting, coef, seats, batch), lambda: BatchedCORYEnv(
        tokenizer=tiny_tok, batch_size=batch, reward_fn=char_count_reward, seating=f"chain:{seats}",
        min_new_tokens=lo, max_new_tokens=hi, context_len=L, truncate_query=trunc, partner_reward_coef=coef))
    qs = None if not query_pool or query_pool[0] is None else [q for q in query_pool if q is not None]
    try:
        obs, info = env.reset(seed=seed, options=None if qs is None else {"queries": qs})
    except DOCUMENTED as err:  # wrong count, empty, out-of-vocabulary or too long queries
        assert qs is not None and str(err)
        event(f"reset refused: {type(err).__name__}")
        return
    assert len(info["query_text"]) == batch
    phase, active = env.agent_selection, env.active
    pending = list(moves)
    for _ in range(200):
        if env.done:
            break
        if pending:
            move = pending.pop(0)
        else:
            move = np.asarray(data.draw(st.lists(st.integers(0, V - 1), min_size=batch, max_size=batch)))
        arr = np.asarray(move)
        valid = (arr.dtype.kind in "iu" and arr.shape == (batch,)
                 and bool(((arr >= 0) & (arr < V))[env.active].all()))
        before = (env.agent_selection, env.active, {k: np.array(v) for k, v in env.observe().items()})
        try:
            obs, rewards, terms, truncs, infos = env.step(move)
        except DOCUMENTED as err:
            assert not valid, f"valid actions {move!r} rejected: {err}"
            after = (env.agent_selection, env.active, env.observe())
            assert before[0] == after[0] and np.array_equal(before[1], after[1])
            assert all(np.array_equal(before[2][k], after[2][k]) for k in before[2]), "rejected actions changed obs"
            event(f"actions refused: {type(err).__name__}")
            continue
        assert valid, f"invalid actions {move!r} accepted (active rows {env.active})"
        assert obs["input_ids"].shape == obs["attention_mask"].shape == (batch, L)
        assert obs["input_ids"].dtype == np.int64 and not obs["input_ids"].flags.writeable
        assert not any(t.any() for t in truncs.values())
        if env.agent_selection == phase:
            assert not (env.active & ~active).any(), "a finished row became active again within a phase"
        phase, active = env.agent_selection, env.active
        if env.done:
            assert all(t.all() for t in terms.values())
            for seat in env.possible_agents:
                np.testing.assert_array_equal(rewards[seat], env.transcript().seats[seat].reward)
        else:
            assert not any(t.any() for t in terms.values()) and all((r == 0).all() for r in rewards.values())
    assert env.done, "the batch did not finish within 200 steps"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros(batch, dtype=np.int64))
    transcript = env.transcript()
    _check_transcript(transcript, coef, hi)
    assert tuple(transcript.seats) == seat_names(seats)
    if seats == 1:
        np.testing.assert_array_equal(transcript.seats["pioneer"].reward, transcript.seats["pioneer"].task_reward)
