"""Token-level CORY environment: a PettingZoo AEC env (`env`, `raw_env`), a batched view (`BatchedCORYEnv`) and
the pioneer seat as a Gymnasium env (`PioneerEnv`; ids ``cory/Pioneer-v0``, ``cory/TinyVocab-v0``, registered on
import) over one pure episode core (`EpisodeBatch`). The seat line-up is data: `Seating` (`cory_env.seating`). See
`cory_env.token_env` for the user doc; the adapters to other RL libraries (Tianshou, Stable-Baselines3, TorchRL)
are `trainers.adapters`."""

from cory_env.batched_env import BatchedCORYEnv
from cory_env.config import EnvConfig
from cory_env.episode import EpisodeBatch, EpisodeTranscript, SeatTranscript
from cory_env.gym_env import PioneerEnv, register_envs
from cory_env.rewards import collective_reward, make_reward_fn
from cory_env.seating import SEATS, Seat, Seating
from cory_env.tasks import Task, make_task
from cory_env.token_env import env, raw_env

__all__ = ["SEATS", "BatchedCORYEnv", "EnvConfig", "EpisodeBatch", "EpisodeTranscript", "PioneerEnv", "Seat",
           "SeatTranscript", "Seating", "Task", "collective_reward", "env", "make_reward_fn", "make_task", "raw_env"]

register_envs()
