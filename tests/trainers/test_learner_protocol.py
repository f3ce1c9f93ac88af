"""The learner protocol: the docs/extending.md example learners run CORY through the registry; registry errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from trainers.learning import registry as learners
from trainers.learning.configs import GRPOConfig, UpdateConfig
from trainers.learning.grpo import GRPOLearner
from trainers.learning.registry import Learner, make_learner, register_learner
from trainers.learning.ppo import PPOLearner
from trainers.loop.cory import CORYTrainer

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


@pytest.fixture()
def registry(registries):
    """The learner registry, put back after the test (`registries`), so tests never leak learners (or the guide's
    task and reward) into each other."""
    return learners.LEARNERS


def _guide_code() -> str:
    """The guide's learner blocks but its training one, in order (a task, a reward, the REINFORCE learner with its
    options, then the joint learner on it; the matchmaking scheme's two blocks follow them);
    `tests/test_extending.py` runs them all."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 7 and "CORYTrainer(configs)" in blocks[3] and "register_scheme" in blocks[5]
    return "\n".join(blocks[:3] + blocks[4:5])


def test_guide_learner_runs_cory_through_the_registry(registry, tiny_run):
    namespace: dict = {}
    exec(compile(_guide_code(), str(GUIDE), "exec"), namespace)  # noqa: S102 - our own documentation
    assert "reinforce" in registry
    configs = tiny_run(learner="reinforce", num_iterations=2, role_exchange_period=1,
                       reset_on_exchange=True)
    # a reward that varies with the text: VADER scores the tiny model's random text 0, and REINFORCE with R = b = 0
    # has a zero gradient
    trainer = CORYTrainer(configs, reward_fn=lambda queries, responses: [float(len(r)) for r in responses])
    before = {name: [p.detach().clone() for p in b.agent.trainable_parameters()]
              for name, b in trainer.exchange.bundles.items()}
    rows = trainer.train()
    for name, bundle in trainer.exchange.bundles.items():
        assert isinstance(bundle.learner, namespace["ReinforceLearner"])
        assert isinstance(bundle.learner, Learner)
        after = list(bundle.agent.trainable_parameters())
        assert any(not torch.equal(a, b) for a, b in zip(before[name], after)), f"{name} did not move"
    assert {"pioneer/policy_loss", "observer/policy_loss", "llm1/kl", "llm2/combined_reward"} <= set(rows[-1])
    assert rows[-1]["pioneer/kl"] != 0.0  # the models moved away from the shared reference model
    assert rows[0]["cory/role_exchange"] == 1.0


def test_guide_joint_learner_pays_every_seat_the_joint_reward_and_moves_with_role_exchange(registry, tiny_run):
    namespace: dict = {}
    exec(compile(_guide_code(), str(GUIDE), "exec"), namespace)  # noqa: S102 - our own documentation
    assert registry["team-reinforce"].joint
    # partner_reward_coef 0.5: the env pays r1 + 0.5 r2; the team learner pays every seat r1 + r2
    configs = tiny_run(learner="team-reinforce", num_iterations=2, role_exchange_period=1, partner_reward_coef=0.5)
    seen = []
    real = namespace["ReinforceLearner"].step

    def spy(self, rollout, *, generator=None):
        seen.append((self, rollout.scores.clone(), rollout.task_reward.clone()))
        return real(self, rollout, generator=generator)

    namespace["ReinforceLearner"].step = spy
    trainer = CORYTrainer(configs, reward_fn=lambda queries, responses: [float(len(r)) for r in responses])
    assert isinstance(trainer.algorithm, namespace["TeamReinforce"])
    rows = trainer.train()
    learners_ = trainer.algorithm.learners
    # iteration 0: llm1 pioneer, llm2 observer; iteration 1 after the exchange: llm2 pioneer
    assert [s[0] for s in seen] == [learners_["llm1"], learners_["llm2"], learners_["llm2"], learners_["llm1"]]
    for i in (0, 2):  # both seats of an iteration are paid the same joint reward: the sum of their task rewards
        (_, pioneer, r1), (_, observer, r2) = seen[i], seen[i + 1]
        torch.testing.assert_close(pioneer, r1 + r2)
        torch.testing.assert_close(observer, pioneer)
    assert rows[1]["pioneer/task_reward"] == rows[1]["llm2/task_reward"]


def test_two_different_learners_share_one_role_exchange(registry, tiny_run):
    configs = tiny_run(learner="ppo", num_iterations=2, role_exchange_period=1)
    shared = {f.name: getattr(configs.update, f.name) for f in dataclasses.fields(UpdateConfig)}  # the update
    trainer = CORYTrainer(configs)
    llm2 = trainer.exchange.bundles["llm2"]
    # per-seat learners of two kinds: the algorithm (IndependentLearners) steps them, the bundle moves it
    llm2.learner = trainer.algorithm.learners["llm2"] = make_learner("grpo", llm2.agent, trainer.cast.refs["llm2"],
                                                                      GRPOConfig(**shared, group_size=2))
    rows = trainer.train()
    assert type(trainer.exchange.bundles["llm1"].learner) is PPOLearner
    assert type(trainer.exchange.bundles["llm2"].learner) is GRPOLearner
    assert "llm1/value_loss" in rows[-1] and "llm2/kl_loss" in rows[-1]
    assert rows[1]["pioneer/kl_loss"] == rows[1]["llm2/kl_loss"]  # llm2 sat in the pioneer seat at iteration 1


def test_registry_errors(registry, tiny_model, tiny_tok):
    with pytest.raises(ValueError, match="unknown learner 'nope'; known learners: ppo, grpo, mappo, magrpo"):
        make_learner("nope", None, None, None)
    with pytest.raises(ValueError, match="two learners are registered as 'ppo': trainers.learning.ppo:SPEC and"):
        register_learner("ppo", lambda agent, ref, config: None)
    with pytest.raises(TypeError, match="callable"):
        register_learner("bad", 3)
    register_learner("broken", lambda agent, ref, config: object())
    with pytest.raises(TypeError, match="lacks"):
        make_learner("broken", None, None, None)
