"""Task rewards: the reward registry (``--reward``), the checked batched reward call, and the collective reward.

Task rewards score *text*: the query text plus a response text (decoded with ``skip_special_tokens=True``),
never the observer's template text (docs/paper.md §1 step 4). Every reward function is normalised to the signature
``reward_fn(query_texts, response_texts, records) -> sequence of floats`` (one per pair); `make_reward_fn`
builds one from a name or from a 2- or 3-argument callable. The built-in names are the IMDB task's
(`cory_env.tasks.imdb_rewards`: ``vader``, ``vader-gain``, ``distilbert-imdb``); a plug-in reward is a
``module:function`` name, an entry point of the group ``cory.rewards``, or `register_reward` (docs/extending.md).
"""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from cory_env.checks import MAX_REWARD, check_number
from cory_env.registry import Registry, import_object
from cory_env.seating import Seating

__all__ = ["REWARDS", "REWARD_NAMES", "RewardFn", "REWARD_CONTRACT", "RewardFunctionError", "RewardSignatureError",
           "RewardSpec", "collective_reward", "make_reward_fn", "register_reward", "reward_name", "reward_label",
           "score_texts"]

logger = logging.getLogger(__name__)

#: Normalised reward signature: (query_texts, response_texts, records) -> one float per pair.
RewardFn = Callable[[list[str], list[str], list[dict]], Sequence[float]]


#: What every reward keeps; each refusal quotes it.
REWARD_CONTRACT = ("a reward is called as reward(queries, responses) or reward(queries, responses, records) and "
                   "returns one finite number per (query, response) pair, in order: a list, tuple, 1-D array or CPU "
                   "tensor of N numbers")


class RewardFunctionError(ValueError):
    """A task reward function does not keep `REWARD_CONTRACT`: it raised, or returned something other than one
    finite number per (query, response) pair (a NaN/inf, the wrong count, nested rows, a mapping, None, text)."""


class RewardSignatureError(RewardFunctionError, TypeError):
    """A reward callable that cannot be called as ``(queries, responses)`` or ``(queries, responses, records)``;
    a `TypeError` too (a callable of the wrong kind), and a `ValueError`, which ``cory`` reports in one line."""


@dataclass(frozen=True)
class _PairReward:
    """A 2-argument reward ``(queries, responses)`` in the normalised 3-argument form (`make_reward_fn`)."""

    reward: Callable

    def __call__(self, queries: list[str], responses: list[str], records: list[dict]) -> Sequence[float]:
        return self.reward(queries, responses)


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
        ValueError, TypeError: as `cory_env.registry.Registry.register` (a name already registered, or claimed by
            an installed package's entry point, without `overwrite`: naming both); a `spec` that is neither.
    """
    if not isinstance(spec, RewardSpec):
        coerced = _as_reward_spec(spec)
        if coerced is None:
            raise TypeError(f"register_reward({name!r}): expected a RewardSpec or a reward function, got "
                            f"{type(spec).__name__}")
        spec = coerced
    REWARDS.register(name, spec, overwrite=overwrite, plugin=True)


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
        TypeError: for something neither a str nor a callable.
        RewardSignatureError: (a `TypeError` and a `ValueError`) for a callable that cannot be called as
            ``(queries, responses)`` or ``(queries, responses, records)``, checked here, before any call.
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
    return spec if _call_form(spec) == 3 else _PairReward(spec)


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


def _call_form(fn: Callable) -> int:
    """How `fn` is called: 3 (``fn(queries, responses, records)``: also for ``*args`` or an unreadable signature),
    or 2 (``fn(queries, responses)``); `RewardSignatureError` when neither."""
    if isinstance(fn, _PairReward):
        return 3
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some built-ins: called as given
        return 3
    for n in (3, 2):
        try:
            signature.bind(*range(n))
            return n
        except TypeError:
            pass
    raise RewardSignatureError(f"reward {reward_label(fn)}{signature} takes neither (queries, responses) nor "
                               f"(queries, responses, records); {REWARD_CONTRACT}")


def reward_label(fn: Callable) -> str:
    """``module:qualname`` of a reward callable for messages (of the 2-argument function behind a normalised one;
    ``Class()`` for an instance).

    >>> reward_label(collective_reward)
    'cory_env.rewards:collective_reward'
    """
    fn = fn.reward if isinstance(fn, _PairReward) else fn
    if isinstance(fn, functools.partial):
        return f"partial of {reward_label(fn.func)}"
    name = getattr(fn, "__qualname__", None) or f"{type(fn).__qualname__}()"
    return f"{getattr(fn, '__module__', None) or type(fn).__module__}:{name}"


def _short(obj: Any, limit: int = 100) -> str:
    """`obj`'s repr on one line, cut to `limit` characters."""
    text = " ".join(repr(obj).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _reward_values(raw: Any) -> np.ndarray:
    """What a reward returned as float64 (K,): a sequence of real numbers (an (N, 1) column counts as one per row);
    `ValueError` for anything else, saying what (to complete "not a sequence of numbers")."""
    if isinstance(raw, Mapping):
        raise ValueError("a mapping: its keys are not the pairs' rewards")
    if raw is None or isinstance(raw, (str, bytes, Set)) or not isinstance(raw, Iterable):
        raise ValueError("unordered" if isinstance(raw, Set) else "not a sequence")
    values = raw.tolist() if hasattr(raw, "tolist") else list(raw)  # an array or a tensor: nested Python lists
    if not isinstance(values, list):
        raise ValueError("a single number")
    values = [v.tolist() if hasattr(v, "tolist") else v for v in values]  # numpy scalars, 0-d tensors
    if values and all(isinstance(v, (list, tuple)) and len(v) == 1 for v in values):  # an (N, 1) column
        values = [v[0] for v in values]
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Real):
            row = f", one number per pair, not a row of {len(v)}" if isinstance(v, (list, tuple)) else ""
            raise ValueError(f"item {i} is {type(v).__name__} {_short(v, 40)}{row}")
    return np.asarray(values, dtype=np.float64)


def score_texts(reward_fn: RewardFn, task_name: str, queries: list[str], responses: list[str],
                records: list[dict]) -> np.ndarray:
    """Call a reward function once on a batch of (query, response) texts and check what it returns.

    Args:
        reward_fn: normalised reward function (`make_reward_fn`).
        task_name: named in error messages.
        queries, responses, records: N query texts, N response texts, N data records.

    Returns:
        float64 (N,), finite.

    Accepted return values: a list, tuple, 1-D numpy array or CPU tensor of N real numbers (Python ints and bools
    become floats), or an (N, 1) column of them (a classifier's one-logit output). Refused: a tensor on another
    device (not moved), nested rows (e.g. N/2 pairs), a mapping (its keys are no rewards), None or text (as a
    whole or as an item), a single number, a count other than N, NaN/inf or a magnitude above `MAX_REWARD` (1e12).

    Raises:
        RewardFunctionError: if the function raises (re-raised naming the task and the first text that fails
            alone) or returns anything refused above; one line naming the task, the reward, what it returned and
            `REWARD_CONTRACT`.
    """
    label = reward_label(reward_fn)
    try:
        raw = reward_fn(queries, responses, records)
    except Exception as exc:  # noqa: BLE001 - re-raised with context below
        culprit = _first_failing(reward_fn, queries, responses, records)
        raise RewardFunctionError(f"task {task_name!r}: the reward function raised {type(exc).__name__}: {exc} "
                                  f"(offending text: {culprit!r}; reward {label})") from exc
    device = getattr(raw, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned a tensor on device {device}; "
                                  f"return CPU numbers (call .cpu() or .tolist() on it) (reward {label})")
    try:
        scores = _reward_values(raw)
    except ValueError as exc:
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {type(raw).__name__} "
                                  f"{_short(raw)}, not a sequence of numbers ({exc}); {REWARD_CONTRACT} (reward "
                                  f"{label})") from None
    if scores.shape[0] != len(queries):
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores.shape[0]} values for "
                                  f"{len(queries)} texts (first text: {queries[0] + responses[0]!r}); it must "
                                  f"return one float per (query, response) pair (reward {label})")
    bad = ~np.isfinite(scores) | (np.abs(scores) > MAX_REWARD)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores[i]} for the text "
                                  f"{queries[i] + responses[i]!r}; rewards must be finite numbers of magnitude at "
                                  f"most {MAX_REWARD:g} (the collective reward multiplies them; express the reward "
                                  f"in larger units) (reward {label})")
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
        r_pioneer, r_observer: float (B,), the task rewards of the pioneer's and the observer's responses.
        coef: c, the partner-reward coefficient (`EnvConfig.partner_reward_coef`).

    Returns:
        ``{"pioneer": float64 (B,), "observer": float64 (B,)}`` (new arrays).

    Raises:
        ValueError: if the shapes differ or `coef` is not a finite number of magnitude at most 1e6.

    Example:
        >>> out = collective_reward(np.array([1.0]), np.array([0.5]), coef=-1.0)
        >>> out["pioneer"].tolist(), out["observer"].tolist()
        ([0.5], [-0.5])
    """
    r1 = np.asarray(r_pioneer, dtype=np.float64)
    r2 = np.asarray(r_observer, dtype=np.float64)
    if r1.shape != r2.shape:
        raise ValueError(f"r_pioneer {r1.shape} and r_observer {r2.shape} must have the same shape (B,)")
    check_number(coef, "coef", bounded=True)
    return Seating.cory(partner_reward_coef=coef).rewards([r1, r2])
