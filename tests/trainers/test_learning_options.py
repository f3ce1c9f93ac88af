"""Options added to make training learn: the entropy bonus, the held-out evaluation of a run."""

from __future__ import annotations

import json

import pytest
import torch

from trainers.cli import main as cli_main
from trainers.config import CORYConfig, PPOConfig
from trainers.learning import ppo_math
from trainers.learning.grpo import grpo_loss


def test_bad_learning_options_are_refused():
    with pytest.raises(ValueError, match="ent_coef=-0.1 is invalid"):
        PPOConfig(ent_coef=-0.1)
    with pytest.raises(ValueError, match="eval_episodes=-1 is invalid"):
        CORYConfig(eval_episodes=-1)


def _batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g, requires_grad=True)
    logprobs = torch.log_softmax(logits, -1)[..., 0]
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    return logits, logprobs, entropy, mask


def test_entropy_bonus_is_minus_ent_coef_times_the_token_mean_entropy():
    logits, logprobs, entropy, mask = _batch()
    zeros = torch.zeros(2, 3)
    common = dict(old_logprobs=logprobs.detach(), values=zeros, old_values=zeros, advantages=torch.ones(2, 3),
                  returns=zeros, mask=mask, entropy=entropy)
    plain, _ = ppo_math.ppo_loss(logprobs, **common)
    bonus, stats = ppo_math.ppo_loss(logprobs, **common, ent_coef=0.5)
    mean_entropy = (entropy * mask).sum() / mask.sum()
    torch.testing.assert_close(bonus, plain - 0.5 * mean_entropy)
    assert stats["entropy"] == pytest.approx(float(mean_entropy.detach()))
    # the bonus pushes towards higher entropy: its gradient is −0.5 · ∂H/∂logits
    (g_plain,) = torch.autograd.grad(plain, logits, retain_graph=True)
    (g_bonus,) = torch.autograd.grad(bonus, logits, retain_graph=True)
    (g_h,) = torch.autograd.grad(mean_entropy, logits)
    torch.testing.assert_close(g_bonus - g_plain, -0.5 * g_h)
    g_loss, _ = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), torch.ones(2), mask, entropy=entropy)
    g_bonus_loss, _ = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), torch.ones(2), mask,
                                entropy=entropy, ent_coef=0.5)
    torch.testing.assert_close(g_bonus_loss, g_loss - 0.5 * mean_entropy)


def test_evaluate_and_entropy_bonus_refuse_bad_calls(tmp_path):
    _, logprobs, _, mask = _batch()
    zeros = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="ent_coef > 0 needs the per-token entropy"):
        ppo_math.ppo_loss(logprobs, logprobs.detach(), zeros, zeros, zeros, zeros, mask, ent_coef=0.1)
    with pytest.raises(ValueError, match="ent_coef > 0 needs the per-token entropy"):
        grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), torch.ones(2), mask, ent_coef=0.1)
    from trainers.config.parser import parse_train_args
    from trainers.loop.cory import CORYTrainer

    trainer = CORYTrainer(parse_train_args(["--preset", "tiny", "--algo", "ppo", "--output_dir", str(tmp_path / "r"),
                                             "--tensorboard", "false"]))
    with pytest.raises(ValueError, match="^episodes=0 is invalid: use an integer >= 1$"):
        trainer.evaluate(episodes=0, seed=0)
    with pytest.raises(ValueError, match=r"a collective evaluation needs two or more seats, got \['pioneer'\]"):
        trainer.evaluate(episodes=4, seed=0, collective=True)


def test_cory_train_prints_the_pioneer_before_and_after(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli_main(["train", "--preset", "tiny", "--task", "tiny_vocab", "--context_len", "12",
                     "--heldout_fraction", "0.2", "--eval_episodes", "16", "--num_iterations", "2",
                     "--output_dir", str(out), "--tensorboard", "false"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "in the pioneer seat, held-out task reward on 16 episodes of" in printed
    result = json.loads((out / "eval.json").read_text())
    assert f"{result['distinct_queries']} distinct test-split queries" in printed
    before, after = result["before"], result["after"]
    assert before["query_split"] == "test" and before["num_queries"] == 16
    assert result["gain"] == pytest.approx(after["reward"] - before["reward"])
    assert len(before["rewards"]) == 16 and result["gain_sem"] >= 0
    assert f"before {before['reward']:.3f} -> after {after['reward']:.3f}" in printed
