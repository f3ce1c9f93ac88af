"""The update loop every learner shares (`trainers.learning.update`), on hand-sized tensors."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.config import GRPOConfig, PPOConfig
from trainers.learning.update import (
    NonFiniteLossError,
    backward_batches,
    global_sequence_kl,
    mean_over_minibatches,
    optimizer_step,
)
from tests.trainers.fake_dist import TwoIdenticalProcesses
from trainers.distributed import DataParallel


def _flat(batches):
    return torch.cat([idx for step in batches for idx in step])


def test_backward_batches_cover_every_row_once_in_the_generator_order():
    config = PPOConfig(batch_size=8, mini_batch_size=2, gradient_accumulation_steps=2)
    steps = list(backward_batches(config, torch.Generator().manual_seed(3)))
    # 8 rows, 2 × 2 rows per optimiser step: 2 steps of 2 mini-batches of 2 rows
    assert [[len(idx) for idx in step] for step in steps] == [[2, 2], [2, 2]]
    order = _flat(steps)
    assert sorted(order.tolist()) == list(range(8))
    assert torch.equal(order, torch.randperm(8, generator=torch.Generator().manual_seed(3)))
    other = _flat(backward_batches(config, torch.Generator().manual_seed(4)))
    assert not torch.equal(order, other)


class _Recorder(DataParallel):
    def __init__(self):
        super().__init__()
        self.synced = []

    def sync_gradients(self, params, bucket_numel=1 << 24):
        self.synced.append(list(params))


def _param_with_grad(grad):
    p = torch.nn.Parameter(torch.zeros(len(grad)))
    p.grad = torch.tensor(grad)
    return p


def test_optimizer_step_clips_the_gradient_norm_then_steps_and_clears_the_gradients():
    p = _param_with_grad([3.0, 4.0])  # norm 5
    optimizer_step(torch.optim.SGD([p], lr=1.0), [p], max_grad_norm=1.0)
    torch.testing.assert_close(p.detach(), torch.tensor([-0.6, -0.8]))  # the gradient scaled to norm 1
    assert p.grad is None  # set to None, not zeros (no memory held between steps)
    q = _param_with_grad([3.0, 4.0])
    optimizer_step(torch.optim.SGD([q], lr=1.0), [q], max_grad_norm=None)  # no clipping
    torch.testing.assert_close(q.detach(), torch.tensor([-3.0, -4.0]))


def test_optimizer_step_averages_gradients_over_processes_first():
    p = _param_with_grad([1.0, 1.0])
    dist = _Recorder()
    optimizer_step(torch.optim.SGD([p], lr=1.0), [p], max_grad_norm=None, dist=dist)
    assert dist.synced == [[p]]


def test_optimizer_step_refuses_a_non_finite_gradient_and_leaves_the_weights():
    p = _param_with_grad([float("inf"), 1.0])
    with pytest.raises(NonFiniteLossError, match=r"^gradient norm is not finite; the last checkpoint is intact$"):
        optimizer_step(torch.optim.SGD([p], lr=1.0), [p], max_grad_norm=1.0)
    assert torch.equal(p.detach(), torch.zeros(2))


def test_global_sequence_kl_is_the_batch_mean_of_token_sums():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    kl = torch.tensor([[0.5, 0.25, 9.0], [1.0, 9.0, 9.0]])
    logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-1.5, 0.0, 0.0]])
    ref_logprobs = torch.tensor([[-1.5, -1.0, 5.0], [-1.0, 5.0, 5.0]])
    # rows: kl 0.75 and 1.0 -> 0.875; k1 (0.5 - 1.0) = -0.5 and -0.5 -> -0.5 (padding ignored)
    kl_mean, k1_mean = global_sequence_kl(kl, logprobs, ref_logprobs, mask, DataParallel())
    assert kl_mean == pytest.approx(0.875) and k1_mean == pytest.approx(-0.5)


def test_mean_over_minibatches_skips_undefined_values():
    stats = [{"loss": 1.0, "var": float("nan")}, {"loss": 2.0, "var": 4.0}, {"loss": 6.0, "var": float("nan")}]
    out = mean_over_minibatches(stats)
    assert out["loss"] == pytest.approx(3.0) and out["var"] == 4.0
    assert math.isnan(mean_over_minibatches([{"var": float("nan")}, {"var": float("nan")}])["var"])


def test_run_epochs_accumulates_mean_gradients_clips_and_syncs_per_optimiser_step():
    from trainers.learning.update import run_epochs

    p = torch.nn.Parameter(torch.zeros(2))
    config = PPOConfig(batch_size=4, mini_batch_size=1, gradient_accumulation_steps=2, ppo_epochs=1,
                       max_grad_norm=1.0)
    seen, dist = [], _Recorder()

    def loss_fn(idx):
        seen.append(int(idx[0]))
        return (p * torch.tensor([3.0, 4.0])).sum(), {"loss": 1.0}  # gradient (3, 4) per mini-batch

    torch.manual_seed(123)  # the global RNG must not decide the order
    stats, epochs, stopped = run_epochs(config, torch.optim.SGD([p], lr=1.0), [p], dist,
                                        torch.Generator().manual_seed(5), loss_fn)
    # each optimiser step: the mean of 2 mini-batch gradients = (3, 4), norm 5, clipped to norm 1: (0.6, 0.8)
    torch.testing.assert_close(p.detach(), torch.tensor([-1.2, -1.6]))
    assert len(dist.synced) == 2 and dist.synced[0] == [p]
    assert seen == torch.randperm(4, generator=torch.Generator().manual_seed(5)).tolist()
    assert (len(stats), epochs, stopped) == (4, 1, False)
    # without clipping the step is the mean gradient itself: two steps of -(3, 4)
    q = torch.nn.Parameter(torch.zeros(2))
    unclipped = PPOConfig(batch_size=4, mini_batch_size=1, gradient_accumulation_steps=2, ppo_epochs=1)
    run_epochs(unclipped, torch.optim.SGD([q], lr=1.0), [q], None, torch.Generator().manual_seed(5),
               lambda idx: ((q * torch.tensor([3.0, 4.0])).sum(), {"loss": 1.0}))
    torch.testing.assert_close(q.detach(), torch.tensor([-6.0, -8.0]))


def test_an_agent_without_trainable_parameters_is_refused():
    from types import SimpleNamespace

    from trainers.learning.update import checked_trainable_parameters

    agent = SimpleNamespace(trainable_parameters=lambda: [])
    ref = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"^the agent has no trainable parameter; check use_lora / requires_grad "
                                         r"settings$"):
        checked_trainable_parameters(agent, ref)


def test_make_adam_uses_the_fused_kernel_for_float_cpu_parameters_and_falls_back_otherwise():
    from trainers.learning.update import make_adam

    real = torch.nn.Parameter(torch.zeros(2))
    adam = make_adam([real], lr=0.01)
    assert adam.defaults["fused"] is True and adam.defaults["lr"] == 0.01
    complex_param = torch.nn.Parameter(torch.zeros(2, dtype=torch.complex64))  # no fused kernel for complex
    adam = make_adam([complex_param], lr=0.02)
    assert not adam.defaults["fused"] and adam.defaults["lr"] == 0.02
    assert adam.param_groups[0]["params"] == [complex_param]
    mixed = make_adam([real, complex_param], lr=0.03)  # every parameter must qualify
    assert not mixed.defaults["fused"]


class _GradientRecorder(torch.optim.SGD):
    """SGD with lr 0 that keeps a copy of the gradient it was asked to step with (the step's whole gradient)."""

    def __init__(self, params):
        self.grads: list[torch.Tensor] = []
        super().__init__(params, lr=0.0)

    def step(self, closure=None):
        self.grads.append(torch.cat([p.grad.reshape(-1).clone() for g in self.param_groups for p in g["params"]
                                     if p.grad is not None]))
        return super().step(closure)


def _step_gradient(learner_cls, tiny_tok, *, mini_batch: int, accum: int, over: str = "optimizer_step",
                   **extra) -> torch.Tensor:
    """The gradient of the one optimiser step a learner takes on 4 rows with 1, 12, 3, 20 response tokens (every
    split into two mini-batches of two rows is uneven)."""
    import copy

    from agents import LLMAgent, ReferenceModel, ValueHead
    from agents.tiny import tiny_causal_lm
    from trainers.learning.experience import Rollout, pad_sequences

    torch.manual_seed(0)  # the value head's initialisation
    base = tiny_causal_lm(tiny_tok, seed=0)
    policy = copy.deepcopy(base).requires_grad_(True)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    agent = LLMAgent(policy, tiny_tok, value_head=ValueHead(policy.config.hidden_size, dropout=0.0))
    config = (GRPOConfig if extra else PPOConfig)(batch_size=4, mini_batch_size=mini_batch,
                                                   gradient_accumulation_steps=accum, ppo_epochs=1,
                                                   token_mean_over=over, **extra)
    learner = learner_cls(agent, ReferenceModel(base), config)
    learner.optimizer = _GradientRecorder(learner._params)
    query, query_mask = pad_sequences([[5, 6], [7, 8, 9], [10], [11, 12]], 0, side="left")
    response, response_mask = pad_sequences([[20], list(range(30, 42)), [21, 22, 23], list(range(50, 70))], 0,
                                            side="right")
    scores = torch.tensor([1.0, -0.5, 0.25, 2.0])
    learner.step(Rollout(query, query_mask, response, response_mask, scores, scores.clone()),
                 generator=torch.Generator().manual_seed(0))
    assert len(learner.optimizer.grads) == 1
    return learner.optimizer.grads[0]


@pytest.mark.parametrize("learner", ["ppo", "grpo"])
def test_gradient_accumulation_gives_the_gradient_of_the_larger_mini_batch(tiny_tok, learner):
    """4 x 1 and 2 x 2 (mini-batch x accumulation) are one gradient; TRL 0.11's per-mini-batch
    token means (over="mini_batch") are not (cosine ~0.5 measured before the fix)."""
    from trainers.learning.grpo import GRPOLearner
    from trainers.learning.ppo import PPOLearner

    cls, extra = (PPOLearner, {}) if learner == "ppo" else (GRPOLearner, {"group_size": 2})
    whole = _step_gradient(cls, tiny_tok, mini_batch=4, accum=1, **extra)
    split = _step_gradient(cls, tiny_tok, mini_batch=2, accum=2, **extra)
    torch.testing.assert_close(split, whole, rtol=1e-4, atol=1e-7)
    trl = _step_gradient(cls, tiny_tok, mini_batch=2, accum=2, over="mini_batch", **extra)
    cosine = float(torch.nn.functional.cosine_similarity(trl, whole, dim=0))
    assert cosine < 0.99  # the rows' lengths weigh differently: not the undivided batch's gradient (0.96 here)
    # one mini-batch per step: both rules are TRL's token mean
    torch.testing.assert_close(_step_gradient(cls, tiny_tok, mini_batch=4, accum=1, over="mini_batch", **extra), whole)


def test_step_loss_weights_by_tokens_and_the_trl_rule():
    from trainers.learning.update import step_loss_weights

    tokens = torch.tensor([1, 12, 1, 12])
    mbs = [torch.tensor([0, 1]), torch.tensor([2, 3])]
    assert step_loss_weights(tokens, mbs) == pytest.approx([0.5, 0.5])
    uneven = [torch.tensor([0, 2]), torch.tensor([1, 3])]  # 2 and 24 tokens
    assert step_loss_weights(tokens, uneven) == pytest.approx([2 / 26, 24 / 26])
    assert step_loss_weights(tokens, uneven, over="mini_batch") == pytest.approx([0.5, 0.5])
    two = TwoIdenticalProcesses()  # each process holds the same rows: each has half the global tokens
    assert step_loss_weights(tokens, uneven, dist=two) == pytest.approx([2 / 26, 24 / 26])
    with pytest.raises(ValueError, match="token_mean_over must be one of"):
        step_loss_weights(tokens, mbs, over="sequence")
    with pytest.raises(ValueError, match="no response token"):
        step_loss_weights(torch.zeros(4), mbs)
