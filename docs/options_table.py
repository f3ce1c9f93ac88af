"""Print the README's option tables from the config dataclasses' `metadata["help"]` (the only copy of the help).

    python docs/options_table.py > /tmp/options.md
"""

from __future__ import annotations

import dataclasses

from agents import SamplingConfig
from cory_env import EnvConfig
from trainers.config import CORYConfig, GRPOConfig, ModelConfig, PPOConfig


def table(cls) -> str:
    rows = [f"### `{cls.__name__}`", "", "| option | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else "—"
        text = f.metadata.get("help", "").replace("|", "\\|")
        rows.append(f"| `--{f.name}` | `{default}` | {text} |")
    return "\n".join(rows)


#: The README's order of the tables.
ORDER = (CORYConfig, ModelConfig, SamplingConfig, PPOConfig, GRPOConfig, EnvConfig)

if __name__ == "__main__":
    print("\n\n".join(table(c) for c in ORDER))
