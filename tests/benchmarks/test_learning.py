"""The learning ladder's CI guard: training must make the held-out reward go up (`benchmarks/learning.py`).

Runs the real command on small budgets: the sanity rung (a one-token bandit through env → agent → PPO learner)
and a short tiny_vocab CORY run. A learner that stops learning (a sign error in the advantages, a detached
log-probability, rollouts scored under another distribution than they were sampled from) fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "benchmarks" / "learning.py"
TINY_VOCAB_RANDOM = 0.42  # collective reward of a uniformly random policy (cory_env.tasks.tiny_vocab)


# A guard against a hung run, not a speed target (the slowest rung here takes ≈ 3 min on 2 idle cores and more
# than 5 when the cores are shared): speed lives in benchmarks/, never in a unit test.
HUNG_AFTER_S = 1800


def _ladder(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "ladder.json"
    subprocess.run([sys.executable, str(LADDER), *args, "--seeds", "0", "--out", str(out)], check=True,
                   cwd=ROOT, capture_output=True, text=True, timeout=HUNG_AFTER_S)
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_sanity_rung_learns_the_bandit(tmp_path):
    result = _ladder(tmp_path, "--rung", "sanity")
    ppo = result["arms"]["ppo"]
    assert ppo["before"] < 0.4  # random: 3 of 17 allowed tokens
    assert ppo["per_seed"][0] >= 0.9, ppo
    assert result["floors"]["ppo"]["met_on_every_seed"]
    assert ppo["cpu_s"] <= 60
    assert (tmp_path / "ladder.png").exists()


@pytest.mark.slow
def test_short_tiny_vocab_cory_run_beats_random(tmp_path):
    result = _ladder(tmp_path, "--rung", "tiny_vocab", "--arms", "cory", "--episodes", "6144")
    cory = result["arms"]["cory"]
    assert cory["metric"] == "collective" and cory["episodes"] == 6144
    assert cory["per_seed"][0] > TINY_VOCAB_RANDOM + 0.2, cory
    assert cory["per_seed"][0] > cory["before"] + 0.2, cory


@pytest.mark.slow
def test_knowledge_transfer_pays_on_the_relay_task(tmp_path):
    """The query is private to the pioneer: with knowledge transfer the pair learns to relay it, without it the
    observer is blind (measured at 16,384 episodes: CORY ≈ 1.4, w/o KT ≈ 0.8; docs/results/learning.md)."""
    result = _ladder(tmp_path, "--rung", "relay", "--episodes", "16384", "--arms", "cory", "cory-wo-kt")
    cory, blind = result["arms"]["cory"], result["arms"]["cory-wo-kt"]
    assert cory["per_seed"][0] > 1.1, cory
    assert cory["per_seed"][0] > blind["per_seed"][0] + 0.3, (cory, blind)


@pytest.mark.slow
def test_a_chain_of_three_needs_every_link_of_knowledge_transfer(tmp_path):
    """chain_relay: the query is private to the first of three seats and each seat reads only the one
    before; with transfer the chain passes the query along, without it the later seats are blind (measured at
    32,768 episodes, seed 0: 1.56 vs 1.06; docs/results/learning.md)."""
    result = _ladder(tmp_path, "--rung", "chain_relay", "--episodes", "32768", "--arms", "chain3", "chain3-wo-kt")
    chain, blind = result["arms"]["chain3"], result["arms"]["chain3-wo-kt"]
    assert chain["metric"] == "collective" and chain["per_seed"][0] > 1.3, chain
    assert chain["per_seed"][0] > blind["per_seed"][0] + 0.3, (chain, blind)


def _run(arm: str, seed: int, final: float, before: float = 0.2) -> dict:
    return {"arm": arm, "seed": seed, "final": final, "before": before, "episodes": 64, "cpu_s": 1.0,
            "train_cpu_s": 0.5, "curve": [[0, before, 0.1], [64, final, 0.5]], "metric": "collective"}


def test_ceilings_hold_only_when_every_seed_stays_below():
    from benchmarks.ladder_summary import summarise
    from benchmarks.rungs import RUNGS

    ceiling = RUNGS["relay"].ceilings["cory-wo-kt"]
    runs = [_run("cory", 0, 1.9), _run("cory", 1, 1.85), _run("cory-wo-kt", 0, ceiling - 0.1),
            _run("cory-wo-kt", 1, ceiling + 0.01)]
    result = summarise("relay", runs, {}, ["--rung", "relay"])
    assert result["floors"]["cory"]["met_on_every_seed"]
    assert not result["ceilings"]["cory-wo-kt"]["met_on_every_seed"]
    assert result["ceilings"]["cory-wo-kt"]["per_seed"] == [ceiling - 0.1, ceiling + 0.01]
    result = summarise("relay", runs[:3], {}, ["--rung", "relay"])
    assert result["ceilings"]["cory-wo-kt"]["met_on_every_seed"]
    assert result["arms"]["cory"]["train_cpu_s"] == 0.5


def test_external_arms_run_on_their_own_rung_only(tmp_path):
    from benchmarks import learning, rungs

    for spec in rungs.EXTERNAL_ARMS.values():
        assert spec.rung in rungs.RUNGS and spec.metric in ("collective", "pioneer")
    with pytest.raises(SystemExit):  # an unknown arm is refused before anything runs
        learning.main(["--rung", "sanity", "--arms", "no-such-arm", "--out", str(tmp_path / "x.json")])
    result = learning.main(["--rung", "sanity", "--arms", "trl-grpo", "tianshou", "--out", str(tmp_path / "x.json")])
    assert result["skipped"] == {"trl-grpo": "only on the imdb rung", "tianshou": "only on the tiny_vocab rung"}
    assert result["arms"] == {} and json.loads((tmp_path / "x.json").read_text())["skipped"] == result["skipped"]


@pytest.mark.parametrize("arm, precision", [("trl-grpo", None), ("trl-grpo-default", "trl-default")])
def test_an_external_arm_passes_its_options(arm, precision, monkeypatch):
    """`trl-grpo-default` runs TRL's module in TRL's own precision; `trl-grpo` passes nothing (fp32, ours)."""
    pytest.importorskip("trl")
    import benchmarks.trl_grpo
    from benchmarks import ladder_run

    seen = {}

    def fake(seed, episodes, eval_episodes, **options):
        seen.update(options)
        return {"after": 0.5, "before": 0.1, "episodes": episodes, "curve": []}

    monkeypatch.setattr(benchmarks.trl_grpo, "train_and_evaluate", fake)
    run = ladder_run.run_external_arm(arm, 0, 16, 8)
    assert run["arm"] == arm and seen == ({"precision": precision} if precision else {})


def test_training_clock_leaves_evaluation_out():
    import time

    from benchmarks.ladder_run import TrainingClock

    def busy(seconds: float) -> dict:
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
        return {"reward": 1.0}

    clock = TrainingClock()
    evaluate = clock.excluded(lambda: busy(0.3))
    first = clock.point("arm", 0, 0, evaluate())
    busy(0.2)  # "training"
    last = clock.point("arm", 0, 8, evaluate())
    summary = clock.summary([first, last])
    assert 0.15 < last["train_cpu_s"] - first["train_cpu_s"] < 0.3  # only the training share between the points
    assert summary["cpu_s"] - summary["train_cpu_s"] >= 0.6  # two evaluations of 0.3 s
    assert (summary["curve"][1]["episodes"], summary["curve"][1]["reward"]) == (8, 1.0) and summary["final"] == 1.0
    assert "eval" not in summary["curve"][1]


def test_equal_time_interpolates_each_seed_at_the_shortest_arms_training_time():
    from benchmarks.ladder_report import equal_time, reward_at_cpu

    curve = [[0, 0.0, 0.0], [10, 1.0, 10.0], [20, 3.0, 20.0]]
    assert reward_at_cpu(curve, 5.0) == 0.5 and reward_at_cpu(curve, 15.0) == 2.0
    assert reward_at_cpu(curve, 25.0) is None and reward_at_cpu([[0, 0.0], [10, 1.0]], 5.0) is None
    result = {"arms": {
        "fast": {"train_cpu_s": 10.0, "curves": [[[0, 0.0, 0.0], [10, 1.0, 10.0]], [[0, 0.0, 0.0], [10, 0.5, 8.0]]]},
        "slow": {"train_cpu_s": 20.0, "curves": [curve, curve]},
    }}
    same = equal_time(result)
    assert same["train_cpu_s"] == 8.0  # the shortest seed of the shortest arm
    assert same["arms"]["slow"]["per_seed"] == [0.8, 0.8]
    assert same["arms"]["fast"]["per_seed"] == [0.8, 0.5]
    assert equal_time({"arms": {"fast": result["arms"]["fast"]}}) is None


def test_merge_summarises_runs_made_apart(tmp_path):
    from benchmarks.ladder_summary import merge, summarise

    a = summarise("relay", [_run("cory", 0, 1.9), _run("cory", 1, 1.7)], {}, ["--rung", "relay", "--arms", "cory"])
    b = summarise("relay", [_run("cory-wo-kt", 0, 1.0)], {}, ["--rung", "relay", "--arms", "cory-wo-kt"])
    paths = []
    for name, part in (("a", a), ("b", b)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(part), encoding="utf-8")
    merged = merge([str(p) for p in paths], tmp_path / "m.json", ["--merge"])
    (tmp_path / "x.json").write_text(json.dumps({**b, "rung": "sanity"}), encoding="utf-8")
    assert set(merged["arms"]) == {"cory", "cory-wo-kt"}
    assert merged["arms"]["cory"]["per_seed"] == [1.9, 1.7]
    assert not merged["floors"]["cory"]["met_on_every_seed"] and merged["ceilings"]["cory-wo-kt"]["met_on_every_seed"]
    assert merged["commands"]["cory-wo-kt"].endswith("--arms cory-wo-kt")
    assert json.loads((tmp_path / "m.json").read_text())["arms"]["cory"]["mean"] == pytest.approx(1.8)
    old = dict(a)  # written before the JSON kept its runs: they are rebuilt from the arm's summary
    del old["runs"]
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    again = merge([str(tmp_path / "old.json"), str(paths[1])], tmp_path / "m2.json", [])
    for key in ("per_seed", "mean", "std", "before", "gain_per_seed", "train_cpu_s"):
        assert again["arms"]["cory"][key] == pytest.approx(merged["arms"]["cory"][key]), key
    assert again["arms"]["cory"]["curves"] == merged["arms"]["cory"]["curves"]
    with pytest.raises(SystemExit, match="of one rung"):
        merge([str(paths[0]), str(tmp_path / "x.json")], tmp_path / "m3.json", [])
    with pytest.raises(SystemExit, match="no such ladder JSON"):
        merge([str(paths[0]), str(tmp_path / "absent.json")], tmp_path / "m4.json", [])
    merge([str(p) for p in paths], tmp_path / "new" / "folder" / "m.json", [])  # --out's folder is made
    assert (tmp_path / "new" / "folder" / "m.json").is_file()


def test_first_reach_interpolates_episodes_and_cpu():
    from benchmarks.ladder_report import first_reach

    curve = [[0, 0.1, 1.0], [100, 0.2, 11.0], [200, 0.4, 21.0]]
    assert first_reach(curve, 0.3) == pytest.approx({"episodes": 150.0, "train_cpu_s": 16.0})
    assert first_reach(curve, 0.5) is None
    assert first_reach([[0, 0.1], [100, 0.5]], 0.3) == {"episodes": pytest.approx(50.0), "train_cpu_s": None}


def test_summarise_gives_each_arm_its_iqm_and_interval():
    from benchmarks.ladder_report import table
    from benchmarks.ladder_summary import summarise

    runs = [_run("cory", s, final) for s, final in enumerate((1.9, 1.7, 1.8))] + [_run("cory-wo-kt", 0, 1.0)]
    result = summarise("relay", runs, {}, ["--rung", "relay"])
    cory = result["arms"]["cory"]
    assert cory["stats"] == {"final": {"iqm": pytest.approx(1.8), "ci": [pytest.approx(1.7), pytest.approx(1.9)],
                                       "n": 3, "mean": pytest.approx(1.8)}}  # 3 seeds: the interval is their range
    assert cory["mean"] == pytest.approx(1.8) and cory["std"] == pytest.approx(0.1)  # the older fields stay
    assert result["arms"]["cory-wo-kt"]["stats"]["final"]["why"] == "one seed"
    rows = table(result).splitlines()
    assert rows[0].startswith("| arm | held-out reward | IQM [95 % CI] | per seed |")  # relay: floors on rewards
    assert "| 1.800 [1.700, 1.900] |" in rows[2] and "| 1.000 [n/a: one seed] |" in rows[3]
    gains = summarise("imdb", [{**_run("ppo", s, 0.5 + s / 10), "metric": "pioneer"} for s in range(2)], {}, [])
    assert gains["arms"]["ppo"]["stats"]["gain"]["iqm"] == pytest.approx(0.35)  # imdb: floors on the gain
    assert "| gain IQM [95 % CI] |" in table(gains).splitlines()[0]
    assert result["commits"] == {"cory-s0": "unrecorded", "cory-s1": "unrecorded", "cory-s2": "unrecorded",
                                 "cory-wo-kt-s0": "unrecorded"}


def _parts(tmp_path, *parts: tuple[str, list[dict], list[str]]) -> list[str]:
    """Ladder JSONs of the relay rung, one per (name, runs, extra shared flags); their paths."""
    from benchmarks.ladder_summary import summarise

    paths = []
    for name, runs, extra in parts:
        part = summarise("relay", runs, {}, ["--rung", "relay"])
        part["shared_flags"] += extra
        paths.append(str(tmp_path / f"{name}.json"))
        Path(paths[-1]).write_text(json.dumps(part), encoding="utf-8")
    return paths


def test_merge_refuses_runs_of_other_settings_or_budgets(tmp_path):
    from benchmarks.ladder_summary import merge

    cory = [_run("cory", 0, 1.9), _run("cory", 1, 1.7)]
    other_kl = _parts(tmp_path, ("a", cory, []), ("b", [_run("cory-wo-kt", 0, 1.0)], ["--init_kl_coef", "0.2"]))
    with pytest.raises(SystemExit, match=r"rung settings .*: --init_kl_coef is 0.01 for cory seed 0 \(.*a.json\) but "
                                         r"0.2 for cory-wo-kt seed 0 \(.*b.json\)"):
        merge(other_kl, tmp_path / "m.json", [])
    flagged = {**_run("cory-wo-kt", 0, 1.0), "flags": ["--ent_coef", "0.1"]}  # a run's own extra flags count too
    with pytest.raises(SystemExit, match="--ent_coef is 0.01 for .* but 0.1 for cory-wo-kt seed 0"):
        merge(_parts(tmp_path, ("a", cory, []), ("c", [flagged], [])), tmp_path / "m.json", [])
    with pytest.raises(SystemExit, match="--seating is unset for .* but chain for cory-wo-kt"):
        merge(_parts(tmp_path, ("a", cory, []), ("c", [_run("cory-wo-kt", 0, 1.0)], ["--seating", "chain"])),
              tmp_path / "m.json", [])
    same = _parts(tmp_path, ("a", cory, []), ("d", [_run("cory-wo-kt", 0, 1.0)], ["--init_kl_coef", "0.01"]))
    assert merge(same, tmp_path / "m.json", [])["arms"]["cory-wo-kt"]["per_seed"] == [1.0]  # the same value again
    longer = {**_run("cory-wo-kt", 0, 1.0), "episodes": 128}
    with pytest.raises(SystemExit, match=r"differ in episodes: cory seed 0 \(.*\) ran 64 but cory-wo-kt seed 0 .* 128"):
        merge(_parts(tmp_path, ("a", cory, []), ("e", [longer], [])), tmp_path / "m.json", [])
    control = {**_run("cory-2x", 0, 1.0), "episodes": 128}  # a -2x arm: twice the budget is the same budget
    assert "cory-2x" in merge(_parts(tmp_path, ("a", cory, []), ("f", [control], [])), tmp_path / "m.json", [])["arms"]
    paths = _parts(tmp_path, ("a", cory, []), ("g", [_run("cory-wo-kt", 0, 1.0)], []))
    part = json.loads(Path(paths[1]).read_text())
    Path(paths[1]).write_text(json.dumps({**part, "episodes": 1024}), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"differ in episodes \(65536 in .*a.json, 1024 in .*g.json\)"):
        merge(paths, tmp_path / "m.json", [])
    with pytest.raises(SystemExit, match="cory seed 0 is in both"):
        merge([paths[0], paths[0]], tmp_path / "m.json", [])


def test_merge_across_commits_only_when_asked_and_records_every_commit(tmp_path):
    from benchmarks.ladder_summary import merge
    from benchmarks.learning import main

    paths = _parts(tmp_path, ("a", [{**_run("cory", s, 1.8), "commit": "049d50d"} for s in (0, 1)], []),
                   ("b", [{**_run("cory-wo-kt", 0, 1.0), "commit": "64dde2e-dirty"}], []),
                   ("c", [_run("cory-wo-kt", 1, 1.1)], []))
    with pytest.raises(SystemExit, match=r"different commits \(049d50d: cory seed 0 .*, cory seed 1 .*; 64dde2e-dirty: "
                                         r"cory-wo-kt seed 0 .*\).*--across_commits"):
        merge(paths[:2], tmp_path / "m.json", [])
    with pytest.raises(SystemExit, match="unrecorded: cory-wo-kt seed 1"):  # no commit recorded: also refused
        merge([paths[0], paths[2]], tmp_path / "m.json", [])
    assert merge([paths[2]], tmp_path / "m.json", [])["commits"] == {"cory-wo-kt-s1": "unrecorded"}
    result = main(["--rung", "relay", "--merge", *paths, "--across_commits", "--out", str(tmp_path / "m.json"),
                   "--overwrite"])  # merge() above wrote m.json
    assert result["commits"] == {"cory-s0": "049d50d", "cory-s1": "049d50d", "cory-wo-kt-s0": "64dde2e-dirty",
                                 "cory-wo-kt-s1": "unrecorded"}
    written = json.loads((tmp_path / "m.json").read_text())
    assert written["across_commits"] is True and written["commits"] == result["commits"]
    assert [r.get("commit") for r in written["runs"]] == ["049d50d", "049d50d", "64dde2e-dirty", None]
