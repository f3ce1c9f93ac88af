"""Token-level CORY environment: a PettingZoo AEC env (`env`, `raw_env`) and a batched view
(`BatchedCORYEnv`) over one pure episode core (`EpisodeBatch`). See `cory_env.token_env` for the user doc."""

from cory_env.batched_env import BatchedCORYEnv
from cory_env.config import EnvConfig
from cory_env.episode import SEATS, EpisodeBatch, EpisodeTranscript, SeatTranscript
from cory_env.rewards import collective_reward, make_reward_fn
from cory_env.tasks import Task, make_task
from cory_env.token_env import env, raw_env

__all__ = [
    "SEATS",
    "BatchedCORYEnv",
    "EnvConfig",
    "EpisodeBatch",
    "EpisodeTranscript",
    "SeatTranscript",
    "Task",
    "collective_reward",
    "env",
    "make_reward_fn",
    "make_task",
    "raw_env",
]
