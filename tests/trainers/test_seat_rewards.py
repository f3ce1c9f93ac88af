"""Every learner trains on what the seating pays and shows it: each seating option either changes what a learner
trains (weights differ) or is refused/named as doing nothing; no learner silently ignores one while the metrics
follow it (`--learner magrpo --partner_reward_coef -1` trained bit-identically to +1)."""

from __future__ import annotations

import pytest
import torch

from trainers.loop.cory import CORYTrainer

LEARNERS = {"ppo": {}, "grpo": {"group_size": 2}, "mappo": {}, "magrpo": {"group_size": 2}}


def _length(queries, responses):
    return [float(len(r)) / 10 for r in responses]


def _weights(tiny_run, name: str, **overrides) -> list[torch.Tensor]:
    trainer = CORYTrainer(tiny_run(name, num_iterations=1, **overrides), reward_fn=_length)
    trainer.train()
    return [p.detach().clone() for b in trainer.exchange.bundles.values() for p in b.agent.trainable_parameters()]


def _differ(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return any(not torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("learner", LEARNERS)
def test_the_partner_coefficient_changes_the_update_or_is_refused(tiny_run, learner):
    opts = {"learner": learner, **LEARNERS[learner]}
    plus = _weights(tiny_run, f"{learner}-plus", partner_reward_coef=1.0, **opts)
    if learner == "magrpo":  # one joint reward for every seat: another reward matrix cannot be honoured
        with pytest.raises(ValueError, match="trains every seat on one joint reward.*--partner_reward_coef 1"):
            CORYTrainer(tiny_run("magrpo-minus", partner_reward_coef=-1.0, **opts))
        return
    minus = _weights(tiny_run, f"{learner}-minus", partner_reward_coef=-1.0, **opts)
    assert _differ(plus, minus), f"{learner} trained the same with partner_reward_coef -1 and +1"


@pytest.mark.parametrize("learner", LEARNERS)
def test_knowledge_transfer_changes_the_update(tiny_run, learner):
    opts = {"learner": learner, **LEARNERS[learner]}
    with_kt = _weights(tiny_run, f"{learner}-kt", **opts)
    without = _weights(tiny_run, f"{learner}-nokt", knowledge_transfer=False, **opts)
    assert _differ(with_kt, without), f"{learner} trained the same with and without knowledge transfer"
