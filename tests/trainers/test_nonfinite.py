"""A NaN/inf loss, gradient or weight never reaches the weights nor a checkpoint, whoever wrote the learner, and a
resume after the cause is fixed continues from the last good checkpoint (issue 52, item 4)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from safetensors.torch import load_file

from trainers.learning.registry import register_learner
from trainers.learning.update import NonFiniteLossError, optimizer_step
from trainers.loop import checkpoint as ckpt
from trainers.loop.cory import CORYTrainer

#: What the plug-in learner below does wrong, set by each test: from which of its steps (counted over every model
#: and iteration) its loss is NaN, it writes NaN into a weight, or it returns a NaN statistic (None: never).
FAULT: dict[str, int | None] = {}
STEPS = {"n": 0}


@pytest.fixture(autouse=True)
def _no_fault():
    FAULT.clear()
    FAULT.update(nan_loss=None, nan_weight=None, nan_stat=None)
    STEPS["n"] = 0
    yield
    FAULT.clear()


def _faulty(kind: str) -> bool:
    start = FAULT.get(kind)
    return start is not None and STEPS["n"] > start


class PlainLearner:
    """REINFORCE on its own `torch.optim.Adam`, with none of the project's helpers (no loss or gradient check)."""

    kl_coef = 0.0

    def __init__(self, agent, ref_model, config):
        self.agent, self.config = agent, config
        self.params = list(agent.trainable_parameters())
        self.reset_state()

    def reset_state(self):
        self.optimizer = torch.optim.Adam(self.params, lr=self.config.learning_rate)

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])

    def step(self, rollout, *, generator=None):
        STEPS["n"] += 1
        batch = (rollout.query, rollout.query_mask, rollout.response, rollout.response_mask)
        logprobs = self.agent.evaluate(*batch).logprobs * rollout.response_mask
        loss = -((rollout.scores - rollout.scores.mean()) * logprobs.sum(dim=-1)).mean()
        if _faulty("nan_loss"):
            loss = loss * float("nan")
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if _faulty("nan_weight"):
            with torch.no_grad():
                self.params[0].view(-1)[0] = float("inf")
        stats = {"task_reward": float(rollout.task_reward.mean()), "kl": 0.0, "policy_loss": float(loss.detach())}
        if _faulty("nan_stat"):
            stats["odd_stat"] = float("nan")
        return stats


def length_reward(queries, responses):
    """A reward that varies with the text, so the plain learner's gradient is not zero."""
    return [float(len(r)) for r in responses]


def _plain_run(tiny_run, registries, name="plain", **overrides):
    register_learner("plain", PlainLearner, value_head=False, overwrite=True)
    configs = tiny_run(name, learner="plain", **{"num_iterations": 3, "checkpoint_every": 1, **overrides})
    return CORYTrainer(configs, reward_fn=length_reward)


def _assert_weights_are_the_checkpoints(trainer, checkpoint):
    for name, bundle in trainer.exchange.bundles.items():
        saved = load_file(str(checkpoint / name / "trainable.safetensors"))
        now = ckpt.trainable_state(bundle.agent)
        assert saved.keys() == now.keys()
        for key in saved:
            assert torch.isfinite(saved[key]).all(), f"{name}'s {key} was checkpointed non-finite"
            assert torch.equal(saved[key], now[key]), f"{name}'s {key} moved after the last good checkpoint"


# ---------------------------------------------------------------------------------------------- optimizer_step
def test_optimizer_step_refuses_a_non_finite_gradient_without_max_grad_norm():
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([1.0, float("nan"), 0.0])
    optimizer = torch.optim.Adam([p], lr=0.1)
    with pytest.raises(NonFiniteLossError, match="gradient norm is not finite"):
        optimizer_step(optimizer, [p], max_grad_norm=None)
    assert torch.equal(p.detach(), torch.zeros(3)) and not optimizer.state  # neither weights nor Adam moved


def test_optimizer_step_without_max_grad_norm_steps_as_an_unchecked_step():
    torch.manual_seed(0)
    grads = [torch.randn(4, 3), torch.randn(5)]
    checked = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    plain = [torch.nn.Parameter(p.detach().clone()) for p in checked]
    for params in (checked, plain):
        for p, g in zip(params, grads):
            p.grad = g.clone()
    optimizer_step(torch.optim.Adam(checked, lr=0.1), checked, max_grad_norm=None)
    torch.optim.Adam(plain, lr=0.1).step()
    assert all(torch.equal(a, b) for a, b in zip(checked, plain))


def test_first_nonfinite_names_the_tensor_and_ignores_a_norm_that_only_overflows():
    from trainers.learning.update import first_nonfinite

    ok, huge = torch.ones(3), torch.full((4,), 1e30)  # finite, but its squared norm overflows float32
    assert first_nonfinite([ok, huge]) is None
    assert first_nonfinite([ok, torch.tensor([1.0, float("-inf")]), torch.tensor([float("nan")])]) == 1
    assert first_nonfinite([torch.ones(2, dtype=torch.bfloat16), torch.tensor([float("nan")]).bfloat16()]) == 1
    assert first_nonfinite([]) is None


# ---------------------------------------------------------------------------------------------- the checkpoint writer
def test_checkpoint_with_non_finite_weights_is_refused_and_latest_kept(tmp_path):
    good = {"w": torch.ones(2)}

    def states(first, second):
        yield "llm1", first, {"optimizer": {}}
        yield "llm2", second, {"optimizer": {}}

    kwargs = dict(exchange_state={}, run_state={"config": {}})
    ckpt.save_checkpoint(tmp_path, 0, states=states(good, good), **kwargs)
    bad = {"w": torch.tensor([1.0, float("nan")])}
    rest = states(bad, good)
    with pytest.raises(NonFiniteLossError, match=r"iter-000001: llm1's w holds NaN/inf; the last good checkpoint is "
                                                 r".*iter-000000 .*--resume continues from it"):
        ckpt.save_checkpoint(tmp_path, 1, states=rest, **kwargs)
    assert next(rest, None) is None  # drained: FSDP2 processes gathering in step with it are not left waiting
    root = tmp_path / ckpt.CHECKPOINT_DIR
    assert ckpt.latest_checkpoint(tmp_path).name == "iter-000000"
    assert sorted(p.name for p in root.iterdir()) == ["iter-000000", "latest"]  # no iter-000001, no temp folder


# ---------------------------------------------------------------------------------------------- the trainer's guard
def test_a_plugin_learners_nan_loss_never_reaches_the_weights_and_resume_continues(registries, tiny_run, tmp_path):
    FAULT["nan_loss"] = 2  # iteration 0 (two models) is fine; iteration 1's first step has a NaN loss
    trainer = _plain_run(tiny_run, registries)
    with pytest.raises(NonFiniteLossError, match=r"gradient llm\d's .* holds NaN/inf in learner 'plain'.*the "
                                                 r"optimizer did not step; the last good checkpoint is .*iter-000000 "
                                                 r"\(`latest`\): once the cause is fixed, --resume continues from it"):
        trainer.train()
    last = ckpt.latest_checkpoint(tmp_path / "plain")
    assert last.name == "iter-000000"
    _assert_weights_are_the_checkpoints(trainer, last)
    FAULT["nan_loss"] = None  # the cause fixed (the plug-in's bug), with the same options
    resumed = _plain_run(tiny_run, registries, resume=True)
    assert resumed.start_iteration == 1
    rows = resumed.train()
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(math.isfinite(r[f"{seat}/policy_loss"]) for r in rows for seat in ("pioneer", "observer"))
    assert ckpt.latest_checkpoint(tmp_path / "plain").name == "iter-000002"


def test_a_learner_writing_non_finite_weights_is_stopped_before_any_checkpoint(registries, tiny_run, tmp_path):
    FAULT["nan_weight"] = 2
    trainer = _plain_run(tiny_run, registries)
    with pytest.raises(NonFiniteLossError, match=r"the weight llm\d's \S+ holds NaN/inf after learner 'plain''s "
                                                 r"update .*the last good checkpoint is .*iter-000000"):
        trainer.train()
    last = ckpt.latest_checkpoint(tmp_path / "plain")
    assert last.name == "iter-000000"
    for name in ("llm1", "llm2"):
        saved = load_file(str(last / name / "trainable.safetensors"))
        assert all(torch.isfinite(t).all() for t in saved.values())


def test_a_built_in_learners_nan_gradient_is_refused_without_max_grad_norm(tiny_run, tmp_path):
    configs = tiny_run("ppo", num_iterations=2, checkpoint_every=1)
    assert configs.update.max_grad_norm is None
    rows = CORYTrainer(configs).train()  # iterations 0 and 1, checkpointed
    more = CORYTrainer(tiny_run("ppo", num_iterations=3, checkpoint_every=1, resume=True))
    param = next(iter(more.exchange.seats["pioneer"].agent.trainable_parameters()))
    param.register_hook(lambda grad: grad * float("nan"))  # a finite loss whose backward goes NaN
    with pytest.raises(NonFiniteLossError, match=r"gradient norm is not finite.*the last good checkpoint is "
                                                 r".*iter-000001"):
        more.train()
    assert len(rows) == 2 and ckpt.latest_checkpoint(tmp_path / "ppo").name == "iter-000001"
    _assert_weights_are_the_checkpoints(more, ckpt.latest_checkpoint(tmp_path / "ppo"))


def test_a_rescue_checkpoint_never_holds_non_finite_weights(tiny_run, tmp_path, caplog):
    trainer = CORYTrainer(tiny_run("rescue", num_iterations=3, checkpoint_every=0, checkpoint_every_minutes=0))

    def poison(trainer_, done):  # weights changed outside the update (after iteration 0, before iteration 1)
        with torch.no_grad():
            for p in trainer_.exchange.bundles["llm1"].agent.trainable_parameters():
                p.fill_(float("nan"))
        return {}

    with caplog.at_level(logging.ERROR, logger="trainers.loop.cory"):
        with pytest.raises(ValueError, match="non-finite logits"):  # the rollout of iteration 1 fails first
            trainer.train(eval_at=[1], evaluate=poison)
    assert ckpt.latest_checkpoint(tmp_path / "rescue") is None
    assert "saving the checkpoint of iteration 0 failed too" in caplog.text and "llm1's" in caplog.text


def test_a_non_finite_statistic_is_warned_about_once(registries, tiny_run, caplog):
    FAULT["nan_stat"] = 0
    trainer = _plain_run(tiny_run, registries, num_iterations=2, checkpoint_every=0)
    with caplog.at_level(logging.WARNING, logger="trainers.loop.guards"):
        rows = trainer.train()
    assert math.isnan(rows[-1]["pioneer/odd_stat"])
    warned = [r.getMessage() for r in caplog.records if "odd_stat" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "learner 'plain' returned odd_stat=nan for llm1 in seat pioneer" in warned[0]
