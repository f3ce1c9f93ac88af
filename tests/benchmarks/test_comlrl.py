"""The `comlrl-magrpo` arm (`benchmarks/comlrl_magrpo.py`): CoMLRL's `MAGRPOTrainer` built on the `magrpo-wo-kt`
arm's settings, trained on that arm's query stream and evaluated like it; and its side-by-side commands
(`benchmarks/time_to_reward.py --against comlrl`, the ladder's arm list)."""

from __future__ import annotations

import json

import pytest

# the rung's settings on the tiny random model, with a reward that varies between its answers (VADER scores nearly
# all of them 0, so a group's advantages would be 0 and nothing would train)
TINY = ("--model", "tiny", "--reward", "tests.benchmarks.test_comlrl:letter_reward")


def letter_reward(queries, responses):
    """The share of the letter e in each response."""
    return [r.count("e") / max(len(r), 1) for r in responses]


@pytest.fixture(scope="module")
def comlrl_run(tmp_path_factory, imdb_csv):
    """CoMLRL's trainer for 32 episodes (2 iterations) of the IMDB rung on the tiny model."""
    pytest.importorskip("comlrl.trainers.reinforce")  # comlrl, and the wandb its MAGRPO module imports
    from benchmarks.comlrl_magrpo import make_comlrl_trainer

    run = make_comlrl_trainer(0, 32, run_dir=str(tmp_path_factory.mktemp("comlrl")), flags=TINY)
    yield run
    run.tmp.cleanup()


@pytest.fixture(scope="module")
def ours(tmp_path_factory, imdb_csv):
    """This project's `magrpo-wo-kt` arm on the same settings (its trainer, not trained)."""
    from benchmarks.comlrl_magrpo import OURS
    from benchmarks.ladder_run import build_arm_trainer

    return build_arm_trainer("imdb", OURS, 0, 32, str(tmp_path_factory.mktemp("ours")), TINY)[0]


def test_the_trainer_gets_the_arms_settings_one_to_one(comlrl_run):
    from peft import PeftModel

    from benchmarks.comlrl_magrpo import _update

    update, env, sampling = _update(comlrl_run.configs), comlrl_run.configs.env, comlrl_run.configs.sampling
    args, k = comlrl_run.trainer.args, update.group_size
    assert (update.batch_size, update.mini_batch_size, k, update.learning_rate, update.init_kl_coef) == \
        (16, 8, 4, 1e-3, 0.05)  # the rung's: the mapping below is not vacuous
    assert (args.num_agents, args.num_turns, args.joint_mode, args.num_generations) == (2, 1, "aligned", k)
    assert (args.rollout_buffer_size * k, args.train_batch_size * k) == (update.batch_size, update.mini_batch_size)
    assert args.agent_learning_rate == update.learning_rate
    assert args.reference_kl_enabled and args.reference_kl_coef == update.init_kl_coef
    assert args.advantage_mode == "mean" and args.advantage_normalization is update.scale_rewards is False
    assert (args.temperature, args.top_k, args.top_p) == (sampling.temperature, sampling.top_k, sampling.top_p)
    assert args.max_new_tokens == env.max_new_tokens
    assert comlrl_run.train_kwargs == {"min_new_tokens": env.min_new_tokens,
                                       "repetition_penalty": sampling.repetition_penalty}
    first, second = comlrl_run.trainer.agents
    assert first is not second and comlrl_run.trainer.num_agents == 2
    for agent, optimizer in zip(comlrl_run.trainer.agents, comlrl_run.trainer.optimizers):
        lora = agent.peft_config["default"]
        assert isinstance(agent, PeftModel) and (lora.r, lora.lora_alpha) == (comlrl_run.configs.model.lora_r,
                                                                              comlrl_run.configs.model.lora_alpha)
        assert all(g["lr"] == update.learning_rate and g["weight_decay"] == 0.0 for g in optimizer.param_groups)


def test_the_queries_are_the_arms_and_no_seat_of_the_arm_reads_another(comlrl_run, ours):
    """CoMLRL answers iteration i's group heads of the arm's own env, in order; the arm it is compared with has the
    information structure of CoMLRL's one turn (every agent answers the query alone)."""
    from trainers.loop.cory import derive_seed

    k = comlrl_run.trainer.args.num_generations
    assert comlrl_run.iterations == 2
    for it in range(comlrl_run.iterations):
        _, info = ours.env.reset(seed=derive_seed(0, it, 2), options={"group_size": k})
        assert comlrl_run.prompts[it] == list(info["query_text"][::k])
    assert len(ours.seating.seats) == 2 and not any(seat.reads for seat in ours.seating.seats)
    assert all(seat.sees_query for seat in ours.seating.seats)


def test_comlrl_scores_a_joint_sample_with_the_sum_of_both_seats_task_rewards(comlrl_run, ours):
    from comlrl.utils import call_reward_function

    query, answers = comlrl_run.prompts[0][0], [" see the eerie scene", " a good plot"]
    joint = call_reward_function(comlrl_run.trainer.reward_func, [query], [[a] for a in answers], num_agents=2)
    each = ours.env.task.reward_fn([query, query], answers, [{}, {}])
    assert each[0] != each[1] and joint == [pytest.approx(float(each[0] + each[1]))]


def test_one_iteration_updates_both_adapters_and_nothing_else(comlrl_run):
    import torch

    from benchmarks.comlrl_magrpo import train_iteration

    def weights(trainable: bool):
        return [{n: p.detach().clone() for n, p in agent.named_parameters() if p.requires_grad is trainable}
                for agent in comlrl_run.trainer.agents]

    lora, frozen = weights(True), weights(False)
    train_iteration(comlrl_run, 0)
    for before, after in zip(lora, weights(True)):
        assert any(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)
    for before, after in zip(frozen, weights(False)):
        assert all(torch.equal(before[n], after[n]) for n in before)


def test_a_short_run_is_evaluated_like_the_arm(tmp_path, imdb_csv):
    """Held-out evaluations of llm1 before training and at the rung's points, llm2's beside it, CPU seconds with
    the evaluations left out."""
    pytest.importorskip("comlrl.trainers.reinforce")
    from benchmarks.comlrl_magrpo import train_and_evaluate

    out = train_and_evaluate(0, 32, 8, run_dir=str(tmp_path), flags=TINY)
    assert out["episodes"] == 32 and [p["episodes"] for p in out["curve"]] == [0, 16, 32]
    assert (out["before"], out["after"]) == (out["curve"][0]["reward"], out["curve"][-1]["reward"])
    assert {"kl", "distinct_2", "response_len"} <= set(out["final_eval"])
    assert all("reward" in p["models"]["llm2"] for p in out["curve"])
    assert 0 < out["train_cpu_s"] < out["cpu_s"]


def test_the_profile_splits_each_iteration_into_the_profilers_phases(tmp_path, imdb_csv):
    pytest.importorskip("comlrl.trainers.reinforce")
    from benchmarks.iteration_profile import profile_comlrl
    from benchmarks.iteration_profile import PHASES

    rows = profile_comlrl(2, 0, str(tmp_path), flags=TINY)
    assert len(rows) == 2
    for row in rows:
        assert all(row[p] > 0 for p in ("rollout (generation)", "reward", "reference forward",
                                         "policy scoring (no grad)", "update forward (loss)", "backward", "optimizer"))
        assert sum(row[p] for p in PHASES) == pytest.approx(row["total"])


@pytest.mark.parametrize("flags, message", [
    (("--adap_kl_ctrl", "true"), "adap_kl_ctrl=True: CoMLRL's reference_kl_coef is fixed"),
    (("--mini_batch_size", "2"), "must be whole groups of group_size 4 rows"),
    (("--precision", "bf16-mixed"), "precision 'bf16-mixed': CoMLRL's MAGRPO computes"),
])
def test_settings_comlrl_cannot_map_are_refused_before_any_model(tmp_path, imdb_csv, flags, message):
    pytest.importorskip("comlrl.trainers.reinforce")
    from benchmarks.comlrl_magrpo import make_comlrl_trainer

    with pytest.raises(ValueError, match=message):
        make_comlrl_trainer(0, 32, run_dir=str(tmp_path), flags=(*TINY, *flags))


def test_the_ladder_runs_the_arm_on_the_imdb_rung_only(tmp_path):
    from benchmarks import learning, rungs

    arm = rungs.EXTERNAL_ARMS["comlrl-magrpo"]
    assert (arm.module, arm.rung, arm.metric, arm.extra) == ("benchmarks.comlrl_magrpo", "imdb", "pioneer", "comlrl")
    result = learning.main(["--rung", "sanity", "--arms", "comlrl-magrpo", "--out", str(tmp_path / "x.json")])
    assert result["skipped"] == {"comlrl-magrpo": "only on the imdb rung"}


def _run(arm, seed, rewards, cpu, before=0.1, episodes=48):
    curve = [{"episodes": i * 16, "reward": r, "train_cpu_s": c} for i, (r, c) in enumerate(zip(rewards, cpu))]
    return {"arm": arm, "seed": seed, "before": before, "final": rewards[-1], "episodes": episodes,
            "train_cpu_s": cpu[-1], "curve": curve}


def test_time_to_reward_against_comlrl_pairs_magrpo_wo_kt_with_comlrl(tmp_path, monkeypatch, imdb_csv):
    import benchmarks.time_to_reward as ttr

    calls = []
    monkeypatch.setattr(ttr.subprocess, "run", lambda cmd, check: calls.append(cmd))
    ttr.run_seed(1, tmp_path / "seed_1.json", ttr.AGAINST["comlrl"])
    assert calls[0][calls[0].index("--arms") + 1:][:2] == ["magrpo-wo-kt", "comlrl-magrpo"] and "--flags" not in calls[0]
    runs = [_run("magrpo-wo-kt", 0, [0.1, 0.5], [0, 20]), _run("comlrl-magrpo", 0, [0.1, 0.5], [0, 80]),
            _run("grpo", 0, [0.1, 0.5], [0, 40])]  # another pairing's run is not a partner
    (tmp_path / "seed_0.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    result = ttr.main(["--against", "comlrl", "--report_only", "--seeds", "0", "--runs_dir", str(tmp_path),
                       "--out", str(tmp_path / "report.json")])
    assert result["per_seed"][0]["ratio"] == pytest.approx(0.25) and result["against"] == "comlrl"
    assert set(result["train_cpu_s"]) == {"magrpo-wo-kt", "comlrl-magrpo"}
    assert ttr.table(result).splitlines()[0] == ("| seed | ours (`magrpo-wo-kt`) to +0.2 | CoMLRL `MAGRPOTrainer` to "
                                                 "+0.2 | ours ÷ CoMLRL |")
    with pytest.raises(SystemExit):  # CoMLRL has no mixed precision
        ttr.main(["--against", "comlrl", "--precision", "bf16", "--report_only", "--runs_dir", str(tmp_path)])
