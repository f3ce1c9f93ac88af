"""Evaluation samples with a generator on the device its agents sample on (`trainers.rollout.sampling_generator`):
`torch.multinomial` refuses a CPU generator for a model on a GPU, which once broke every evaluation on CUDA."""

from __future__ import annotations

import pytest
import torch

from cory_env import BatchedCORYEnv, EnvConfig
from trainers.evaluation.episodes import evaluation_batches
from trainers.rollout import sampling_generator


class _AgentOn:
    """An `LLMAgent` stand-in that reports `device` (it never gets to act in these tests)."""

    def __init__(self, device):
        self.device = torch.device(device)


def test_on_a_cpu_the_generator_is_torchs_default_one_seeded():
    ours, default = sampling_generator(7, _AgentOn("cpu")), torch.Generator().manual_seed(7)
    assert ours.device.type == "cpu"
    assert torch.equal(torch.rand(5, generator=ours), torch.rand(5, generator=default))
    assert sampling_generator(7, object()).device.type == "cpu"  # an agent without a device samples on the CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the request through the error of a CPU-only torch")
def test_evaluation_asks_for_the_generator_on_the_agents_device(tiny_tok):
    env = BatchedCORYEnv(EnvConfig(min_new_tokens=2, max_new_tokens=4, context_len=48), tiny_tok, batch_size=2)
    with pytest.raises(RuntimeError, match="CUDA"):  # a CPU-only torch cannot make the CUDA generator asked for
        next(evaluation_batches(env, {"pioneer": _AgentOn("cuda")}, num_batches=1, seed=0))


class _ScorerOn(_AgentOn):
    """A policy / reference stand-in that scores every response token 0 (on the CPU, whatever it reports)."""

    sampling = type("Sampling", (), {"temperature": 1.0})()

    def eval(self):
        return self

    def evaluate(self, query, query_mask, response, response_mask, **_):
        from agents.reference import ReferenceOutput

        return ReferenceOutput(logprobs=torch.zeros(response.shape))


def test_the_evaluation_kl_moves_the_cpu_rollout_to_the_agents_device(monkeypatch):
    from trainers.evaluation.episodes import sequence_kls
    from trainers.learning.experience import Rollout

    asked = []
    monkeypatch.setattr(Rollout, "to", lambda self, device: asked.append(torch.device(device)) or self)
    rows = torch.ones(2, 3, dtype=torch.long)
    rollout = Rollout(query=rows, query_mask=rows.bool(), response=rows, response_mask=rows.bool(),
                      scores=torch.zeros(2), task_reward=torch.zeros(2))  # as an evaluation transcript: on the CPU
    kl, k1 = sequence_kls(_ScorerOn("cuda:3"), _ScorerOn("cuda:3"), rollout)
    assert asked == [torch.device("cuda:3")]  # scored where the models live, not where the transcript was built
    assert kl.tolist() == k1.tolist() == [0.0, 0.0]
