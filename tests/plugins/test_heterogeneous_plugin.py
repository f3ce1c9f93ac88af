"""A plug-in learner (the guide's REINFORCE, reached by ``module:attr``) trains a pair of two architectures and two
tokenizers (docs/seats.md): each model gets its own agent, tokenizer and frozen reference."""

from __future__ import annotations

import torch

from trainers.config import RunConfigs
from trainers.loop.cory import CORYTrainer

from tests.plugins.conftest import PACKAGE


def test_the_guides_reinforce_trains_a_gpt2_and_a_llama_of_different_tokenizers(bare_plugins_on_path, tmp_path):
    configs = RunConfigs.from_flat({
        "learner": f"{PACKAGE}.plugins:REINFORCE", "task": "relay", "context_len": 12, "model": "tiny-gpt2",
        "models": ["llm2=tiny-bpe"], "batch_size": 8, "mini_batch_size": 4, "num_iterations": 2,
        "role_exchange_period": 1, "tensorboard": False, "output_dir": str(tmp_path / "run")}, strict=True)
    trainer = CORYTrainer(configs)
    before = {n: [p.detach().clone() for p in a.trainable_parameters()] for n, a in trainer.agents.items()}
    rows = trainer.train()
    assert [r["cory/llm1_seat"] for r in rows] == [0.0, 1.0]
    for name, agent in trainer.agents.items():
        learner = trainer.algorithm.learners[name]
        assert learner.agent is agent and learner.ref_model is trainer.cast.refs[name]
        assert agent.tokenizer is trainer.cast.tokenizers[name]
        assert any(not torch.equal(a, b) for a, b in zip(before[name], agent.trainable_parameters()))
    assert len(trainer.cast.tokenizers["llm1"]) == 20 and len(trainer.cast.tokenizers["llm2"]) == 384
