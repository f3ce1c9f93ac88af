"""End-to-end CORY / PPO-baseline iterations on a tiny random model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from trainers.learning import ppo_math
from trainers.learning.update import NonFiniteLossError
from trainers.loop.checkpoint import latest_checkpoint
from trainers.loop.cory import CORYTrainer
from trainers.loop.metrics import read_jsonl


def _params(agent):
    return {n: p.detach().clone() for n, p in agent.named_parameters() if p.requires_grad}


def _changed(before, agent):
    after = dict(agent.named_parameters())
    return any(not torch.equal(before[n], after[n]) for n in before)


def _strip_time(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows]


def test_both_seats_update_and_bundles_swap_in_memory(tiny_run):
    configs = tiny_run(num_iterations=1, role_exchange_period=1)
    trainer = CORYTrainer(configs)
    llm1, llm2 = trainer.exchange.bundles["llm1"], trainer.exchange.bundles["llm2"]
    before1, before2 = _params(llm1.agent), _params(llm2.agent)
    opt1 = llm1.learner.optimizer
    rows = trainer.train()
    assert _changed(before1, llm1.agent) and _changed(before2, llm2.agent)
    # after the exchange llm1's model, optimizer state and KL controller sit in the observer seat
    assert trainer.exchange.seats["observer"] is llm1 and trainer.exchange.seats["pioneer"] is llm2
    assert trainer.exchange.seats["observer"].learner.optimizer is opt1 and len(opt1.state) > 0
    assert rows[0]["cory/role_exchange"] == 1.0
    # seat and model-identity keys agree: iteration 0 had llm1 as pioneer
    assert rows[0]["pioneer/task_reward"] == rows[0]["llm1/task_reward"]
    assert rows[0]["observer/kl"] == rows[0]["llm2/kl"]


def test_kl_is_zero_before_any_update(tiny_run):
    configs = tiny_run(num_iterations=1)
    row = CORYTrainer(configs).train()[0]
    assert abs(row["pioneer/kl"]) < 1e-5 and abs(row["observer/kl"]) < 1e-5


def test_reset_on_exchange_gives_fresh_optimizer_and_kl_controller(tiny_run):
    configs = tiny_run(num_iterations=1, reset_on_exchange=True, init_kl_coef=0.3)
    trainer = CORYTrainer(configs)
    trainer.train()
    for bundle in trainer.exchange.seats.values():
        assert len(bundle.learner.optimizer.state) == 0
        assert bundle.learner.kl_ctl.value == pytest.approx(0.3)


def test_without_reset_state_is_kept(tiny_run):
    configs = tiny_run(num_iterations=1, init_kl_coef=0.3)
    trainer = CORYTrainer(configs)
    trainer.train()
    for bundle in trainer.exchange.seats.values():
        assert len(bundle.learner.optimizer.state) > 0
        assert bundle.learner.kl_ctl.value != pytest.approx(0.3)


def test_same_seed_same_metrics(tiny_run):
    a = CORYTrainer(tiny_run("a")).train()
    b = CORYTrainer(tiny_run("b")).train()
    c = CORYTrainer(tiny_run("c", seed=1)).train()
    assert _strip_time(a) == _strip_time(b)
    assert _strip_time(a) != _strip_time(c)


def test_resume_equals_uninterrupted(tiny_run, tmp_path):
    full = CORYTrainer(tiny_run("full", num_iterations=4, role_exchange_period=3)).train()
    configs = tiny_run("part", num_iterations=2, role_exchange_period=3)
    CORYTrainer(configs).train()
    configs = tiny_run("part", num_iterations=4, role_exchange_period=3, resume=True)
    resumed = CORYTrainer(configs)
    assert resumed.start_iteration == 2
    rest = resumed.train()
    assert _strip_time(rest) == _strip_time(full[2:])
    logged = read_jsonl(tmp_path / "part" / "metrics.jsonl")
    assert [r["iteration"] for r in logged] == [0, 1, 2, 3]


@pytest.mark.parametrize("learner", ["ppo", "grpo"])
def test_lora_resume_equals_uninterrupted(tiny_run, learner):
    """With LoRA (and value-head / LoRA dropout on) resuming is exact too: every module that scores a
    rollout is in eval mode, in a fresh run as after a resume."""
    opts = dict(use_lora=True, lora_dropout=0.1, value_head_dropout=0.1, role_exchange_period=3, learner=learner)
    if learner == "grpo":
        opts.update(group_size=2)
    full = CORYTrainer(tiny_run("lora-full", num_iterations=4, **opts)).train()
    CORYTrainer(tiny_run("lora-part", num_iterations=2, **opts)).train()
    resumed = CORYTrainer(tiny_run("lora-part", num_iterations=4, resume=True, **opts))
    assert resumed.start_iteration == 2
    assert _strip_time(resumed.train()) == _strip_time(full[2:])


@pytest.mark.parametrize("learner", ["ppo", "grpo"])
def test_the_first_mini_batch_is_exactly_on_policy_with_dropout_options_set(tiny_run, learner):
    """With LoRA and value-head dropout set, the old scores (eval mode) and the update's forward
    (train mode) were different networks: ratio 0.9986 and value clipfrac 0.128 before any update. With
    disable_dropout (default) they are one function; without it the mismatch is back."""
    # one mini-batch per iteration: iteration 1 scores data of the policy iteration 0 updated (LoRA B != 0 by then)
    opts = dict(use_lora=True, lora_dropout=0.3, value_head_dropout=0.3, learner=learner, num_iterations=2,
                batch_size=4, mini_batch_size=4, ppo_epochs=1, role_exchange_period=0, learning_rate=1e-2)
    if learner == "grpo":
        opts.update(group_size=2)
    reward = lambda queries, responses: [float(len(r)) for r in responses]  # noqa: E731 - GRPO needs a spread
    row = CORYTrainer(tiny_run("on", **opts), reward_fn=reward).train()[-1]
    for seat in ("pioneer", "observer"):
        assert row[f"{seat}/ratio"] == pytest.approx(1.0, abs=1e-6)
        assert row[f"{seat}/approx_kl"] < 1e-10
        if learner == "ppo":
            assert row[f"{seat}/value_clipfrac"] == 0.0
    noisy = CORYTrainer(tiny_run("off", disable_dropout=False, **opts), reward_fn=reward).train()[-1]
    assert abs(noisy["pioneer/ratio"] - 1.0) > 1e-4 and noisy["pioneer/approx_kl"] > 1e-8


def test_resume_refuses_inputs_that_changed_under_the_same_names(tiny_run, tmp_path):
    """Resume checked the --model string only; other weights of the same shapes were accepted and
    the reference model silently rebuilt from them (pioneer/kl 0.2881 instead of 0.0125 at iteration 2)."""
    from agents.tiny import tiny_causal_lm, tiny_tokenizer

    data = tmp_path / "reviews.csv"
    data.write_text("review\n" + "\n".join(f"a fine film number {i} " * 12 for i in range(8)) + "\n")
    configs = tiny_run("fp", num_iterations=2, data_path=str(data), min_review_chars=10, checkpoint_every=1)
    tok = tiny_tokenizer()
    CORYTrainer(configs, model=tiny_causal_lm(tok, seed=0), tokenizer=tok).train()
    more = tiny_run("fp", num_iterations=3, data_path=str(data), min_review_chars=10, checkpoint_every=1,
                    resume=True)
    with pytest.raises(ValueError, match=r"inputs changed.*model \(the policy model's weights") as err:
        CORYTrainer(more, model=tiny_causal_lm(tok, seed=1), tokenizer=tok)
    assert "tokenizer" not in str(err.value) and "data (" not in str(err.value)
    data.write_text(data.read_text().replace("fine", "poor"))
    with pytest.raises(ValueError, match=r"inputs changed.*data \(the task's queries"):
        CORYTrainer(more, model=tiny_causal_lm(tok, seed=0), tokenizer=tok)
    data.write_text(data.read_text().replace("poor", "fine"))
    resumed = CORYTrainer(more, model=tiny_causal_lm(tok, seed=0), tokenizer=tok)  # the same inputs: accepted
    assert resumed.start_iteration == 2


def test_fingerprints_follow_content():
    from agents.tiny import tiny_causal_lm, tiny_tokenizer
    from trainers.loop.fingerprint import (check_fingerprints, data_fingerprint, model_fingerprint,
                                           reward_fingerprint, tokenizer_fingerprint)

    tok = tiny_tokenizer()
    a, b = tiny_causal_lm(tok, seed=0), tiny_causal_lm(tok, seed=0)
    assert model_fingerprint(a) == model_fingerprint(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-3  # one weight changes
    assert model_fingerprint(a) != model_fingerprint(b)
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(tiny_tokenizer())
    assert tokenizer_fingerprint(tok) != tokenizer_fingerprint(tiny_tokenizer(vocab_size=300))
    assert data_fingerprint([{"query": "a"}]) != data_fingerprint([{"query": "b"}])
    first = reward_fingerprint(lambda q, r: [0.0] * len(q), "mod:score")
    assert first != reward_fingerprint(lambda q, r: [1.0] * len(q), "mod:score")  # same name, other code
    current = {"model": "m", "tokenizer": "t", "data": "d", "reward": "r"}
    check_fingerprints(dict(current), current, "ckpt")  # the same inputs: no error
    with pytest.raises(ValueError, match=r"data \(the task's queries"):
        check_fingerprints({**current, "data": "other"}, current, "ckpt")
    with pytest.raises(ValueError, match="reward"):  # a checkpoint that records no fingerprint of an input
        check_fingerprints({k: v for k, v in current.items() if k != "reward"}, current, "ckpt")


def test_ppo_baseline_logs_under_pioneer_only(tiny_run):
    configs = tiny_run(seating="ppo", num_iterations=2)
    trainer = CORYTrainer(configs)
    rows = trainer.train()
    assert list(trainer.exchange.seats) == ["pioneer"]
    assert "pioneer/task_reward" in rows[0] and "llm1/kl" in rows[0]
    assert not any(k.startswith(("observer/", "llm2/")) for k in rows[0])
    # single agent: the learner optimises its own task reward
    assert rows[0]["pioneer/score"] == pytest.approx(rows[0]["pioneer/task_reward"])


def test_ablation_flags_reach_the_env(tiny_run):
    configs = tiny_run(num_iterations=1, knowledge_transfer=False, partner_reward_coef=0.0)
    trainer = CORYTrainer(configs)
    trainer.train()
    t = trainer.env.transcript()
    assert t.seats["observer"].prompt_ids == t.seats["pioneer"].prompt_ids  # w/o KT: observer sees the query only
    for seat in ("pioneer", "observer"):  # independent rewards
        assert list(t.seats[seat].reward) == pytest.approx(list(t.seats[seat].task_reward))


def test_existing_run_is_not_overwritten(tiny_run, tmp_path):
    CORYTrainer(tiny_run("x", num_iterations=1)).train()
    before = (tmp_path / "x" / "metrics.jsonl").read_text()
    with pytest.raises(FileExistsError, match="--resume"):
        CORYTrainer(tiny_run("x", num_iterations=1))
    assert (tmp_path / "x" / "metrics.jsonl").read_text() == before
    CORYTrainer(tiny_run("x", num_iterations=1, overwrite=True))  # explicit overwrite is allowed


def test_failed_overwrite_keeps_the_old_run_and_a_failed_start_leaves_no_folder(tiny_run, tmp_path, monkeypatch):
    """Every input is checked before `--overwrite` touches the old run; a failed start creates nothing."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    CORYTrainer(tiny_run("x", num_iterations=1)).train()
    before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "x").rglob("*"))
    no_text = tmp_path / "no_text.csv"
    no_text.write_text("title,stars\nA film,3\n")
    bad = [dict(data_path=str(no_text)), dict(model="smollm2-135m-instruc"), dict(reward="nosuch_reward")]
    for opts in bad:
        with pytest.raises((ValueError, OSError)):
            CORYTrainer(tiny_run("x", num_iterations=1, overwrite=True, **opts))
        assert sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "x").rglob("*")) == before, opts
        with pytest.raises((ValueError, OSError)):
            CORYTrainer(tiny_run("fresh", num_iterations=1, **opts))
        assert not (tmp_path / "fresh").exists(), opts
    trainer = CORYTrainer(tiny_run("x", num_iterations=1, overwrite=True))  # a good overwrite replaces the run
    assert not (tmp_path / "x" / "metrics.jsonl").exists() and (tmp_path / "x" / "config.yaml").is_file()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".x.replaced-")]
    assert len(aside) == 1 and (aside[0] / "metrics.jsonl").is_file()  # kept until the new run's first checkpoint
    trainer.train()
    assert not aside[0].exists()  # no moved-aside copy is left


def test_resume_with_different_config_names_fields(tiny_run):
    CORYTrainer(tiny_run("y", num_iterations=1)).train()
    with pytest.raises(ValueError, match="learning_rate.*init_kl_coef|init_kl_coef.*learning_rate"):
        CORYTrainer(tiny_run("y", num_iterations=2, resume=True, learning_rate=0.5, init_kl_coef=0.9))


def test_nan_loss_stops_and_keeps_last_checkpoint(tiny_run, monkeypatch, tmp_path):
    configs = tiny_run("nan", num_iterations=3, checkpoint_every=1)
    trainer = CORYTrainer(configs)
    real = ppo_math.ppo_loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] > 8:  # iteration 0 takes 2 seats x 2 epochs x 2 mini-batches = 8 calls
            loss = loss * float("nan")
        return loss, stats

    monkeypatch.setattr(ppo_math, "ppo_loss", poisoned)
    with pytest.raises(NonFiniteLossError, match="checkpoint"):
        trainer.train()
    ckpt = latest_checkpoint(tmp_path / "nan")
    assert ckpt is not None and ckpt.name == "iter-000000"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["iteration"] == 0
    monkeypatch.setattr(ppo_math, "ppo_loss", real)
    resumed = CORYTrainer(tiny_run("nan", num_iterations=2, checkpoint_every=1, resume=True))
    assert resumed.start_iteration == 1 and len(resumed.train()) == 1


def test_memory_shared_lora_run(tiny_run):
    """One frozen base, two adapters: both adapters train, the base (= reference) never moves, resume works."""
    configs = tiny_run("lora", num_iterations=2, use_lora=True, lora_r=4)
    trainer = CORYTrainer(configs)
    shared = trainer.agents["llm1"].model
    assert trainer.agents["llm2"].model is shared  # no second copy of the weights
    base_before = {n: p.detach().clone() for n, p in shared.named_parameters() if "lora_" not in n}
    adapters_before = {n: p.detach().clone() for n, p in shared.named_parameters() if "lora_" in n}
    rows = trainer.train()
    after = dict(shared.named_parameters())
    assert all(torch.equal(base_before[n], after[n]) for n in base_before)
    for name in ("llm1", "llm2"):
        moved = [n for n in adapters_before if f".{name}." in n and not torch.equal(adapters_before[n], after[n])]
        assert moved, f"adapter {name} did not train"
    assert abs(rows[0]["pioneer/kl"]) < 1e-5  # reference = base with adapters off = initial policy
    # the checkpoint holds adapters + value heads only, and a resume continues from it
    resumed_configs = tiny_run("lora", num_iterations=3, use_lora=True, lora_r=4, resume=True)
    resumed = CORYTrainer(resumed_configs)
    assert resumed.start_iteration == 2 and len(resumed.train()) == 1


def _trainable(trainer, name="llm1"):
    return [p.detach().clone() for p in trainer.exchange.bundles[name].agent.trainable_parameters()]


@pytest.mark.parametrize("use_lora", [False, True])
def test_gradient_checkpointing_gives_the_same_update(tiny_run, use_lora):
    """Recomputing activations in backward changes memory, not the maths: same weights after an iteration."""
    runs = []
    for flag in (False, True):
        configs = tiny_run(f"gc-{flag}", num_iterations=1, use_lora=use_lora, lora_r=4,
                           gradient_checkpointing=flag)
        trainer = CORYTrainer(configs)
        base = trainer.agents["llm1"].model
        base = base.get_base_model() if use_lora else base
        assert getattr(base, "is_activation_checkpointing", None) is flag
        before = _trainable(trainer)
        trainer.train()
        runs.append((before, _trainable(trainer)))
    (before_off, off), (before_on, on) = runs
    assert all(torch.equal(a, b) for a, b in zip(before_off, before_on))
    assert any(not torch.equal(a, b) for a, b in zip(before_off, off))  # the update moved the weights
    for a, b in zip(off, on):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_bfloat16_model_with_lora_trains(tiny_run):
    """--dtype bfloat16: the LM weights are bf16, LoRA adapters and value heads stay fp32, metrics are finite."""
    configs = tiny_run("bf16", num_iterations=2, use_lora=True, lora_r=4, dtype="bfloat16")
    trainer = CORYTrainer(configs)
    agent = trainer.agents["llm1"]
    lora = [p for n, p in agent.model.named_parameters() if "lora_" in n]
    base = [p for n, p in agent.model.named_parameters() if "lora_" not in n]
    assert {p.dtype for p in base} == {torch.bfloat16}
    assert {p.dtype for p in lora} == {torch.float32}
    assert agent.value_head.summary.weight.dtype == torch.float32
    rows = trainer.train()
    assert all(math.isfinite(v) for row in rows for k, v in row.items() if k.split("/")[0] in ("pioneer", "observer"))


def constant_ten_reward(queries, responses):
    """A reward callable importable by name (tests.trainers.test_cory_trainer:constant_ten_reward)."""
    return [10.0] * len(queries)


def test_a_reward_callable_is_recorded_and_eval_never_substitutes_another(tiny_run, tmp_path):
    """`config.yaml` names the callable (module:function); `cory eval` scores with it, and refuses a
    callable it cannot rebuild unless --reward says which reward to use."""
    from trainers.cli.eval import run_eval

    CORYTrainer(tiny_run("named", num_iterations=1), reward_fn=constant_ten_reward).train()
    saved = yaml.safe_load((tmp_path / "named" / "config.yaml").read_text())
    assert saved["reward"] == "tests.trainers.test_cory_trainer:constant_ten_reward"
    out = tmp_path / "named.json"
    run_eval([str(tmp_path / "named"), "--episodes", "2", "--out", str(out)])
    scored = json.loads(out.read_text())
    assert scored["after"]["task_reward"] == scored["before"]["task_reward"] == 10.0

    CORYTrainer(tiny_run("lambda", num_iterations=1), reward_fn=lambda q, r: [10.0] * len(q)).train()
    saved = yaml.safe_load((tmp_path / "lambda" / "config.yaml").read_text())
    assert "<lambda>" in saved["reward"] and saved["reward"] != "vader"
    with pytest.raises(ValueError, match="--reward"):
        run_eval([str(tmp_path / "lambda"), "--episodes", "2", "--out", str(out), "--overwrite"])
    run_eval([str(tmp_path / "lambda"), "--episodes", "2", "--out", str(out), "--overwrite",
              "--reward", "tests.trainers.test_cory_trainer:constant_ten_reward"])
    assert json.loads(out.read_text())["after"]["task_reward"] == 10.0


def test_cory_eval_loads_the_agent_only(tiny_run, monkeypatch, capsys):
    """`cory eval` rebuilds the agents from the run's ModelConfig / SamplingConfig and loads the trained weights with
    `checkpoint.load_agent`: no learner or optimizer is built, and a checkpoint without optimizer state evaluates."""
    from trainers.cli.eval import run_eval
    from trainers.learning.update import PolicyLearner
    from trainers.learning.registry import LearnerSpec
    from trainers.loop import checkpoint as ckpt

    configs = tiny_run("evalonly", num_iterations=1, temperature=0.7, lora_r=4, use_lora=True)
    trainer = CORYTrainer(configs)
    trainer.train()
    path = latest_checkpoint(configs.run.output_dir)
    for optimizer_state in path.glob("*/learner.pt"):
        optimizer_state.unlink()

    def no_learner(*args, **kwargs):
        raise AssertionError("cory eval must not build a learner")

    monkeypatch.setattr(LearnerSpec, "build", no_learner)
    monkeypatch.setattr(PolicyLearner, "__init__", no_learner)
    loaded = []
    real_load_agent = ckpt.load_agent
    monkeypatch.setattr(ckpt, "load_agent", lambda p, name, agent: loaded.append((name, agent)) or
                        real_load_agent(p, name, agent))
    out = Path(configs.run.output_dir).parent / "evalonly-eval.json"  # outside checkpoints/, which rotation prunes
    assert run_eval([str(path), "--episodes", "2", "--out", str(out)]) == 0
    (name, agent), = loaded
    assert name == trainer.exchange.seats["pioneer"].name and agent.sampling.temperature == 0.7
    trained = dict(trainer.agents[name].named_parameters())
    for key, param in ckpt.trainable_state(agent).items():  # the trained adapter and value head, not fresh ones
        torch.testing.assert_close(param, trained[key].detach().cpu())
    result = json.loads(out.read_text())
    learner_state = ckpt.read_learner_state(path, name, with_optimizer=False)
    assert result["eta"] == learner_state["kl_ctl"]["value"] and result["after"]["num_queries"] == 2


def test_eval_refuses_a_checkpoint_whose_base_model_changed_under_its_name(tiny_run, tmp_path, capsys):
    """The mistake `test_resume_refuses_inputs_that_changed_under_the_same_names` guards, in `cory eval`: LoRA
    adapters (or a value head) loaded onto other base weights behind the same --model folder."""
    from agents.tiny import tiny_causal_lm, tiny_tokenizer
    from trainers.cli import main

    tok = tiny_tokenizer()
    folder = tmp_path / "base"
    tiny_causal_lm(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    configs = tiny_run("evalfp", model=str(folder), use_lora=True, num_iterations=1)
    CORYTrainer(configs).train()
    run = configs.run.output_dir
    assert main(["eval", run, "--episodes", "2"]) == 0
    tiny_causal_lm(tok, seed=1).save_pretrained(folder)  # other weights, same shapes, same path
    assert main(["eval", run, "--episodes", "2"]) == 2
    assert "its inputs changed since the run started: model" in capsys.readouterr().err


def test_evaluate_a_named_model_in_the_pioneer_seat(tiny_run):
    trainer = CORYTrainer(tiny_run("named-eval", num_iterations=1, role_exchange_period=1, heldout_fraction=0.3))
    trainer.train()  # one exchange: llm2 sits in the pioneer seat now
    assert trainer.exchange.seats["pioneer"].name == "llm2"
    seat = trainer.evaluate(episodes=4, seed=3)
    assert trainer.evaluate(episodes=4, seed=3, model="llm2") == seat
    other = trainer.evaluate(episodes=4, seed=3, model="llm1")
    assert other["samples"] != seat["samples"] or other["kl"] != seat["kl"]
    with pytest.raises(ValueError, match="model='llm3'"):
        trainer.evaluate(episodes=4, seed=3, model="llm3")
    with pytest.raises(ValueError, match="collective=False"):
        trainer.evaluate(episodes=4, seed=3, model="llm1", collective=True)
