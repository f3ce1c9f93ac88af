"""The docs site stays true: its code blocks run as written, the tables it renders from the code cover every option
and every logged metric, and no file points outside the repository for the paper.

The site itself is built strictly by CI (``sphinx-build -W``: a broken link, a missing figure or a docstring Sphinx
cannot parse fails there, naming the file and line); these tests hold what a build cannot check.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"

#: Pages whose ```python blocks are not run here, and why. Every other page's blocks run (a new page's too).
NOT_RUN = {
    "docs/architecture.md": "API sketches (signatures with types), not code",
    "docs/extending.md": "run by tests/test_extending.py (it trains the guide's plug-ins)",
}


def _options_table_module():
    spec = importlib.util.spec_from_file_location("options_table", DOCS / "options_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_text(path: Path) -> str:
    """A Markdown page with its ``{include}`` directives replaced by what they include (``:start-after:`` /
    ``:end-before:`` honoured), as Sphinx renders it."""
    text = path.read_text(encoding="utf-8")

    def expand(match: re.Match) -> str:
        included = (path.parent / match.group(1).strip()).read_text(encoding="utf-8")
        options = dict(re.findall(r"^:([a-z-]+): (.*)$", match.group(2), flags=re.M))
        if "start-after" in options:
            included = included[included.index(options["start-after"]) + len(options["start-after"]):]
        if "end-before" in options:
            included = included[:included.index(options["end-before"])]
        return included

    return re.sub(r"```\{include\} (.+)\n((?::.*\n)*)```", expand, text)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page_text(path), flags=re.S | re.M)


def run_blocks(path: Path, blocks: list[str], namespace: dict | None = None) -> dict:
    namespace = {} if namespace is None else namespace
    for block in blocks:
        exec(compile(block, str(path), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace


# ---- every page's code runs -----------------------------------------------------------------------------------------


def test_every_page_with_python_blocks_is_run_or_says_why_not():
    pages = sorted(p for p in [REPO_ROOT / "README.md", *DOCS.rglob("*.md")] if "_build" not in p.parts)
    with_code = {str(p.relative_to(REPO_ROOT)) for p in pages if python_blocks(p)}
    run_here = {"README.md", "docs/environment.md", "docs/training.md", "docs/libraries.md", "docs/seats.md",
                "docs/partners.md", "docs/metrics.md"}
    unrun = sorted(with_code - run_here - set(NOT_RUN))
    assert not unrun, f"python blocks nobody runs (run them in tests/test_docs.py or say why in NOT_RUN): {unrun}"
    assert run_here <= with_code
    included = python_blocks(DOCS / "environment.md") + python_blocks(DOCS / "training.md")
    assert all(block in included for block in python_blocks(REPO_ROOT / "README.md")), \
        "every README python block is one the environment or training page includes (and so runs)"


def test_the_environment_page_runs(tmp_path, monkeypatch):
    """docs/environment.md: the README's AEC episode, then the seatings, in one namespace, in order."""
    monkeypatch.chdir(tmp_path)
    page = DOCS / "environment.md"
    blocks = python_blocks(page)
    assert len(blocks) == 2 and "env.agent_iter()" in blocks[0]
    namespace = run_blocks(page, blocks)
    assert namespace["chain"].possible_agents == ["pioneer", "observer_1", "observer_2"]


def test_the_seats_page_runs(tmp_path, monkeypatch):
    """docs/seats.md: the env with a tokenizer per seat, then a GPT-2 and a Llama of different tokenizers trained
    together, in one namespace, in order."""
    monkeypatch.chdir(tmp_path)
    namespace = run_blocks(DOCS / "seats.md", python_blocks(DOCS / "seats.md"))
    assert namespace["aec"].action_space("observer").n == 384
    assert [row["cory/llm1_seat"] for row in namespace["history"]] == [0.0, 1.0]
    assert namespace["trainer"].env.tokenizers["pioneer"] is namespace["trainer"].agents["llm2"].tokenizer


def test_the_partners_page_runs(tmp_path, monkeypatch):
    """docs/partners.md: influence on the two hand-made observers (one ignores the pioneer, one copies it)."""
    monkeypatch.chdir(tmp_path)
    namespace = run_blocks(DOCS / "partners.md", python_blocks(DOCS / "partners.md"))
    assert namespace["lazy"]["influence"] == 0.0 and namespace["copier"]["copy_rate"] == 1.0


def test_the_metrics_pages_marl_eval_reading_runs_on_the_committed_export(tmp_path, monkeypatch):
    """docs/metrics.md: marl-eval (installed as the page says) reads the committed cross-play export of
    docs/partners.md and draws P(population > pair) (issue #60.16)."""
    for module in ("marl_eval", "colorcet", "seaborn", "rliable"):
        pytest.importorskip(module, reason="the page's install: pip install -e '.[marl-eval]' and id-marl-eval")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks").symlink_to(REPO_ROOT / "benchmarks")  # the page runs from the repository root
    (block,) = python_blocks(DOCS / "metrics.md")
    namespace = run_blocks(DOCS / "metrics.md", [block])
    assert sorted(namespace["raw"]["cory_relay"]["crossplay"]) == ["pair", "pop"]
    assert (tmp_path / "p_improvement_relay.png").stat().st_size > 0


def _training_example() -> str:
    (block,) = python_blocks(DOCS / "training.md")
    assert block == python_blocks(REPO_ROOT / "README.md")[1]  # the page includes the README's example
    return block


def test_the_training_example_runs_on_the_tiny_model(tmp_path, monkeypatch):
    """The README's (and Training page's) example, with the tiny random model the example names in its comment:
    four iterations, a role exchange every two, so `llm1` sat in the observer seat (1) during the last one."""
    monkeypatch.chdir(tmp_path)
    block = _training_example()
    real = 'model="smollm2-135m-instruct"'
    assert real in block and '# model="tiny"' in block  # the comment offers it
    namespace = run_blocks(DOCS / "training.md", [block.replace(real, 'model="tiny"')])
    history = namespace["history"]
    assert [row["iteration"] for row in history] == [0, 1, 2, 3] and history[-1]["cory/llm1_seat"] == 1
    assert (tmp_path / "runs" / "api" / "config.yaml").exists()


@pytest.mark.slow
@pytest.mark.real_model
def test_the_training_example_runs_as_written(tmp_path, monkeypatch, smollm2_tokenizer):
    monkeypatch.chdir(tmp_path)
    namespace = run_blocks(DOCS / "training.md", [_training_example()])
    assert len(namespace["history"]) == 4


@pytest.mark.slow
@pytest.mark.parametrize("library", ["tianshou", "sb3_contrib", "torchrl"])
def test_the_libraries_page_runs(library, tmp_path, monkeypatch):
    """docs/libraries.md: one block per library, each on its own."""
    pytest.importorskip(library)
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in python_blocks(DOCS / "libraries.md") if re.search(rf"^from {library}\b|^import {library}\b",
                                                                           b, flags=re.M)]
    assert len(blocks) == 1, f"docs/libraries.md: one block imports {library}"
    run_blocks(DOCS / "libraries.md", blocks)


# ---- the tables rendered from the code ------------------------------------------------------------------------------


def test_the_options_page_renders_the_tables_of_every_option():
    """docs/options.md holds no copy: the build renders `docs/options_table.py`'s tables, which must name every
    field of every config class, each with its help."""
    from trainers.config import all_config_classes

    assert re.search(r"^```\{optionstables\}\n```$", (DOCS / "options.md").read_text(encoding="utf-8"), flags=re.M)
    tables = _options_table_module().tables()
    for cls in all_config_classes():
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            assert f"| `--{f.name}` |" in tables, f"docs/options_table.py prints no row for --{f.name}"


def test_the_metrics_glossary_names_every_logged_key(tmp_path):
    """docs/metrics.md names every key a CORY iteration logs, with the PPO and the GRPO learners."""
    import torch

    from cory_env import EnvConfig
    from trainers.config import CORYConfig, GRPOConfig, ModelConfig, PPOConfig, RunConfigs
    from trainers.loop.cory import CORYTrainer

    glossary = (DOCS / "metrics.md").read_text(encoding="utf-8")
    documented = {name.split("/")[-1] for name in re.findall(r"`([a-z_0-9/]+)`", glossary)}
    logged = set()
    torch.set_num_threads(1)
    for learner, group in (("ppo", 1), ("grpo", 2)):
        trainer = CORYTrainer(RunConfigs(
            run=CORYConfig(output_dir=str(tmp_path / learner), num_iterations=2, role_exchange_period=1,
                           tensorboard=False, learner=learner, eval_every=2, eval_episodes=2),
            update=(PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1) if learner == "ppo" else
                    GRPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, group_size=group)),
            env=EnvConfig(min_new_tokens=2, max_new_tokens=4, context_len=64), model=ModelConfig(model="tiny")))
        logged |= {key for row in trainer.train() for key in row if key not in ("iteration", "eval")}
    missing = sorted({key.split("/")[-1] for key in logged} - documented)
    assert not missing, f"logged but not in docs/metrics.md: {missing}"


# ---- the repository stands alone ------------------------------------------------------------------------------------


def test_no_tracked_file_points_at_a_paper_outside_the_repository():
    """The paper is docs/paper.md; a clone has no ``shared`` folder next to it with the paper in it (the needles are
    split so that this file does not match itself)."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    needles = [("../shared/" + "docs").encode(), ("PAPER" + ".md").encode()]
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    offenders = []
    for name in filter(None, files.decode().split("\0")):
        path = REPO_ROOT / name
        if path.is_file() and any(n in path.read_bytes() for n in needles):
            offenders.append(name)
    assert not offenders, f"files that refer to the paper outside the repository (use docs/paper.md): {offenders}"


def _result_renderers() -> dict:
    """Marker kind -> how its block is printed from the committed file(s) it names (comma-separated paths)."""
    import json

    from benchmarks import collapse, iteration_profile, pareto, precision_learning, time_to_reward
    from benchmarks.ladder_summary import tables

    def load(path: str) -> dict:
        return json.loads((REPO_ROOT / path).read_text(encoding="utf-8"))

    def precision_tables(path: str) -> str:
        result = load(path)
        return f"{tables(result)}\n\n{precision_learning.improvement_table(result['precision_improvement'])}"

    return {"tables": lambda path: tables(load(path)),  # benchmarks/learning.py --rung imdb --tables JSON
            "collapse": lambda path: collapse.report(load(path)["arms"]),  # benchmarks/collapse.py
            "pareto": lambda path: pareto.table(load(path)),  # benchmarks/pareto.py
            "time to reward": lambda path: time_to_reward.table(load(path)),  # benchmarks/time_to_reward.py
            "iteration profile": lambda path: iteration_profile.table(load(path)["arms"]),  # iteration_profile.py
            "precision profile": lambda paths: iteration_profile.precision_table(*map(load, paths.split(","))),
            "precision learning": precision_tables}  # benchmarks/precision_learning.py


def test_the_results_tables_are_the_committed_ladder_runs():
    """Every ``<!-- KIND: PATH -->`` ... ``<!-- end KIND -->`` block of the results pages is what the benchmark
    that wrote PATH prints from it (`_result_renderers`: ``tables`` is ``benchmarks/learning.py --tables JSON``,
    ``collapse`` `benchmarks/collapse.py`, ...): a re-run updates the page (paste that output), or this fails."""
    renderers = _result_renderers()
    found = 0
    for page in sorted((DOCS / "results").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for kind, path, body in re.findall(r"<!-- ([a-z ]+): (\S+) -->\n(.*?)\n<!-- end \1 -->", text, flags=re.S):
            assert kind in renderers, f"{page.name}: unknown results block kind {kind!r}; one of {sorted(renderers)}"
            found += 1
            assert body == renderers[kind](path), (f"{page.name}: the {kind} block of {path} is stale; paste what "
                                                   "the benchmark that wrote it prints")
    assert found >= 3


def test_the_api_pages_list_every_module_without_the_optional_libraries():
    """The site builds from the README's install alone: listing the API's modules imports no adapter, so a library
    of an extra (sb3-contrib, TorchRL) that is not installed is mocked by autodoc instead of failing the build. Run
    with those libraries hidden (``sys.modules[name] = None``: not installed, as importlib sees it)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "for m in ('stable_baselines3', 'sb3_contrib', 'torchrl', 'tensordict'):\n"
            "    sys.modules[m] = None\n"
            f"sys.path.insert(0, {str(REPO_ROOT / 'docs' / '_ext')!r})\n"
            "import cory_docs\n"
            "mods = cory_docs.public_modules('trainers')\n"
            "assert 'trainers.adapters.sb3' in mods and 'trainers.adapters.torchrl' in mods, mods\n"
            "packages = [m for m in mods if cory_docs.is_package(m)]  # what the API directive asks of each module\n"
            "assert 'trainers.adapters' in packages and 'trainers.adapters.sb3' not in packages\n"
            "assert 'trainers.adapters.sb3' not in sys.modules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
