"""TorchRL on the CORY token env, for any seating: the seat-transition credit fix, and one PPO (TorchRL's
``ClipPPOLoss`` + ``GAE``) per seat.

Needs the ``baselines`` extra (``pip install -e ".[baselines]"``: stable-baselines3, sb3-contrib, torchrl).

Pipeline: ``cory_env.env(task=..., seating=...)`` (PettingZoo AEC) → ``torchrl.envs.PettingZooWrapper(use_mask=True,
categorical_actions=True)``: one group per seat, ``(seat, "observation")`` = the window's ``input_ids`` and
``attention_mask``, ``(seat, "action_mask")``, ``(seat, "mask")`` = "this seat acts now" → ``Collector``
with ``trajs_per_batch`` (whole episodes only, concatenated) → `seat_transitions` → per seat ``GAE`` and
``ClipPPOLoss`` over an MLP on the embedded token window (`TokenMLP`), actions from a ``MaskedCategorical``.

**Sequential reward** (the trap of Tianshou issue #399): every seat's reward arrives on the last seat's last step,
where the earlier seats did not act, so their own transitions all show reward 0 and ``done`` False;
`seat_transitions` credits each seat's rewards to its own latest action and ends its episodes there.

`make_env` sizes the window for the seating (`trainers.adapters.window`: a whole query and every response a seat
reads fit); the networks read the window L and the vocabulary V from the env's specs (`token_sizes`).

`train_and_evaluate` is the entry point of `examples/torchrl_marl.py` and of the ladder arm ``torchrl``
(`benchmarks/learning.py`). Importing this module imports TorchRL.
"""

from __future__ import annotations

import functools
import time
import warnings

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.envs import PettingZooWrapper, SerialEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from cory_env.checks import check_number
from trainers.adapters.window import aec_env, default_context_len, episode_size

__all__ = ["EVAL_SEED_OFFSET", "SeatPPO", "TokenMLP", "evaluate", "make_actor_critic", "make_batched_env", "make_env",
           "seat_transitions", "seats_of", "token_sizes", "train_and_evaluate"]

#: Evaluation queries and sampling use seeds from here on; training uses `seed`.
EVAL_SEED_OFFSET = 1_000_000


def make_env(seed: int | None = None, *, task: str = "tiny_vocab", seating: str | None = None,
             context_len: int | None = None) -> PettingZooWrapper:
    """TorchRL's ``PettingZooWrapper`` over the CORY AEC env of a toy task (its own tokenizer and action mask).

    Args:
        seed: seeds the first reset (None: PettingZoo's default).
        task: ``tiny_vocab``, ``relay`` or ``chain_relay``; seating: a seating spec (None: the task's default).
        context_len: the window L in tokens; None: the ladder's 12 when a whole query and every response a seat
            reads fit, else the smallest window that holds them (`trainers.adapters.window.default_context_len`).

    Raises:
        ValueError: a task without its own tokenizer, a bad seating, or a `context_len` too small for even the
            shortest query (the env's error names the length needed).
    """
    aec = aec_env(task, seating, context_len=context_len)
    with warnings.catch_warnings():  # "PettingZoo in TorchRL is tested using version == 1.24.3": 1.27 works
        warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested", category=UserWarning)
        return PettingZooWrapper(env=aec, use_mask=True, categorical_actions=True, seed=seed)


def make_batched_env(num_envs: int, seed: int, **env_kwargs) -> SerialEnv:
    """`num_envs` `make_env` copies (with `env_kwargs`: task, seating, context_len) stepped together in one process (TorchRL
    ``SerialEnv``, batch (num_envs,)), seeded seed, seed + 1, ...: the policy runs once per batched step (TorchRL's
    per-step overhead dominates)."""
    env = SerialEnv(num_envs, functools.partial(make_env, **env_kwargs))
    env.set_seed(seed)
    return env


class TokenMLP(torch.nn.Module):
    """Embed the token window (padding gets id V), flatten, one hidden layer: (..., L) ids -> (..., out).

    Args:
        vocab_size: V; token ids lie in [0, V).
        context_len: L.
        out: output features (V logits for an actor, 1 for a critic).
        hidden: hidden units; embed_dim: embedding width per token.
    """

    def __init__(self, vocab_size: int, context_len: int, out: int, *, hidden: int = 64, embed_dim: int = 16) -> None:
        super().__init__()
        self.pad_id = vocab_size
        self.embed = torch.nn.Embedding(vocab_size + 1, embed_dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(embed_dim * context_len, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, out))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        ids = torch.where(attention_mask > 0, input_ids, torch.full_like(input_ids, self.pad_id))
        return self.mlp(self.embed(ids).flatten(start_dim=-2))


def token_sizes(env, seat: str | None = None) -> tuple[int, int]:
    """(V, L) of a TorchRL env over the CORY AEC env (`make_env`, `make_batched_env`): the vocabulary of `seat`'s
    action spec (default the first seat's) and the window of its ``input_ids`` observation, what `make_actor_critic`
    takes. TorchRL keeps one spec per seat (a group each), so seats of different tokenizers (docs/seats.md) get
    networks of their own sizes: ask per seat."""
    seat = seats_of(env)[0] if seat is None else seat
    return int(env.action_spec[seat, "action"].space.n), int(env.observation_spec[seat, "observation",
                                                                                  "input_ids"].shape[-1])


def _obs_keys(seat: str) -> list[tuple[str, ...]]:
    return [(seat, "observation", "input_ids"), (seat, "observation", "attention_mask")]


def make_actor_critic(seat: str, vocab_size: int, context_len: int) -> tuple[ProbabilisticActor, ValueOperator]:
    """The seat's actor (``MaskedCategorical`` over `TokenMLP` logits and ``(seat, "action_mask")``, writing
    ``(seat, "action")`` and ``(seat, "action_log_prob")``) and critic (``(seat, "state_value")``)."""
    logits = TensorDictModule(TokenMLP(vocab_size, context_len, vocab_size), in_keys=_obs_keys(seat),
                              out_keys=[(seat, "logits")])
    actor = ProbabilisticActor(logits, in_keys={"logits": (seat, "logits"), "mask": (seat, "action_mask")},
                               out_keys=[(seat, "action")], distribution_class=MaskedCategorical,
                               return_log_prob=True, log_prob_key=(seat, "action_log_prob"))
    critic = ValueOperator(TokenMLP(vocab_size, context_len, 1), in_keys=_obs_keys(seat),
                           out_keys=[(seat, "state_value")])
    return actor, critic


def seat_transitions(data: TensorDict, seat: str) -> TensorDict:
    """One seat's own transitions from a turn-based rollout, with its rewards and ends where PPO needs them.

    `data` is a flat rollout of whole episodes in time order (``Collector(..., trajs_per_batch=n, traj_format="cat")``):
    batch (T,), with ``(seat, "mask")`` bool (T, 1) = the seat acts at that step, and ``("next", seat, "reward")`` float
    (T, 1, 1) = what PettingZoo's ``rewards[seat]`` held after the step, whoever acted. For the k-th step where the seat
    acts, at time t_k, the result holds the seat's observation, action and log-prob at t_k, and:

    * ``("next", seat, "reward")``: the sum of the seat's rewards over steps t_k .. t_{k+1} - 1 (up to its next
      action, or the episode's end): the collective reward that arrives on the partner's last step is credited to
      the seat's last action (Tianshou issue #399's trap). Rewards before the seat's first action in an episode
      have no action to go to and are dropped (the CORY env pays none).
    * ``("next", seat, "done")`` / ``"terminated"``: True on the seat's last action of each episode (the env
      never truncates).
    * ``("next", seat, "observation")``: the seat's observation at t_{k+1} (its next decision point).

    Returns:
        A TensorDict of batch (M,) (M = steps where the seat acts) holding only the seat's group, its ``next``
        and ``("next", "done")``; group entries keep TorchRL's agent dimension (1).

    Raises:
        KeyError: if `data` has no group `seat`; ValueError: if it is not 1-D or the seat never acts.
    """
    if data.batch_dims != 1:
        raise ValueError(f"expected a flat (T,) rollout of whole episodes, got batch {tuple(data.batch_size)}")
    acts = data.get((seat, "mask")).reshape(-1)
    idx = acts.nonzero().squeeze(-1)
    if idx.numel() == 0:
        raise ValueError(f"seat {seat!r} never acts in this rollout of {data.numel()} steps")
    step_done = data.get(("next", "done")).reshape(-1)
    episode = torch.cumsum(step_done.long(), 0) - step_done.long()           # episode index of every step
    owner = torch.cumsum(acts.long(), 0) - 1                                 # the seat's latest action so far
    valid = (owner >= 0) & (episode[idx[owner.clamp(min=0)]] == episode)
    rewards = data.get(("next", seat, "reward")).reshape(-1)
    credited = torch.zeros(idx.numel(), dtype=rewards.dtype).index_add_(0, owner[valid], rewards[valid])
    last = torch.ones(idx.numel(), dtype=torch.bool)
    last[:-1] = episode[idx[1:]] != episode[idx[:-1]]
    following = torch.cat([idx[1:], idx[-1:]])                               # the seat's next decision step
    out = data.select(seat, ("next", seat))[idx]
    out.set(("next", seat, "observation"), data.get((seat, "observation"))[following])
    out.set(("next", seat, "reward"), credited.view(-1, 1, 1))
    for key in ("done", "terminated"):
        out.set(("next", seat, key), last.view(-1, 1, 1))
    out.set(("next", seat, "truncated"), torch.zeros_like(last).view(-1, 1, 1))
    return out


class SeatPPO:
    """TorchRL PPO for one seat: ``GAE`` (γ = 1, λ = 0.95) and ``ClipPPOLoss`` over `seat_transitions`."""

    def __init__(self, seat: str, actor: ProbabilisticActor, critic: ValueOperator, *, lr: float,
                 epochs: int, minibatch_size: int, entropy_coeff: float) -> None:
        self.seat, self.epochs, self.minibatch_size = seat, epochs, minibatch_size
        keys = {"reward": (seat, "reward"), "done": (seat, "done"), "terminated": (seat, "terminated"),
                "value": (seat, "state_value"), "advantage": (seat, "advantage"),
                "value_target": (seat, "value_target")}
        self.gae = GAE(gamma=1.0, lmbda=0.95, value_network=critic, average_gae=False)
        self.gae.set_keys(**keys)
        self.loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=entropy_coeff, critic_coeff=0.5,
                                normalize_advantage=True, loss_critic_type="smooth_l1")
        self.loss.set_keys(action=(seat, "action"), sample_log_prob=(seat, "action_log_prob"), **keys)
        self.optimizer = torch.optim.Adam(self.loss.parameters(), lr=lr)

    def update(self, data: TensorDict) -> dict[str, float]:
        """PPO epochs over the seat's transitions from a rollout of whole episodes; returns mean losses."""
        batch = seat_transitions(data, self.seat)
        with torch.no_grad():
            self.gae(batch)
        stats: dict[str, float] = {}
        steps = 0
        for _ in range(self.epochs):
            for mb in torch.randperm(batch.numel()).split(self.minibatch_size):
                losses = self.loss(batch[mb])
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                self.optimizer.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(self.loss.parameters(), 1.0)
                self.optimizer.step()
                for key in ("loss_objective", "loss_critic", "loss_entropy"):
                    stats[key] = stats.get(key, 0.0) + float(losses[key].detach())
                steps += 1
        return {f"{self.seat}/{k}": v / steps for k, v in stats.items()}


def seats_of(env) -> list[str]:
    """The seat groups of a TorchRL env over the CORY AEC env, in acting order (`make_env`, `make_batched_env`): the
    keys of its action spec (one group per seat)."""
    return list(env.action_spec.keys())


def evaluate(env: SerialEnv, policy: TensorDictSequential, episodes: int, seed: int, *,
             max_episode_steps: int) -> float:
    """Mean collective reward over `episodes` episodes of a sampled (not argmax) rollout of `policy` on `env`: the
    last seat's reward on the episode's last step (every seat's reward arrives there; with the collective reward
    they are one number).

    `env` (batch (n,), `make_batched_env`) is reseeded with `seed` (sub-env i: seed + i) and torch with `seed`
    (the global RNG is restored afterwards), so every call with the same seed plays the same queries and noise.
    Each sub-env plays ceil(episodes / n) whole episodes; the first `episodes` of them, sub-env by sub-env, count.

    Args:
        max_episode_steps: most env steps of one episode of `env`'s task and seating
            (``trainers.adapters.window.episode_size(task, seating).max_episode_steps``); the rollout is that many
            steps per episode long.

    Raises:
        ValueError: if a sub-env finished fewer episodes than it had to (`max_episode_steps` is too small).
    """
    n = env.batch_size[0]
    per_env = -(-episodes // n)
    seats = seats_of(env)
    with torch.random.fork_rng(devices=[]), set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
        torch.manual_seed(seed)
        env.set_seed(seed)
        rollout = env.rollout(max_episode_steps * per_env, policy, break_when_any_done=False)
    collective = []
    for i in range(n):
        ends = rollout[i].get(("next", "done")).reshape(-1)
        if int(ends.sum()) < per_env:
            raise ValueError(f"sub-env {i} finished {int(ends.sum())} of {per_env} episodes in "
                             f"{max_episode_steps * per_env} steps: max_episode_steps={max_episode_steps} is shorter "
                             "than an episode; pass episode_size(task, seating).max_episode_steps")
        collective.append(rollout[i].get(("next", seats[-1], "reward")).reshape(-1)[ends][:per_env])
    return float(torch.cat(collective)[:episodes].mean())


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int = 256, *, episodes_per_update: int = 64,
                       epochs: int = 4, minibatch_size: int = 64, lr: float = 3e-3, entropy_coeff: float = 0.01,
                       num_envs: int = 16, num_evals: int = 4, task: str = "tiny_vocab",
                       seating: str | None = None, context_len: int | None = None) -> dict:
    """Train one TorchRL PPO per seat on a toy task (default the tiny-vocabulary task) for `episodes` episodes.

    Each update collects `episodes_per_update` whole episodes (the last one fewer if the budget says so), then runs
    each seat's `SeatPPO.update`. Evaluation (`evaluate`, seed ``EVAL_SEED_OFFSET + seed``, disjoint from the
    training seed) runs before training, about every ``episodes / num_evals`` episodes, and at the end.

    Args:
        seed: seeds torch and the training env.
        episodes: training budget in episodes (one episode = every seat's answer), >= 1.
        eval_episodes: evaluation episodes per point, >= 1.
        episodes_per_update, epochs, minibatch_size, lr, entropy_coeff: PPO settings (per seat).
        num_envs: envs stepped together (`make_batched_env`), for training and for evaluation.
        num_evals: evaluation points during training (>= 1), besides the one before.
        task, seating: the toy task and a seating spec (None: the task's default seats).
        context_len: the window L (`make_env`); None: the smallest that holds a whole query and every response.

    Returns:
        ``{"before": float, "after": float, "episodes": int, "curve": [[episodes_so_far, reward], ...],
        "cpu_s": float}``: rewards are mean collective rewards (tiny_vocab: in [0, 2], optimum 2, random ≈ 0.42);
        ``episodes`` = training episodes used (= `episodes`); ``cpu_s`` the process CPU seconds of the call.

    Raises:
        ValueError: if a count is < 1; from `make_env`.
    """
    for name, value in (("episodes", episodes), ("eval_episodes", eval_episodes), ("num_evals", num_evals),
                        ("episodes_per_update", episodes_per_update), ("epochs", epochs),
                        ("minibatch_size", minibatch_size), ("num_envs", num_envs)):
        check_number(value, name, integer=True, low=1)
    cpu0 = time.process_time()
    torch.manual_seed(seed)
    steps = episode_size(task, seating).max_episode_steps
    env_kwargs = {"task": task, "seating": seating,
                  "context_len": default_context_len(task, seating) if context_len is None else context_len}
    env = make_batched_env(num_envs, seed, **env_kwargs)
    learners, actors = [], []
    for seat in seats_of(env):
        actor, critic = make_actor_critic(seat, *token_sizes(env, seat))
        actors.append(actor)
        learners.append(SeatPPO(seat, actor, critic, lr=lr, epochs=epochs, minibatch_size=minibatch_size,
                                entropy_coeff=entropy_coeff))
    policy = TensorDictSequential(*actors)
    eval_env, eval_seed = make_batched_env(num_envs, EVAL_SEED_OFFSET + seed, **env_kwargs), EVAL_SEED_OFFSET + seed
    curve = [[0, evaluate(eval_env, policy, eval_episodes, eval_seed, max_episode_steps=steps)]]
    collector = Collector(env, policy, frames_per_batch=steps * episodes_per_update,
                          trajs_per_batch=episodes_per_update, traj_format="cat",
                          auto_register_policy_transforms=False)
    used, next_eval = 0, episodes / num_evals
    for data in collector:
        ends = data.get(("next", "done")).reshape(-1).nonzero().squeeze(-1)   # last step of each episode
        data = data[: int(ends[min(episodes - used, ends.numel()) - 1]) + 1]    # never past the budget
        for learner in learners:
            learner.update(data)
        used += int(data.get(("next", "done")).sum())
        if used >= next_eval or used >= episodes:
            curve.append([used, evaluate(eval_env, policy, eval_episodes, eval_seed, max_episode_steps=steps)])
            next_eval = (int(used * num_evals / episodes) + 1) * episodes / num_evals
        if used >= episodes:
            break
    collector.shutdown()
    eval_env.close()
    return {"before": curve[0][1], "after": curve[-1][1], "episodes": used, "curve": curve,
            "cpu_s": time.process_time() - cpu0}
