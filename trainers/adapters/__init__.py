"""Adapters to other RL libraries: the CORY env and its seats as Tianshou, Stable-Baselines3 and TorchRL expect them,
one module per library, each working for any seating (every seat's reward lands on that seat's own last action,
whoever acts last).

| module | library | what | entry point |
|---|---|---|---|
| `trainers.adapters.tianshou` | Tianshou 2.0 | `TianshouObsWrapper` (observation format), `SequentialMultiAgentOnPolicyAlgorithm` (the terminal-reward fix of Tianshou issue #399), one PPO per seat | `train_and_evaluate` (``examples/tianshou_marl.py``) |
| `trainers.adapters.sb3` | Stable-Baselines3, sb3-contrib | `TokenEmbedding` (features extractor: token ids embedded, not fed as magnitudes), MaskablePPO on the pioneer seat (alone, or with partner seats) | `train_and_evaluate` (``examples/sb3_baseline.py``) |
| `trainers.adapters.torchrl` | TorchRL | `seat_transitions` (each seat's own transitions with its reward on its last action), one ``ClipPPOLoss`` + ``GAE`` per seat | `train_and_evaluate` (``examples/torchrl_marl.py``) |
| `trainers.adapters.window` | none | `episode_size`: the window every adapter's env gets by default (a whole query and every response a seat reads fit; it grows with the seats) and the most steps of an episode | used by the three |

Every adapter reads the window L and the vocabulary V from the env it wraps; none keeps a size of its own.
Importing this package imports none of those libraries; importing a module imports its library (Tianshou comes with
the project; the others with ``pip install -e ".[baselines]"``). The learning ladder runs the three as arms
(`benchmarks/learning.py`: ``tianshou``, ``sb3-maskable-ppo``, ``torchrl``).
"""
