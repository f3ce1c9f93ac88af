"""A resume compares seatings, not their spellings: ``cory`` and ``chain:2``, ``ppo`` and ``chain:1``, and no
seating given on a two-seat task and ``cory`` are one seating and resume; another seating is refused, naming it."""

from __future__ import annotations

import pytest

from trainers.loop.cory import CORYTrainer


@pytest.mark.parametrize(("first", "again"), [
    ("cory", "chain:2"), ("chain:2", "cory"), (None, "cory"), ("cory", None), ("ppo", "chain:1"), ("chain:1", "ppo")])
def test_one_seating_spelled_two_ways_resumes(tiny_run, first, again):
    CORYTrainer(tiny_run("r", seating=first, num_iterations=1)).train()
    resumed = CORYTrainer(tiny_run("r", seating=again, num_iterations=2, resume=True))
    assert resumed.start_iteration == 1 and len(resumed.train()) == 1


def test_another_seating_is_refused_naming_both(tiny_run):
    CORYTrainer(tiny_run("r", seating="cory", num_iterations=1)).train()
    with pytest.raises(ValueError, match=r"the config differs in seating: pioneer\(q\) -> observer\(q\+pioneer\).* "
                                         r"-> pioneer\(q\) -> observer\(q\)"):
        CORYTrainer(tiny_run("r", seating="chain:2", knowledge_transfer=False, num_iterations=2, resume=True))
