"""Joint learners: the protocol, MAPPO's centralized critic and MAGRPO's shared advantage against hand
computations, their runs through the trainer (CLI, exact resume, data-parallel pooling) and the refusals."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from agents import LLMAgent, ReferenceModel, ValueHead
from agents.tiny import tiny_causal_lm
from trainers.config import GRPOConfig, PPOConfig, RunConfigs
from trainers.learning import ppo_math
from trainers.learning.experience import Rollout, pad_sequences
from trainers.learning.grpo import STD_EPS, GRPOLearner
from trainers.learning.joint import IndependentLearners, JointBatch, JointLearner, check_joint_batch
from trainers.learning.registry import learner_spec, make_joint_learner, make_learner
from trainers.learning.magrpo import MAGRPO, joint_reward
from trainers.learning.mappo import MAPPO, joint_critic_inputs
from trainers.learning.ppo import PPOLearner
from trainers.loop.cory import CORYTrainer

PROMPTS = [[5, 6], [7, 8, 9], [10], [11, 12]]
A1 = [[20], [30, 31, 32], [21, 22], [40]]
A2 = [[50, 51], [52], [53, 54, 55], [56]]


def _rollout(prompts, responses, scores, task_reward=None) -> Rollout:
    query, query_mask = pad_sequences(prompts, 0, side="left")
    response, response_mask = pad_sequences(responses, 0, side="right")
    scores = torch.tensor(scores, dtype=torch.float32)
    return Rollout(query, query_mask, response, response_mask, scores,
                   scores if task_reward is None else torch.tensor(task_reward, dtype=torch.float32))


def _two_seats(scores=(1.0, -0.5, 0.25, 2.0)) -> dict[str, Rollout]:
    # the observer's prompt does not hold the pioneer's query (relay: the query is private to the pioneer)
    observer_prompts = [[90] + a for a in A1]
    return {"pioneer": _rollout(PROMPTS, A1, list(scores), [0.5, 0.0, 0.25, 1.0]),
            "observer": _rollout(observer_prompts, A2, list(scores), [0.5, -0.5, 0.0, 1.0])}


@pytest.fixture()
def agents(tiny_tok):
    """Two different tiny agents (llm1, llm2) with value heads, and the reference model they started from."""
    torch.manual_seed(0)
    base = tiny_causal_lm(tiny_tok, seed=0)
    out = {}
    for i, name in enumerate(("llm1", "llm2")):
        policy = copy.deepcopy(base).requires_grad_(True)
        with torch.no_grad():
            gen = torch.Generator().manual_seed(1 + i)
            for p in policy.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        out[name] = LLMAgent(policy, tiny_tok, value_head=ValueHead(policy.config.hidden_size, dropout=0.0))
    return out, ReferenceModel(base)


def _batch(rollouts, models=None, group_size=1) -> JointBatch:
    models = models or {"pioneer": "llm1", "observer": "llm2"}
    return JointBatch(rollouts=rollouts, models=models, group_size=group_size,
                      generators={seat: torch.Generator().manual_seed(i) for i, seat in enumerate(rollouts)})


# ---------------------------------------------------------------------------------------------- the protocol
def test_the_batch_is_checked_before_any_update():
    rollouts = _two_seats()
    owned = {"llm1": None, "llm2": None}
    check_joint_batch(_batch(rollouts), owned, algo="x")  # fine
    with pytest.raises(ValueError, match=r"asked to update \{'observer': 'llm3'\}.*owns only \['llm1', 'llm2'\]"):
        check_joint_batch(_batch(rollouts, {"pioneer": "llm1", "observer": "llm3"}), owned, algo="x")
    with pytest.raises(ValueError, match="names seats"):
        check_joint_batch(_batch(rollouts, {"pioneer": "llm1"}), owned, algo="x")
    short = {**rollouts, "observer": _rollout(PROMPTS[:2], A2[:2], [0.0, 1.0])}
    with pytest.raises(ValueError, match="different batch sizes"):
        check_joint_batch(_batch(short), owned, algo="x")


def test_independent_learners_step_each_seat_on_its_own_rollout(agents):
    agents_, ref = agents
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-3)
    twins = {n: copy.deepcopy(a) for n, a in agents_.items()}
    joint = IndependentLearners({n: PPOLearner(a, ref, config) for n, a in agents_.items()})
    assert isinstance(joint, JointLearner)
    rollouts = _two_seats()
    # after a role exchange llm2 sits in the pioneer seat: each model learns from the seat it sits in
    stats = joint.step(_batch(rollouts, {"pioneer": "llm2", "observer": "llm1"}))
    alone = PPOLearner(twins["llm2"], ref, config).step(rollouts["pioneer"], generator=torch.Generator().manual_seed(0))
    assert stats["pioneer"] == alone


# ---------------------------------------------------------------------------------------------- MAPPO
def test_joint_critic_input_is_the_transcript_before_each_seat():
    rollouts = _two_seats()
    third = _rollout([[70] for _ in A2], [[60], [61, 62], [63], [64, 65]], [0.0] * 4)
    critics = joint_critic_inputs({**rollouts, "observer_2": third})
    assert critics["pioneer"] is None  # the first seat's prompt already is the whole state
    for seat, before in (("observer", [PROMPTS, A1]), ("observer_2", [PROMPTS, A1, A2])):
        expected = [sum((part[i] for part in before), []) for i in range(4)]
        got = critics[seat]
        assert [row[m].tolist() for row, m in zip(got.query, got.query_mask)] == expected
        assert bool(got.query_mask[:, -1].all())  # left padded
        own = {"observer": rollouts["observer"], "observer_2": third}[seat]
        assert torch.equal(got.response, own.response) and torch.equal(got.scores, own.scores)
    with pytest.raises(ValueError, match="at least two seats"):
        joint_critic_inputs({"pioneer": rollouts["pioneer"]})


def test_mappo_values_are_the_value_head_on_the_joint_transcript_and_gae_uses_them(agents):
    agents_, ref = agents
    config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=1, gamma=0.9, lam=0.8, init_kl_coef=0.1)
    learner = PPOLearner(agents_["llm2"], ref, config)
    rollouts = _two_seats()
    critic = joint_critic_inputs(rollouts)["observer"]
    data = learner.prepare(rollouts["observer"], critic)
    obs = rollouts["observer"]
    agent = agents_["llm2"]
    with torch.no_grad():  # by hand: each row alone, prompt + a1 + a2 in one unpadded sequence
        for i in range(4):
            ids = torch.tensor([PROMPTS[i] + A1[i]])
            n = len(A2[i])
            values = agent.evaluate(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([A2[i]]),
                                    torch.ones(1, n, dtype=torch.bool)).values[0]
            torch.testing.assert_close(data["values"][i, :n], values, rtol=1e-4, atol=1e-5)
        own = agent.evaluate(obs.query, obs.query_mask, obs.response, obs.response_mask).values
    assert not torch.allclose(data["values"], own * obs.response_mask)  # not the observer's own view
    # GAE by hand, backwards, with those values, then masked whitening (TRL)
    mask, rewards, values = obs.response_mask, data["rewards"], data["values"]
    raw = torch.zeros_like(rewards)
    for i in range(4):
        n, nxt = int(mask[i].sum()), 0.0
        for t in reversed(range(n)):
            v_next = float(values[i, t + 1]) if t + 1 < n else 0.0
            nxt = float(rewards[i, t]) + 0.9 * v_next - float(values[i, t]) + 0.9 * 0.8 * nxt
            raw[i, t] = nxt
    expected = ppo_math.masked_whiten(raw, mask) * mask
    torch.testing.assert_close(data["advantages"], expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(data["returns"], (raw + values) * mask, rtol=1e-4, atol=1e-5)


def test_mappo_pioneer_is_ppo_and_the_observer_differs(agents):
    agents_, ref = agents
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=2, learning_rate=1e-3, vf_coef=0.5)
    twins = {n: copy.deepcopy(a) for n, a in agents_.items()}
    rollouts = _two_seats()
    mappo = MAPPO(agents_, ref, config)
    ippo = IndependentLearners({n: PPOLearner(a, ref, config) for n, a in twins.items()})
    joint, independent = mappo.step(_batch(rollouts)), ippo.step(_batch(rollouts))
    assert joint["pioneer"] == independent["pioneer"]
    assert joint["observer"]["value_loss"] != independent["observer"]["value_loss"]
    for a, b in zip(agents_["llm1"].trainable_parameters(), twins["llm1"].trainable_parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="at least two models"):
        MAPPO({"llm1": agents_["llm1"]}, ref, config)


def test_mappo_data_parallel_pools_the_centralized_advantages_over_processes(agents):
    """Each model's PPOLearner gets the run's group: the observer's joint-transcript advantages are whitened over
    every process's tokens (two identical processes: local advantages · sqrt((2n - 1) / (2n - 2)), as PPO's)."""
    from tests.trainers.fake_dist import TwoIdenticalProcesses

    agents_, ref = agents
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-3)
    dist = TwoIdenticalProcesses()
    local, pooled = MAPPO(agents_, ref, config), MAPPO(agents_, ref, config, dist=dist)
    assert all(learner.dist is dist for learner in pooled.learners.values())
    rollouts = _two_seats()
    critic = joint_critic_inputs(rollouts)["observer"]
    one = local.learners["llm2"].prepare(rollouts["observer"], critic)
    two = pooled.learners["llm2"].prepare(rollouts["observer"], critic)
    n = int(rollouts["observer"].response_mask.sum())
    torch.testing.assert_close(two["advantages"], one["advantages"] * ((2 * n - 1) / (2 * n - 2)) ** 0.5,
                               rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(two["values"], one["values"])


# ---------------------------------------------------------------------------------------------- MAGRPO
def test_magrpo_advantage_is_the_joint_rewards_group_advantage_shared_by_every_seat(agents):
    agents_, ref = agents
    config = dict(batch_size=4, mini_batch_size=4, ppo_epochs=1, init_kl_coef=0.0)
    magrpo = MAGRPO(agents_, ref, GRPOConfig(group_size=2, **config))
    rollouts = _two_seats()
    joint = joint_reward(rollouts)
    torch.testing.assert_close(joint, torch.tensor([1.0, -0.5, 0.25, 2.0]))  # r(q, a1) + r(q, a2)
    # groups (1.0, -0.5) and (0.25, 2.0): mean-centred, divided by the unbiased std + 1e-4
    d1, d2 = 0.75 / (1.5 / 2 ** 0.5 + STD_EPS), 0.875 / (1.75 / 2 ** 0.5 + STD_EPS)
    expected = torch.tensor([d1, -d1, -d2, d2])
    shared = magrpo.joint_rollouts(_batch(rollouts, group_size=2))
    for seat, rollout in shared.items():
        learner = magrpo.learners[{"pioneer": "llm1", "observer": "llm2"}[seat]]
        torch.testing.assert_close(learner.prepare(rollout)["advantages"], expected)
    centred = MAGRPO(agents_, ref, GRPOConfig(group_size=2, scale_rewards=False, **config))
    data = centred.learners["llm1"].prepare(centred.joint_rollouts(_batch(rollouts, group_size=2))["pioneer"])
    torch.testing.assert_close(data["advantages"], torch.tensor([0.75, -0.75, -0.875, 0.875]))  # MAGRPO eq. 1
    with pytest.raises(ValueError, match="groups of 4 rows, GRPOConfig.group_size is 2"):
        magrpo.step(_batch(rollouts, group_size=4))
    with pytest.raises(ValueError, match="needs at least 2 samples per query"):
        GRPOConfig(group_size=1, **config)


def test_magrpo_equals_cory_grpo_with_a_partner_coefficient_of_one_and_refuses_another(tiny_run):
    from tests.trainers.test_cory_trainer import _strip_time

    reward = lambda queries, responses: [float(len(r) % 3) for r in responses]  # noqa: E731 - a spread
    opts = dict(group_size=2, num_iterations=2, role_exchange_period=1)
    grpo = CORYTrainer(tiny_run("grpo", learner="grpo", **opts), reward_fn=reward).train()
    magrpo = CORYTrainer(tiny_run("magrpo", learner="magrpo", **opts), reward_fn=reward).train()
    assert _strip_time(magrpo) == _strip_time(grpo)
    half = dict(opts, partner_reward_coef=0.5)
    CORYTrainer(tiny_run("grpo-h", learner="grpo", **half), reward_fn=reward).train()  # per-seat rewards: fine
    with pytest.raises(ValueError, match="trains every seat on one joint reward"):  # it would train on another
        CORYTrainer(tiny_run("magrpo-h", learner="magrpo", **half), reward_fn=reward)


# ---------------------------------------------------------------------------------------------- through the trainer
@pytest.mark.parametrize("learner, extra", [("mappo", {}), ("magrpo", {"group_size": 2})])
def test_joint_learners_train_and_resume_exactly(tiny_run, learner, extra):
    from tests.trainers.test_cory_trainer import _strip_time

    opts = dict(learner=learner, role_exchange_period=3, **extra)
    full = CORYTrainer(tiny_run(f"{learner}-full", num_iterations=4, **opts)).train()
    CORYTrainer(tiny_run(f"{learner}-part", num_iterations=2, **opts)).train()
    resumed = CORYTrainer(tiny_run(f"{learner}-part", num_iterations=4, resume=True, **opts))
    assert type(resumed.algorithm).__name__ == learner.upper()
    assert resumed.exchange.bundles["llm1"].learner is resumed.algorithm.learners["llm1"]
    assert _strip_time(resumed.train()) == _strip_time(full[2:])
    assert full[2]["cory/pioneer_is_llm1"] == 1.0 and full[3]["cory/pioneer_is_llm1"] == 0.0  # exchanged after 3


RELAY = {"task": "relay", "context_len": 12, "batch_size": 8, "mini_batch_size": 4}


def test_mappo_trains_beside_frozen_snapshots(tiny_run):
    """#60.9b: a centralized critic in a snapshots population: the frozen partner's rollout stays in the batch (the
    critic reads its answers), only the learning seats update (was: ValueError 'a centralized critic needs at least
    two seats, got ['pioneer']' at the first iteration with a frozen seat, after training the ones before)."""
    trainer = CORYTrainer(tiny_run("mappo-snap", num_iterations=3, learner="mappo", population=2, **RELAY,
                                   matchmaking="snapshots", matchmaking_options=["every=1", "p_snapshot=1.0"]))
    rows = trainer.train()
    assert [r.get("cory/observer_frozen", 0.0) for r in rows] == [0.0, 1.0, 1.0]
    assert all("pioneer/value_loss" in r for r in rows)  # the learning seat trained with its critic every iteration
    assert ["observer/value_loss" in r for r in rows] == [True, False, False]  # the snapshot never learns


def test_a_failed_update_keeps_the_iteration_before_resumable(tiny_run, tmp_path, monkeypatch):
    """#60.9b: an update that fails at iteration 2 before any weight changed (a learner's ValueError, as MAPPO's critic
    beside a frozen seat raised) leaves the checkpoint of iteration 1, complete and holding the weights of then, even
    without periodic checkpoints; --resume continues from it exactly (was: nothing saved, every iteration lost)."""
    from tests.trainers.test_cory_trainer import _strip_time
    from tests.trainers.test_nonfinite import _assert_weights_are_the_checkpoints
    from trainers.loop.checkpoint import latest_checkpoint

    opts = dict(learner="mappo", num_iterations=4, checkpoint_every=0, checkpoint_every_minutes=0)
    full = CORYTrainer(tiny_run("full", **opts)).train()
    step, calls = MAPPO.step, []

    def fails_at_iteration_2(self, batch):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("the learner failed in iteration 2")
        return step(self, batch)

    monkeypatch.setattr(MAPPO, "step", fails_at_iteration_2)
    trainer = CORYTrainer(tiny_run("cut", **opts))
    with pytest.raises(ValueError, match="failed in iteration 2"):
        trainer.train()
    last = latest_checkpoint(tmp_path / "cut")
    assert last is not None and last.name == "iter-000001" and (last / "trainer_state.json").is_file()
    _assert_weights_are_the_checkpoints(trainer, last)
    monkeypatch.undo()
    resumed = CORYTrainer(tiny_run("cut", resume=True, **opts))
    assert resumed.start_iteration == 2
    assert _strip_time(resumed.train()) == _strip_time(full[2:])


def test_magrpo_joint_reward_is_the_collective_reward_whoever_is_frozen(tiny_run, tmp_path):
    """#60.12: MAGRPO trains every learning seat on the joint reward, the sum of every seat's task reward, a frozen
    snapshot's included, so in every iteration of a snapshots population it equals the collective reward (was: a frozen
    partner's task reward left out of the joint reward)."""
    from trainers.loop.metrics import read_jsonl

    seats = ("pioneer", "observer_1", "observer_2")
    CORYTrainer(tiny_run("magrpo-snap", num_iterations=6, learner="magrpo", group_size=2, seating="chain:3",
                         population=3, **RELAY, matchmaking="snapshots",
                         matchmaking_options=["every=1", "keep=2", "p_snapshot=0.5"])).train()
    rows = read_jsonl(tmp_path / "magrpo-snap" / "metrics.jsonl")
    frozen = [{s for s in seats if r.get(f"cory/{s}_frozen")} for r in rows]
    assert set().union(*frozen) == {"observer_1", "observer_2"}  # each later seat held a snapshot at some point
    # the case that tells: a frozen seat that scored (its reward was the part left out)
    assert any(r[f"{s}/task_reward"] != 0 for r, f in zip(rows, frozen) for s in f)
    for row, f in zip(rows, frozen):
        collective = row["cory/collective_reward"]
        assert collective == pytest.approx(sum(row[f"{s}/task_reward"] for s in seats))  # M is all ones
        for seat in set(seats) - f:  # every learning seat optimised the joint reward
            assert row[f"{seat}/score"] == pytest.approx(collective), (row["iteration"], seat)


@pytest.mark.parametrize("overrides, message", [
    ({"seating": "ppo", "learner": "mappo"}, "needs at least two seats"),
    ({"learner": "magrpo", "group_size": 1}, "needs at least 2 samples per query"),
    ({"learner": "magrpo", "group_size": 3}, "do not split into groups of group_size=3"),
])
def test_refused_before_any_model_loads(tiny_run, overrides, message, monkeypatch):
    from trainers.loop import cast

    def trap(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(cast, "load_policy_model", trap)
    with pytest.raises(ValueError, match=message):
        CORYTrainer(tiny_run(**overrides))


def test_cli_refuses_a_centralized_critic_on_the_single_agent_seating(tmp_path, capsys):
    from trainers.cli import main

    code = main(["train", "--model", "tiny", "--algo", "ppo", "--learner", "mappo", "--output_dir",
                 str(tmp_path / "r")])
    assert code == 2 and "needs at least two seats" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_make_joint_learner_wraps_per_seat_learners_and_checks_joint_factories(agents):
    agents_, ref = agents
    config = PPOConfig(batch_size=4, mini_batch_size=4)
    ippo = make_joint_learner("ppo", agents_, ref, config)
    assert isinstance(ippo, IndependentLearners) and set(ippo.learners) == {"llm1", "llm2"}
    grpo = make_joint_learner("grpo", agents_, ref, GRPOConfig(batch_size=4, mini_batch_size=4, group_size=2))
    assert all(isinstance(lr, GRPOLearner) and lr.config.group_size == 2 for lr in grpo.learners.values())
    with pytest.raises(TypeError, match="reads a GRPOConfig, got a PPOConfig"):
        make_joint_learner("grpo", agents_, ref, config)
    learner_spec("mappo").check_run(config, name="mappo", seats=2)
    with pytest.raises(ValueError, match="needs at least two seats"):
        learner_spec("mappo").check_run(config, name="mappo", seats=1)
    with pytest.raises(ValueError, match="is a joint learner"):
        make_learner("mappo", agents_["llm1"], ref, config)


def test_a_joint_factory_must_own_every_model_it_is_built_for(agents, registries):
    from trainers.learning import registry as learners

    agents_, ref = agents

    class OnlyFirst:
        def __init__(self, agents, ref_model, config):
            self.learners = {"llm1": PPOLearner(agents["llm1"], ref_model, config)}

        def step(self, batch):
            return {}

    learners.register_learner("only-first", OnlyFirst, joint=True)
    with pytest.raises(TypeError, match=r"owns no learner for model\(s\) \['llm2'\]"):
        make_joint_learner("only-first", agents_, ref, PPOConfig(batch_size=4, mini_batch_size=4))
    with pytest.raises(TypeError, match="unknown LearnerSpec field"):
        learners.register_learner("typo", OnlyFirst, jiont=True)


def test_a_grpo_config_yaml_reads_back_into_one_grpo_config(tmp_path):
    """GRPO's own fields and the shared update live in one GRPOConfig under the same flat names: a run's config.yaml
    reads back into it, and resuming with it finds no difference."""
    import yaml

    from trainers.config.parser import load_yaml_config
    from trainers.loop.run_dir import check_resumable

    old = RunConfigs.from_flat({"learner": "grpo"}).to_flat()
    old.update(group_size=4, scale_rewards=False, kl_in_loss=False, batch_size=8, mini_batch_size=4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(old))
    configs = RunConfigs.from_flat(load_yaml_config(path), strict=True)
    assert configs.update == GRPOConfig(group_size=4, scale_rewards=False, kl_in_loss=False, batch_size=8,
                                        mini_batch_size=4)
    assert not hasattr(configs.update, "gamma")  # PPO's own fields are not GRPO's
    check_resumable(old, configs.to_flat(), tmp_path)
