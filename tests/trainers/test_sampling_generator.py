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
