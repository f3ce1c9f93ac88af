"""Task rewards: the reward registry (``--reward``), the checked batched reward call, and the collective reward.

Task rewards score *text*: the query text plus a response text (decoded with ``skip_special_tokens=True``),
never the observer's template text (docs/paper.md §1 step 4). Every reward function is normalised to the signature
``reward_fn(query_texts, response_texts, records) -> sequence of floats`` (one per pair); `make_reward_fn`
builds one from a name or from a 2- or 3-argument callable. The built-in names are the IMDB task's
(`cory_env.tasks.imdb_rewards`: ``vader``, ``vader-gain``, ``distilbert-imdb``); a plug-in reward is a
``module:function`` name, an entry point of the group ``cory.rewards``, or `register_reward` (docs/extending.md).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cory_env.checks import MAX_MAGNITUDE
from cory_env.registry import Registry, import_object
from cory_env.seating import Seating

__all__ = [
    "REWARDS",
    "REWARD_NAMES",
    "RewardFn",
    "RewardFunctionError",
    "RewardSpec",
    "collective_reward",
    "make_reward_fn",
    "register_reward",
    "reward_name",
    "score_texts",
]

logger = logging.getLogger(__name__)

#: Normalised reward signature: (query_texts, response_texts, records) -> one float per pair.
RewardFn = Callable[[list[str], list[str], list[dict]], Sequence[float]]


class RewardFunctionError(ValueError):
    """A task reward function raised, or returned NaN/inf or the wrong number of values."""


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward (`REWARDS`, ``--reward NAME``).

    Attributes:
        factory: ``() -> reward function`` taking ``(queries, responses)`` or ``(queries, responses, records)`` and
            returning one float per pair; called once per env (e.g. to load a lexicon or a classifier once).
        summary: one line for tables and ``--help``.
        offline: works without the Hugging Face hub.
    """

    factory: Callable[[], Callable]
    summary: str = ""
    offline: bool = True


def _as_reward_spec(obj: Any) -> RewardSpec | None:
    """A reward function (or a class whose instances are one) named by ``module:attr`` or an entry point, as a
    `RewardSpec`; None for anything else."""
    if isinstance(obj, type):
        return RewardSpec(obj, summary=(obj.__doc__ or "").strip().split("\n")[0])
    if callable(obj):
        return RewardSpec(lambda: obj, summary=(getattr(obj, "__doc__", None) or "").strip().split("\n")[0])
    return None


#: Registered rewards: the IMDB task's (`cory_env.tasks.imdb_rewards`), imported on first use; a plug-in adds its
#: own with `register_reward` or the entry-point group ``cory.rewards``, or is named ``module:function``.
REWARDS: Registry[RewardSpec] = Registry("reward", RewardSpec, "cory.rewards", option="--reward",
                                         coerce=_as_reward_spec)
for _name, _attr in (("vader", "VADER"), ("vader-gain", "VADER_GAIN"), ("distilbert-imdb", "DISTILBERT_IMDB")):
    REWARDS.register(_name, f"cory_env.tasks.imdb_rewards:{_attr}")
#: The built-in reward names.
REWARD_NAMES = ("vader", "vader-gain", "distilbert-imdb")


def register_reward(name: str, spec: RewardSpec | Callable, *, overwrite: bool = False) -> None:
    """Make a reward available as ``--reward name`` in this process: a `RewardSpec`, or a reward function (used as
    is). An installed package uses the entry-point group ``cory.rewards`` instead.

    Raises:
        ValueError, TypeError: as `cory_env.registry.Registry.register`; a `spec` that is neither.
    """
    if not isinstance(spec, RewardSpec):
        coerced = _as_reward_spec(spec)
        if coerced is None:
            raise TypeError(f"register_reward({name!r}): expected a RewardSpec or a reward function, got "
                            f"{type(spec).__name__}")
        spec = coerced
    REWARDS.register(name, spec, overwrite=overwrite)


def make_reward_fn(spec: str | Callable) -> RewardFn:
    """A reward function in the normalised 3-argument form.

    Args:
        spec: a registered reward name (`REWARDS`: the built-in `REWARD_NAMES`, an entry point of the group
            ``cory.rewards``); an importable ``"module:function"`` name (what `reward_name` records for a callable);
            or a callable ``(queries, responses) -> floats`` or ``(queries, responses, records) -> floats``.

    Returns:
        ``reward_fn(query_texts, response_texts, records) -> sequence of floats``.

    Raises:
        ValueError: for an unknown name, or a ``module:function`` name that does not import to a callable
            (`cory_env.registry.Registry.get`).
        TypeError: for something neither a str nor a callable taking 2 or 3 positional arguments.
    """
    if isinstance(spec, str):
        if spec.startswith("<"):
            raise ValueError(f"reward {spec!r} records a callable that cannot be rebuilt by name; pass the callable "
                             "itself (reward_fn=...), a name in " f"{list(REWARD_NAMES)} or an importable "
                             "'module:function'")
        name = spec
        try:
            spec = REWARDS.get(name).factory()
        except TypeError as err:  # a class that needs arguments, a factory that is no factory
            raise ValueError(f"reward {name!r}: building it failed ({err}); give a reward function "
                             "(queries, responses) -> floats, a class whose instances are one, or a RewardSpec") from err
        if not callable(spec):
            raise ValueError(f"reward {name!r} built a {type(spec).__name__}, not a reward function (queries, "
                             "responses) -> floats; give a function, a class whose instances are one, or a RewardSpec")
    if not callable(spec):
        raise TypeError(f"reward must be a name or a callable, got {type(spec).__name__}: {spec!r}")
    n_args = _positional_arity(spec)
    if n_args == 2:
        return lambda queries, responses, records: spec(queries, responses)
    if n_args == 3 or n_args is None:
        return spec
    raise TypeError(f"reward callable {spec!r} takes {n_args} positional arguments; it must take "
                    "(queries, responses) or (queries, responses, records)")


def reward_name(fn: Callable) -> str:
    """What a run records for a reward callable: ``"module:qualname"`` when that name imports back to `fn`
    (`make_reward_fn` accepts it), else a description in angle brackets that no reward name matches.

    >>> reward_name(collective_reward)
    'cory_env.rewards:collective_reward'
    >>> reward_name(lambda q, r: r)
    '<callable <lambda> from cory_env.rewards, not importable by name>'
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if module and qualname and module != "__main__" and "<" not in qualname:
        name = f"{module}:{qualname}"
        try:
            if import_object(name, kind="reward") is fn:
                return name
        except ValueError:
            pass
    label = qualname or type(fn).__name__
    return f"<callable {label} from {module or '?'}, not importable by name>"


def _positional_arity(fn: Callable) -> int | None:
    """Number of positional parameters, capped at 3; None for *args or an unreadable signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    n = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


def score_texts(reward_fn: RewardFn, task_name: str, queries: list[str], responses: list[str],
                records: list[dict]) -> np.ndarray:
    """Call a reward function once on a batch of (query, response) texts and check what it returns.

    Args:
        reward_fn: normalised reward function (`make_reward_fn`).
        task_name: named in error messages.
        queries, responses, records: N query texts, N response texts, N data records.

    Returns:
        float64 (N,), finite.

    Accepted return values: any sequence of N real numbers that numpy converts to float64 (Python floats, ints
    and bools become floats; a numpy array; a CPU tensor). A tensor on another device is refused, not moved.

    Raises:
        RewardFunctionError: if the function raises (re-raised naming the task and the first text that fails
            alone), returns something that is not N numbers on the CPU (a tensor on another device, strings,
            None), or a NaN/inf (naming the text).
    """
    try:
        raw = reward_fn(queries, responses, records)
    except Exception as exc:  # noqa: BLE001 - re-raised with context below
        culprit = _first_failing(reward_fn, queries, responses, records)
        raise RewardFunctionError(f"task {task_name!r}: the reward function raised {type(exc).__name__}: {exc} "
                                  f"(offending text: {culprit!r})") from exc
    device = getattr(raw, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned a tensor on device {device}; "
                                  "return CPU numbers (call .cpu() or .tolist() on it)")
    try:
        values = list(raw)
        if any(isinstance(v, (str, bytes)) for v in values):
            raise TypeError("text is not a number")
        scores = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {type(raw).__name__} "
                                  f"{raw!r:.200}, not a sequence of numbers ({exc}); return one float per "
                                  "(query, response) pair") from exc
    if scores.shape[0] != len(queries):
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores.shape[0]} values for "
                                  f"{len(queries)} texts (first text: {queries[0] + responses[0]!r}); it must "
                                  "return one float per (query, response) pair")
    bad = ~np.isfinite(scores) | (np.abs(scores) > MAX_MAGNITUDE)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores[i]} for the text "
                                  f"{queries[i] + responses[i]!r}; rewards must be finite numbers of magnitude at "
                                  f"most {MAX_MAGNITUDE:g} (the collective reward multiplies them)")
    return scores


def _first_failing(reward_fn: RewardFn, queries: list[str], responses: list[str], records: list[dict]) -> str:
    """The first ``query + response`` on which `reward_fn` raises alone (the whole batch if none does)."""
    for q, r, rec in zip(queries, responses, records):
        try:
            reward_fn([q], [r], [rec])
        except Exception:  # noqa: BLE001 - only locating the culprit
            return q + r
    return " | ".join(q + r for q, r in zip(queries, responses))


def collective_reward(r_pioneer: np.ndarray, r_observer: np.ndarray, coef: float = 1.0) -> dict[str, np.ndarray]:
    """The reward each seat is trained on: its own task reward plus `coef` times its partner's.

    ``R_pioneer = r_pioneer + c * r_observer`` and ``R_observer = r_observer + c * r_pioneer``. With c = 1 both
    get the same collective reward ``r1 + r2``.

    Source: CORY (arXiv 2410.06101) §1 step 5 (collective reward R = r1 + r2); c = -1 is the paper's competitive
    ablation. The N-seat form is `cory_env.seating.Seating.rewards` (R = M · r), which this calls.

    Args:
        r_pioneer: float (B,), task reward of the pioneer's response.
        r_observer: float (B,), task reward of the observer's response.
        coef: c, the partner-reward coefficient (`EnvConfig.partner_reward_coef`).

    Returns:
        ``{"pioneer": float64 (B,), "observer": float64 (B,)}`` (new arrays).

    Raises:
        ValueError: if the shapes differ or `coef` is not finite.

    Example:
        >>> out = collective_reward(np.array([1.0]), np.array([0.5]), coef=-1.0)
        >>> out["pioneer"].tolist(), out["observer"].tolist()
        ([0.5], [-0.5])
    """
    r1 = np.asarray(r_pioneer, dtype=np.float64)
    r2 = np.asarray(r_observer, dtype=np.float64)
    if r1.shape != r2.shape:
        raise ValueError(f"r_pioneer {r1.shape} and r_observer {r2.shape} must have the same shape (B,)")
    if not math.isfinite(coef):
        raise ValueError(f"coef must be finite, got {coef}")
    return Seating.cory(partner_reward_coef=coef).rewards([r1, r2])
