import pytest

from cory_env.seating import seat_names
from trainers.loop.role_exchange import Bundle, RoleExchange


class FakeLearner:
    def __init__(self):
        self.resets = 0

    def reset_state(self):
        self.resets += 1


def bundles(n):
    return [Bundle(f"llm{k}", object(), FakeLearner()) for k in range(1, n + 1)]


def make(period, reset=False, n=2):
    made = bundles(n)
    return RoleExchange(made, seat_names(n), period=period, reset_on_exchange=reset), *made


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


def test_three_models_rotate_one_seat_forward_and_visit_every_seat():
    ex, a, b, c = make(period=1, n=3)
    seen = []
    for it in range(4):
        seen.append([bundle.name for bundle in ex.seats.values()])
        ex.after_iteration(it)
    # the observer_1 model becomes pioneer, the pioneer's model goes to the last seat
    assert seen == [["llm1", "llm2", "llm3"], ["llm2", "llm3", "llm1"], ["llm3", "llm1", "llm2"],
                    ["llm1", "llm2", "llm3"]]
    assert list(ex.seats) == ["pioneer", "observer_1", "observer_2"] and ex.seat_of("llm3") == "observer_1"


def test_period_zero_disables():
    ex, a, _ = make(period=0)
    assert not any(ex.after_iteration(it) for it in range(10))
    assert ex.seats["pioneer"] is a


def test_reset_on_exchange_resets_every_learner():
    ex, a, b, c = make(period=1, reset=True, n=3)
    ex.after_iteration(0)
    assert (a.learner.resets, b.learner.resets, c.learner.resets) == (1, 1, 1)


def test_state_round_trip_and_seat_lookup():
    ex, a, b = make(period=1)
    ex.after_iteration(0)
    state = ex.state_dict()
    assert state["seats"] == {"pioneer": "llm2", "observer": "llm1"}
    assert state == {"seats": {"pioneer": "llm2", "observer": "llm1"}, "num_exchanges": 1, "iteration": 1,
                     "episodes": {"llm1": 0, "llm2": 0}, "frozen": {}}
    fresh, _, _ = make(period=1)
    fresh.load_state_dict(state)
    assert fresh.seats["pioneer"].name == "llm2" and fresh.seat_of("llm1") == "observer"
    with pytest.raises(ValueError, match="this run's scheme seats others"):  # a state the scheme never reaches
        fresh.load_state_dict({**state, "seats": {"pioneer": "llm1", "observer": "llm2"}})
    with pytest.raises(ValueError, match=r"the checkpoint's models \['llm1', 'llm9'\] are not this run's"):
        fresh.load_state_dict({**state, "episodes": {"llm1": 0, "llm9": 0}})


def test_a_checkpoint_of_another_seating_is_refused():
    ex, *_ = make(period=1, n=3)
    with pytest.raises(ValueError, match=r"the checkpoint seats \['pioneer', 'observer'\], this run's seating has "
                                         r"\['pioneer', 'observer_1', 'observer_2'\]"):
        ex.load_state_dict({"seats": {"pioneer": "llm1", "observer": "llm2"}, "num_exchanges": 0, "iteration": 0,
                            "episodes": {"llm1": 0, "llm2": 0, "llm3": 0}, "frozen": {}})


def test_rejects_bad_construction():
    with pytest.raises(ValueError, match="role_exchange_period"):
        make(period=-1)
    with pytest.raises(ValueError, match="differently named bundle per seat"):
        RoleExchange([Bundle("x", 1, FakeLearner()), Bundle("x", 2, FakeLearner())], seat_names(2), period=1)
    with pytest.raises(ValueError, match=r"3 bundle\(s\) for the seats \['pioneer', 'observer'\]: role exchange "
                                         "seats one model per seat"):
        RoleExchange(bundles(3), seat_names(2), period=1)


def test_single_agent_never_exchanges():
    ex = RoleExchange(bundles(1), seat_names(1), period=5)
    assert list(ex.seats) == ["pioneer"]
    assert not any(ex.after_iteration(it) for it in range(10))


def test_loaded_seats_keep_pioneer_first():
    ex, _, _ = make(period=1)
    ex.load_state_dict({"seats": {"observer": "llm1", "pioneer": "llm2"}, "num_exchanges": 1, "iteration": 1,
                        "episodes": {"llm1": 0, "llm2": 0}, "frozen": {}})
    assert list(ex.seats) == ["pioneer", "observer"]
