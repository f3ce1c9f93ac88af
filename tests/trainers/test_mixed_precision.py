"""Training under bf16-mixed (`ModelConfig.precision`): what stays float32, and the on-policy ratio."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_bf16_mixed_keeps_master_weights_scores_and_losses_in_fp32(tiny_run, lora):
    """Under bf16-mixed the forwards' matmuls are bf16 but parameters, Adam state, log-probabilities, values and
    losses are float32, and the first mini-batch's PPO ratio stays 1 (one recomputation scores and updates); with
    LoRA the frozen base's cast copies, first made in the rollout's inference mode, serve the update's autograd."""
    from trainers.loop.cory import CORYTrainer
    from trainers.rollout import rollout_from_transcript, run_episodes

    lora_flags = {"use_lora": True, "lora_r": 4, "lora_alpha": 8} if lora else {}
    configs = tiny_run("bf16", precision="bf16-mixed", num_iterations=1, batch_size=4, mini_batch_size=4,
                       ppo_epochs=1, role_exchange_period=0, **lora_flags)
    trainer = CORYTrainer(configs)
    agent = trainer.exchange.seats["pioneer"].agent
    assert agent.precision == "bf16-mixed" and trainer.cast.refs["llm1"].precision == "bf16-mixed"
    assert not agent.acting_scores_exact  # the learner recomputes its old scores
    acting = {}
    transcript = run_episodes(trainer.env, {s: b.agent for s, b in trainer.exchange.seats.items()}, seed=0,
                              generator=torch.Generator().manual_seed(0), acting=acting)
    rollout = rollout_from_transcript(transcript, "pioneer", trainer.env.pad_token_id, acting=acting["pioneer"])
    assert rollout.logprobs is None
    out = agent.evaluate(rollout.query, rollout.query_mask, rollout.response, rollout.response_mask)
    assert out.logprobs.dtype == out.values.dtype == out.entropy.dtype == torch.float32
    row = trainer.train()[0]
    assert abs(row["pioneer/ratio"] - 1.0) < 1e-6 and abs(row["observer/ratio"] - 1.0) < 1e-6
    learner = trainer.exchange.seats["pioneer"].learner
    assert all(p.dtype == torch.float32 for p in agent.trainable_parameters())
    assert all(v.dtype == torch.float32 for state in learner.optimizer.state.values() for k, v in state.items()
               if k in ("exp_avg", "exp_avg_sq"))
