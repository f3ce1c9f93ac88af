"""Training any seating: N models rotating over N seats, the model <-> seat map, exact resume, joint
learners on a chain, old run folders, the evaluation hook of `CORYTrainer.train`."""

from __future__ import annotations

import json

import pytest
import yaml

from trainers.loop.cory import CORYTrainer
from trainers.loop.metrics import read_jsonl


def _strip_time(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows]


def _chain(tiny_run, name="chain", **overrides):
    return tiny_run(name, **{"task": "chain_relay", "context_len": 12, "seating": "chain:3", "batch_size": 8,
                             "mini_batch_size": 4, "role_exchange_period": 1, **overrides})


def test_three_models_rotate_over_three_seats_and_the_map_is_logged(tiny_run):
    trainer = CORYTrainer(_chain(tiny_run, num_iterations=3))
    assert trainer.seating.names == ("pioneer", "observer_1", "observer_2")
    assert list(trainer.agents) == ["llm1", "llm2", "llm3"]
    rows = trainer.train()
    seen = [[row[f"cory/{m}_seat"] for m in ("llm1", "llm2", "llm3")] for row in rows]
    assert seen == [[0.0, 1.0, 2.0], [2.0, 0.0, 1.0], [1.0, 2.0, 0.0]]  # each model visits every seat
    for row, seats in zip(rows, seen):
        for model, seat in zip(("llm1", "llm2", "llm3"), seats):
            name = trainer.seating.names[int(seat)]
            assert row[f"{model}/task_reward"] == row[f"{name}/task_reward"]
    assert rows[-1]["cory/collective_reward"] == pytest.approx(
        sum(rows[-1][f"{s}/task_reward"] for s in trainer.seating.names))


@pytest.mark.parametrize("learner", ["ppo", "mappo", "magrpo"])
def test_a_chain_resumes_exactly_across_rotations(tiny_run, learner):
    opts = {"learner": learner, "use_lora": True}
    if learner == "magrpo":
        opts.update(group_size=2, scale_rewards=False)
    full = CORYTrainer(_chain(tiny_run, "full", num_iterations=4, **opts)).train()
    CORYTrainer(_chain(tiny_run, "part", num_iterations=2, **opts)).train()
    resumed = CORYTrainer(_chain(tiny_run, "part", num_iterations=4, resume=True, **opts))
    assert resumed.start_iteration == 2 and resumed.exchange.seats["pioneer"].name == "llm3"
    assert _strip_time(resumed.train()) == _strip_time(full[2:])


def test_the_collective_evaluation_plays_every_seat(tiny_run):
    trainer = CORYTrainer(_chain(tiny_run, num_iterations=1))
    out = trainer.evaluate(episodes=4, seed=5, collective=True)
    assert set(out) >= {"collective_reward", "pioneer_task_reward", "observer_1_task_reward",
                        "observer_2_task_reward"}
    assert out["collective_reward"] == pytest.approx(
        out["pioneer_task_reward"] + out["observer_1_task_reward"] + out["observer_2_task_reward"])
    alone = trainer.evaluate(episodes=4, seed=5, model="llm3")
    assert alone["num_queries"] == 4 and "kl" in alone


def test_a_run_folder_of_the_algo_era_resumes_and_evaluates_identically(tiny_run, tmp_path):
    """A run written before `algo` became `seating` (config.yaml and checkpoints say ``algo: cory``) resumes into the
    same numbers as an uninterrupted run, and `cory eval` reads it."""
    from trainers.cli import main as cory

    full = CORYTrainer(tiny_run("full", num_iterations=4, role_exchange_period=3)).train()
    run = tmp_path / "old"
    CORYTrainer(tiny_run("old", num_iterations=2, role_exchange_period=3)).train()
    config = yaml.safe_load((run / "config.yaml").read_text())
    old = {("algo" if k == "seating" else k): ("cory" if k == "seating" else v) for k, v in config.items()
           if k != "eval_every"}
    (run / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    for state_file in run.glob("checkpoints/*/trainer_state.json"):
        state = json.loads(state_file.read_text())
        state["config"] = old
        state_file.write_text(json.dumps(state))
    resumed = CORYTrainer(tiny_run("old", num_iterations=4, role_exchange_period=3, resume=True))
    assert _strip_time(resumed.train()) == _strip_time(full[2:])
    assert cory(["eval", str(run), "--episodes", "2"]) == 0


def test_the_evaluation_hook_runs_every_k_iterations_and_at_given_points(tiny_run, tmp_path):
    trainer = CORYTrainer(tiny_run("hook", num_iterations=4, eval_every=2, eval_episodes=2))
    rows = trainer.train()
    assert [("eval" in r) for r in rows] == [False, True, False, True]
    assert rows[1]["eval/reward"] == rows[1]["eval"]["reward"] and "eval/kl" in rows[3]
    logged = read_jsonl(tmp_path / "hook" / "metrics.jsonl")
    assert "eval/reward" in logged[1] and "eval/reward" not in logged[0]
    # the same queries and sampling seeds every time: the first point equals a fresh evaluation of the same weights
    calls = []

    def hook(t, done):
        calls.append(done)
        return {"reward": float(done), "samples": ["not logged"]}

    rows = CORYTrainer(tiny_run("points", num_iterations=3)).train(eval_at=(1, 3), evaluate=hook)
    assert calls == [1, 3] and rows[0]["eval/reward"] == 1.0 and "eval/samples" not in rows[0]


def test_bad_seatings_are_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    from trainers.cli import main as cory
    from trainers.loop import cast

    monkeypatch.setattr(cast, "load_policy_model", lambda *a, **k: pytest.fail("a model was loaded"))
    for flags, message in ((["--seating", "chain:0"], "seating='chain:0' is not a seating spec"),
                           (["--algo", "trio"], "seating='trio' is not a seating spec"),
                           # argparse would keep the last of two names of one option without a word
                           (["--seating", "cory", "--algo=ppo"],
                            "--seating and --algo are two names of one option (seating); give it once"),
                           (["--task", "relay", "--observer_template", "{response} only"],
                            r"observer_template '{response} only' lacks the placeholder(s) {query}")):
        assert cory(["train", "--preset", "tiny", "--output_dir", str(tmp_path / "x"), *flags]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "x").exists()
