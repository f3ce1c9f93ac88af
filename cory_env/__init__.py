"""Token-level CORY environment: a PettingZoo AEC env (`env`, `raw_env`), a batched view (`BatchedCORYEnv`) and
the pioneer seat as a Gymnasium env (`PioneerEnv`; ids ``cory/Pioneer-v0``, ``cory/TinyVocab-v0``, registered on
import) over one pure episode core (`EpisodeBatch`). See `cory_env.token_env` for the user doc; Tianshou's
observation adapter is `cory_env.wrappers`."""

from cory_env.batched_env import BatchedCORYEnv
from cory_env.config import EnvConfig
from cory_env.episode import SEATS, EpisodeBatch, EpisodeTranscript, SeatTranscript
from cory_env.gym_env import PioneerEnv, register_envs
from cory_env.rewards import collective_reward, make_reward_fn
from cory_env.tasks import Task, make_task
from cory_env.token_env import env, raw_env

__all__ = [
    "SEATS",
    "BatchedCORYEnv",
    "EnvConfig",
    "EpisodeBatch",
    "EpisodeTranscript",
    "PioneerEnv",
    "SeatTranscript",
    "Task",
    "collective_reward",
    "env",
    "make_reward_fn",
    "make_task",
    "raw_env",
]

register_envs()
