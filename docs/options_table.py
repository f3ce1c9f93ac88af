"""Print the option tables from the config dataclasses' `metadata["help"]` (the only copy of the help): the base
configs of every run, then each registered learner's and task's own options class. The docs site's Options page
(docs/options.md) renders `tables()` at every build.

    python docs/options_table.py > /tmp/options.md
"""

from __future__ import annotations

import dataclasses

from agents import SamplingConfig
from cory_env import EnvConfig
from trainers.config import CORYConfig, ModelConfig, PPOConfig, all_config_classes


def table(cls) -> str:
    rows = [f"### `{cls.__name__}`", "", "| option | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else "—"
        text = f.metadata.get("help", "").replace("|", "\\|")
        rows.append(f"| `--{f.name}` | `{default}` | {text} |")
    return "\n".join(rows)


#: The order of the tables: the base configs, then the learners' and tasks' own options (registry order).
ORDER = (CORYConfig, ModelConfig, SamplingConfig, PPOConfig, EnvConfig,
         *[c for c in all_config_classes() if c not in (CORYConfig, ModelConfig, SamplingConfig, PPOConfig, EnvConfig)])


def tables() -> str:
    """Every table, in `ORDER`: the Options page of the docs site (``{optionstables}``) renders exactly this."""
    return "\n\n".join(table(c) for c in ORDER)


if __name__ == "__main__":
    print(tables())
