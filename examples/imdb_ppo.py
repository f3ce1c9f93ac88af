"""The single-agent PPO baseline on the same IMDB env and settings as `examples/imdb_cory.py`.

    python examples/imdb_ppo.py                                    # SmolLM2-135M, built-in openings
    python examples/imdb_ppo.py --model tiny --num_iterations 2    # seconds

Only the pioneer seat plays (no observer); its metrics are logged under `pioneer/` so curves overlay CORY's
(`cory plot runs/example-imdb-cory runs/example-imdb-ppo`).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from imdb_cory import main  # noqa: E402

if __name__ == "__main__":
    main("ppo")
