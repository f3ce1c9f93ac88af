import pytest

from trainers.loop.role_exchange import Bundle, RoleExchange


class FakeLearner:
    def __init__(self):
        self.resets = 0

    def reset_state(self):
        self.resets += 1


def make(period, reset=False):
    a = Bundle("llm1", object(), FakeLearner())
    b = Bundle("llm2", object(), FakeLearner())
    return RoleExchange(a, b, period=period, reset_on_exchange=reset), a, b


def test_swaps_every_period_in_memory():
    ex, a, b = make(period=2)
    seen = []
    for it in range(6):
        seen.append(ex.seats["pioneer"].name)
        ex.after_iteration(it)
    assert seen == ["llm1", "llm1", "llm2", "llm2", "llm1", "llm1"]
    assert ex.num_exchanges == 3
    assert ex.seats["pioneer"] is b and ex.seats["observer"] is a  # 3 swaps; same objects, nothing copied
    assert a.learner.resets == 0


def test_period_zero_disables():
    ex, a, _ = make(period=0)
    assert not any(ex.after_iteration(it) for it in range(10))
    assert ex.seats["pioneer"] is a


def test_reset_on_exchange_resets_both_learners():
    ex, a, b = make(period=1, reset=True)
    ex.after_iteration(0)
    assert (a.learner.resets, b.learner.resets) == (1, 1)


def test_state_round_trip_and_seat_lookup():
    ex, a, b = make(period=1)
    ex.after_iteration(0)
    state = ex.state_dict()
    assert state["seats"] == {"pioneer": "llm2", "observer": "llm1"}
    fresh, _, _ = make(period=1)
    fresh.load_state_dict(state)
    assert fresh.seats["pioneer"].name == "llm2" and fresh.seat_of("llm1") == "observer"
    with pytest.raises(ValueError, match="unknown bundles"):
        fresh.load_state_dict({"seats": {"pioneer": "llm9", "observer": "llm1"}, "num_exchanges": 0})


def test_rejects_bad_construction():
    with pytest.raises(ValueError, match="role_exchange_period"):
        make(period=-1)
    with pytest.raises(ValueError, match="different names"):
        RoleExchange(Bundle("x", 1, FakeLearner()), Bundle("x", 2, FakeLearner()), period=1)


def test_single_agent_never_exchanges():
    ex = RoleExchange(Bundle("llm1", 1, FakeLearner()), None, period=5)
    assert list(ex.seats) == ["pioneer"]
    assert not any(ex.after_iteration(it) for it in range(10))


def test_loaded_seats_keep_pioneer_first():
    ex, _, _ = make(period=1)
    ex.load_state_dict({"seats": {"observer": "llm1", "pioneer": "llm2"}, "num_exchanges": 1})
    assert list(ex.seats) == ["pioneer", "observer"]
