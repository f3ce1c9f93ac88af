"""Partner populations (trainers.matchmaking, trainers.loop.population): the schemes' schedules on hand cases, a population run that
seats, counts and resumes exactly, a plug-in scheme by ``module:attr``, and the refusals."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import yaml

from trainers.learning.joint import FrozenLearner

from trainers.cli import main
from trainers.loop.cory import CORYTrainer
from trainers.matchmaking import SCHEMES, Rotating, Scheme, SchemeSpec, Uniform, check_population, scheme_options
from trainers.loop.metrics import read_jsonl

MODELS, SEATS = ("llm1", "llm2", "llm3"), ("pioneer", "observer")
RELAY = {"task": "relay", "context_len": 12, "batch_size": 8, "mini_batch_size": 4}


def test_rotation_moves_a_window_over_the_population_every_period():
    scheme = Rotating(MODELS, SEATS, period=2)
    seen = [tuple(scheme.assign(t).values()) for t in range(6)]
    assert seen == [("llm1", "llm2"), ("llm1", "llm2"), ("llm2", "llm3"), ("llm2", "llm3"), ("llm3", "llm1"),
                    ("llm3", "llm1")]
    assert Rotating(MODELS[:2], SEATS, period=1).assign(1) == {"pioneer": "llm2", "observer": "llm1"}  # CORY's swap


def test_uniform_pairing_is_a_seeded_draw_of_distinct_models_that_covers_every_pair():
    scheme = Uniform(MODELS, SEATS, seed=0)
    draws = [scheme.assign(t) for t in range(60)]
    assert all(len(set(d.values())) == 2 for d in draws)
    assert {tuple(d.values()) for d in draws} == {(a, b) for a in MODELS for b in MODELS if a != b}
    assert draws == [Uniform(MODELS, SEATS, seed=0).assign(t) for t in range(60)]  # a function of (seed, t)
    assert draws != [Uniform(MODELS, SEATS, seed=1).assign(t) for t in range(60)]


def test_a_uniform_population_counts_episodes_per_model_and_resumes_exactly(tiny_run):
    flags = dict(**RELAY, population=3, matchmaking="uniform")
    straight = CORYTrainer(tiny_run("straight", num_iterations=4, **flags))
    rows = straight.train()
    seats = [{m: r[f"cory/{m}_seat"] for m in MODELS} for r in rows]
    assert all(sorted(s.values()) == [-1.0, 0.0, 1.0] for s in seats)  # two seated, one sitting out
    played = {m: sum(s[m] >= 0 for s in seats) * 8 for m in MODELS}
    assert {m: rows[-1][f"{m}/episodes"] for m in MODELS} == played
    CORYTrainer(tiny_run("cut", num_iterations=2, **flags)).train()
    # the default written out is the same setting: it resumes
    resumed = CORYTrainer(tiny_run("cut", num_iterations=4, resume=True, matchmaking_options="stream=0", **flags))
    resumed.train()
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rs]  # noqa: E731
    assert strip(read_jsonl(straight.output_dir / "metrics.jsonl")) == \
        strip(read_jsonl(resumed.output_dir / "metrics.jsonl"))


def test_a_population_run_recorded_by_the_previous_version_resumes(tiny_run):
    """Runs recorded their options as given (a list of KEY=VALUE, or None for the defaults); a resume compares them
    as this version records them (every option, as a mapping)."""
    for given, old in ((["every=2"], ["every=2"]), (None, None)):
        flags = dict(**RELAY, population=2, matchmaking="snapshots", matchmaking_options=given)
        name = f"old{bool(given)}"
        CORYTrainer(tiny_run(name, num_iterations=2, **flags)).train()
        run = Path(tiny_run(name).run.output_dir)
        for path in [run / "config.yaml", *run.glob("checkpoints/*/trainer_state.json")]:
            if path.suffix == ".yaml":
                data = yaml.safe_load(path.read_text())
                data["matchmaking_options"] = old
                path.write_text(yaml.safe_dump(data))
            else:
                state = json.loads(path.read_text())
                state["config"]["matchmaking_options"] = old
                path.write_text(json.dumps(state))
        rows = CORYTrainer(tiny_run(name, num_iterations=3, resume=True, **flags)).train()
        assert [r["iteration"] for r in rows] == [2]


def test_snapshots_with_a_reset_on_every_seat_change_leave_the_frozen_models_alone(tiny_run):
    rows = CORYTrainer(tiny_run("snapreset", num_iterations=4, **RELAY, population=2, matchmaking="snapshots",
                                matchmaking_options=["every=1", "p_snapshot=1.0"], reset_on_exchange=True)).train()
    assert [r.get("cory/observer_frozen", 0.0) for r in rows] == [0.0, 1.0, 1.0, 1.0]


def test_held_out_evaluations_of_a_population_follow_fixed_models(tiny_run):
    """Whoever a scheme seats, a population's evaluations seat llm1, llm2 in order (a curve follows fixed models);
    CORY's pair is evaluated in its current seats, as before."""
    trainer = CORYTrainer(tiny_run("evalpop", num_iterations=4, **RELAY, population=3, matchmaking="uniform",
                                   eval_episodes=4, eval_every=1))
    trainer.train()
    assert {s: b.name for s, b in trainer.exchange.seats.items()} == {"pioneer": "llm3", "observer": "llm1"}  # seed 0
    assert {s: b.name for s, b in trainer.exchange.evaluation_seats().items()} == {"pioneer": "llm1",
                                                                                    "observer": "llm2"}
    assert trainer.evaluated_model == "llm1"
    pair = CORYTrainer(tiny_run("evalpair", num_iterations=2, **RELAY, role_exchange_period=1))
    pair.exchange.after_iteration(0)  # CORY's role exchange: evaluations seat the models where they sit
    assert pair.exchange.evaluation_seats() == pair.exchange.seats and pair.evaluated_model == "llm2"


def test_a_model_trains_only_on_the_iterations_it_played(tiny_run):
    import torch

    trainer = CORYTrainer(tiny_run("idle", num_iterations=1, **RELAY, population=3, matchmaking="rotation"))
    before = {m: [p.detach().clone() for p in a.trainable_parameters()] for m, a in trainer.agents.items()}
    trainer.train()  # iteration 0: llm1 and llm2 play, llm3 sits out
    changed = {m: any(not torch.equal(a, b) for a, b in zip(before[m], trainer.agents[m].trainable_parameters()))
               for m in MODELS}
    assert changed == {"llm1": True, "llm2": True, "llm3": False}


def test_a_plugin_scheme_by_module_attr(tiny_run, monkeypatch):
    module = types.ModuleType("my_schemes")

    class Fixed(Scheme):  # llm3 always the pioneer, llm1 always the observer
        def assign(self, iteration):
            return {"pioneer": "llm3", "observer": "llm1"}

    module.FIXED = SchemeSpec(lambda options, models, seats, seed, period: Fixed())
    monkeypatch.setitem(sys.modules, "my_schemes", module)
    rows = CORYTrainer(tiny_run("plugin", num_iterations=2, **RELAY, population=3,
                                matchmaking="my_schemes:FIXED")).train()
    assert [(r["cory/llm3_seat"], r["cory/llm1_seat"], r["cory/llm2_seat"]) for r in rows] == [(0.0, 1.0, -1.0)] * 2


def test_a_scheme_names_the_model_the_runs_evaluations_follow_even_with_a_model_per_slot(tiny_run, tmp_path, capsys):
    """`Scheme.evaluated` decides what the held-out evaluations seat; its first seat's model is what the run records
    (``evaluated``) and what `cory eval` takes by default, also when the slots hold different models (where CORY's
    own role exchange follows llm1)."""
    module = types.ModuleType("my_eval_schemes")

    class Llm2First(Scheme):
        def assign(self, iteration):
            return {"pioneer": "llm1", "observer": "llm2"}

        def evaluated(self, iteration):
            return {"pioneer": "llm2", "observer": "llm1"}

    module.SPEC = SchemeSpec(lambda options, models, seats, seed, period: Llm2First(), reads_period=False)
    sys.modules["my_eval_schemes"] = module
    try:
        trainer = CORYTrainer(tiny_run("follow", num_iterations=1, **RELAY, models=["llm2=tiny-bpe"],
                                       matchmaking="my_eval_schemes:SPEC"))
        trainer.train()
        assert trainer.evaluated_model == "llm2"
        state = json.loads(next(trainer.output_dir.glob("checkpoints/iter-*/trainer_state.json")).read_text())
        assert state["evaluated"] == "llm2"
        assert main(["eval", str(trainer.output_dir), "--episodes", "4", "--out", str(tmp_path / "e.json")]) == 0
        assert json.loads((tmp_path / "e.json").read_text())["model_name"] == "llm2"
    finally:
        del sys.modules["my_eval_schemes"]


def test_scheme_options_belong_to_the_scheme():
    assert scheme_options(SCHEMES.get("uniform"), ["stream=3"], name="uniform").stream == 3
    # one KEY=VALUE string (YAML's `matchmaking_options: stream=1`, Python) is one entry, a mapping another spelling
    assert scheme_options(SCHEMES.get("uniform"), "stream=1", name="uniform").stream == 1
    assert scheme_options(SCHEMES.get("snapshots"), {"p_snapshot": 0.7, "every": 2}, name="snapshots") == \
        scheme_options(SCHEMES.get("snapshots"), ["every=2", "p_snapshot=0.7"], name="snapshots")
    with pytest.raises(ValueError, match="entry nope=1: 'nope' is not an option of 'uniform'; valid: stream"):
        scheme_options(SCHEMES.get("uniform"), ["nope=1"], name="uniform")
    with pytest.raises(ValueError, match=r"entry 'every' is invalid: write KEY=VALUE \(for 'snapshots': every=10 "
                                         r"keep=3 p_snapshot=0.5\)"):
        scheme_options(SCHEMES.get("snapshots"), ["every"], name="snapshots")
    with pytest.raises(ValueError, match="stream=-1 is invalid: use an integer >= 0"):
        scheme_options(SCHEMES.get("uniform"), ["stream=-1"], name="uniform")
    with pytest.raises(ValueError, match="sets every twice"):
        scheme_options(SCHEMES.get("snapshots"), ["every=2", "every=3"], name="snapshots")
    with pytest.raises(ValueError, match="matchmaking_options=0 is invalid"):  # not read as "no options"
        scheme_options(SCHEMES.get("uniform"), 0, name="uniform")
    with pytest.raises(ValueError, match="takes no options"):
        scheme_options(SCHEMES.get("rotation"), ["stream=1"], name="rotation")
    with pytest.raises(ValueError, match="seats as many models as seats"):
        check_population(SCHEMES.get("role-exchange"), "role-exchange", 3, 2)


TINY = ["--preset", "tiny", "--task", "relay", "--context_len", "12", "--num_iterations", "1"]


@pytest.mark.parametrize("args, message", [
    (["--population", "3"], "matchmaking scheme 'role-exchange' seats as many models as seats (2), got population=3"),
    (["--population", "1", "--matchmaking", "uniform"], "population=1 is invalid"),
    (["--matchmaking", "nosuch"], "nosuch"),
    (["--population", "3", "--matchmaking", "uniform", "--matchmaking_options", "x=1"], "'x' is not an option of 'uniform'"),
    (["--population", "3", "--matchmaking", "uniform", "--models", "llm4=tiny"], "models names the slot(s) ['llm4']"),
    (["--population", "3", "--matchmaking", "rotation", "--role_exchange_period", "0"],
     "role_exchange_period=0 never moves the seats' window, so llm3 would never play"),
    (["--population", "3", "--matchmaking", "uniform", "--matchmaking_options", "stream=-1"], "stream=-1 is invalid"),
])
def test_bad_population_input_is_one_line_and_exit_2_before_any_folder(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main(["train", *TINY, *args, "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and not out.exists()


@pytest.mark.parametrize("lora", [False, True])
def test_self_play_against_frozen_snapshots_seats_them_never_updates_them_and_resumes_exactly(tiny_run, lora):
    import torch

    flags = dict(**RELAY, population=2, matchmaking="snapshots", use_lora=lora,
                 matchmaking_options=["every=2", "keep=1", "p_snapshot=1.0"])
    straight = CORYTrainer(tiny_run(f"snap{lora}", num_iterations=6, **flags))
    rows = straight.train()
    assert [r.get("cory/observer_frozen", 0.0) for r in rows] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # from iteration 2
    pop = straight.exchange
    assert sorted(pop.frozen) == ["llm1_snap6", "llm2_snap6"]  # keep=1: the latest only
    snap, source = pop.bundles["llm1_snap6"], pop.bundles["llm1"]
    assert isinstance(snap.learner, FrozenLearner) and snap.agent is not source.agent
    if lora:  # the retired snapshots' adapters left the shared model: one per model in the pool
        assert sorted(source.agent.model.peft_config) == ["llm1", "llm1_snap6", "llm2", "llm2_snap6"]
    assert all(torch.equal(a, b) for a, b in zip(snap.agent.trainable_parameters(), source.agent.trainable_parameters()))
    # a snapshot seated in iterations 2-5 never changed: the one taken after iteration 1 equals llm1 then
    cut = tiny_run(f"cut{lora}", num_iterations=3, **flags)
    CORYTrainer(cut).train()  # its checkpoint (iteration 2) holds the snapshots taken after iteration 1
    recorded = yaml.safe_load((straight.output_dir / "config.yaml").read_text())
    assert recorded["matchmaking_options"] == {"every": 2, "keep": 1, "p_snapshot": 1.0}  # every option, one spelling
    # the options as YAML's mapping, in another order: the same setting, so it resumes
    flags["matchmaking_options"] = {"p_snapshot": 1, "keep": 1, "every": 2}
    resumed = CORYTrainer(tiny_run(f"cut{lora}", num_iterations=6, resume=True, **flags))
    resumed.train()
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rs]  # noqa: E731
    assert strip(read_jsonl(straight.output_dir / "metrics.jsonl")) == \
        strip(read_jsonl(resumed.output_dir / "metrics.jsonl"))


def test_the_snapshot_pool_keeps_the_latest_and_the_first_seat_learns():
    from trainers.matchmaking import Snapshots

    scheme = Snapshots(("llm1", "llm2"), SEATS, seed=0, every=2, keep=2, p_snapshot=1.0)
    assert scheme.pool(1) == [] and scheme.pool(5) == ["llm1_snap2", "llm2_snap2", "llm1_snap4", "llm2_snap4"]
    assert scheme.created(3) == {"llm1_snap4": "llm1", "llm2_snap4": "llm2"} and scheme.retired(5) == [
        "llm1_snap2", "llm2_snap2"]
    for t in range(20):
        seated = scheme.assign(t)
        assert seated["pioneer"] in ("llm1", "llm2")
        assert seated["observer"] in (scheme.pool(t) or ("llm1", "llm2"))


def test_cory_train_with_snapshots_labels_a_frozen_seat_and_evaluates_a_learning_model(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--num_iterations", "4", "--population", "2", "--matchmaking", "snapshots",
                 "--matchmaking_options", "every=2", "keep=1", "p_snapshot=1.0", "--eval_episodes", "4",
                 "--output_dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert '"observer (a frozen snapshot)"' in printed and "in the pioneer seat" in printed
    assert main(["eval", str(out), "--model_name", "llm2", "--episodes", "4"]) == 0
