"""Task rewards by name, the checked batched reward call, and the collective reward.

Task rewards score *text*: the query text plus a response text (decoded with ``skip_special_tokens=True``),
never the observer's template text (paper §1 step 4). Every reward function is normalised to the signature
``reward_fn(query_texts, response_texts, records) -> sequence of floats`` (one per pair); `make_reward_fn`
builds one from a name or from a 2- or 3-argument callable.

| name | score | offline |
|---|---|---|
| ``"vader"`` | VADER compound score of ``query + response``, in [-1, 1] | yes (`vaderSentiment`) |
| ``"vader-gain"`` | VADER(query + response) − VADER(query), in [-2, 2]: what the response adds | yes |
| ``"distilbert-imdb"`` | raw POSITIVE logit of ``lvwerra/distilbert-imdb`` (paper) | needs the model |

``vader-gain`` subtracts a number that depends on the query alone, so it ranks a query's responses exactly as
``vader`` does and leaves the optimal policy unchanged; it removes the query's own sentiment (which carries about
60 % of the variance of ``vader`` over IMDB openings: correlation 0.78) from what a learner's value head must learn
before its advantages mean anything.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cory_env.seating import Seating

__all__ = [
    "REWARD_NAMES",
    "DistilbertImdbReward",
    "RewardFn",
    "RewardFunctionError",
    "VaderGainReward",
    "VaderReward",
    "collective_reward",
    "make_reward_fn",
    "reward_name",
    "score_texts",
]

logger = logging.getLogger(__name__)

#: Normalised reward signature: (query_texts, response_texts, records) -> one float per pair.
RewardFn = Callable[[list[str], list[str], list[dict]], Sequence[float]]


class RewardFunctionError(ValueError):
    """A task reward function raised, or returned NaN/inf or the wrong number of values."""


class VaderReward:
    """VADER sentiment of ``query + response``: the compound score in [-1, 1] (offline default for IMDB).

    One `SentimentIntensityAnalyzer` per object (its lexicon is loaded once, in the constructor).
    """

    def __init__(self) -> None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self._analyzer = SentimentIntensityAnalyzer()

    def __call__(self, queries: list[str], responses: list[str], records: list[dict] | None = None) -> list[float]:
        return [float(self._analyzer.polarity_scores(q + r)["compound"]) for q, r in zip(queries, responses)]


class VaderGainReward(VaderReward):
    """VADER(query + response) − VADER(query), in [-2, 2] (see the module docstring)."""

    def __call__(self, queries: list[str], responses: list[str], records: list[dict] | None = None) -> list[float]:
        score = self._analyzer.polarity_scores
        return [float(score(q + r)["compound"] - score(q)["compound"]) for q, r in zip(queries, responses)]


class DistilbertImdbReward:
    """The paper's IMDB reward: the raw POSITIVE logit of a sentiment classifier on ``query + response``.

    The transformers pipeline is built lazily, on the first call (the model needs the hub or a local copy).

    Args:
        model: hub id or local path (paper: ``lvwerra/distilbert-imdb``).
        batch_size: pipeline batch size.
        device: pipeline device (None: CPU).
    """

    def __init__(self, model: str = "lvwerra/distilbert-imdb", *, batch_size: int = 16,
                 device: Any = None) -> None:
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self._pipe = None

    def __call__(self, queries: list[str], responses: list[str], records: list[dict] | None = None) -> list[float]:
        if self._pipe is None:
            from transformers import pipeline

            logger.info("loading sentiment reward model %s", self.model)
            self._pipe = pipeline("sentiment-analysis", model=self.model, device=self.device)
        texts = [q + r for q, r in zip(queries, responses)]
        outputs = self._pipe(texts, top_k=None, function_to_apply="none", batch_size=self.batch_size)
        return [float(next(d["score"] for d in out if d["label"].upper() == "POSITIVE")) for out in outputs]


_BUILDERS: dict[str, Callable[[], Callable]] = {"vader": VaderReward, "vader-gain": VaderGainReward,
                                                "distilbert-imdb": DistilbertImdbReward}
#: Reward names `make_reward_fn` knows.
REWARD_NAMES = tuple(_BUILDERS)


def make_reward_fn(spec: str | Callable) -> RewardFn:
    """A reward function in the normalised 3-argument form.

    Args:
        spec: a name in `REWARD_NAMES`; an importable ``"module:function"`` name (what `reward_name` records for
            a callable); or a callable ``(queries, responses) -> floats`` or ``(queries, responses, records) ->
            floats``.

    Returns:
        ``reward_fn(query_texts, response_texts, records) -> sequence of floats``.

    Raises:
        ValueError: for an unknown name, or a ``module:function`` name that does not import to a callable.
        TypeError: for something neither a str nor a callable taking 2 or 3 positional arguments.
    """
    if isinstance(spec, str):
        if spec in _BUILDERS:
            return _BUILDERS[spec]()
        if spec.startswith("<"):
            raise ValueError(f"reward {spec!r} records a callable that cannot be rebuilt by name; pass the callable "
                             "itself (reward_fn=...), a name in " f"{list(REWARD_NAMES)} or an importable "
                             "'module:function'")
        if ":" not in spec:
            raise ValueError(f"unknown reward {spec!r}; use one of {list(REWARD_NAMES)}, an importable "
                             "'module:function' name, or pass a callable (queries, responses) -> list[float]")
        spec = _import_callable(spec)
    if not callable(spec):
        raise TypeError(f"reward must be a name or a callable, got {type(spec).__name__}: {spec!r}")
    n_args = _positional_arity(spec)
    if n_args == 2:
        return lambda queries, responses, records: spec(queries, responses)
    if n_args == 3 or n_args is None:
        return spec
    raise TypeError(f"reward callable {spec!r} takes {n_args} positional arguments; it must take "
                    "(queries, responses) or (queries, responses, records)")


def _import_callable(name: str) -> Callable:
    """The callable a ``"module:qualified.name"`` string names (ValueError naming the problem otherwise)."""
    module_name, _, qualname = name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"reward {name!r} cannot be imported ({type(err).__name__}: {err}); give a name in "
                         f"{list(REWARD_NAMES)} or an importable 'module:function'") from err
    if not callable(obj):
        raise ValueError(f"reward {name!r} names a {type(obj).__name__}, not a callable")
    return obj


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
            if _import_callable(name) is fn:
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
        scores = np.asarray(list(raw), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {type(raw).__name__} "
                                  f"{raw!r:.200}, not a sequence of numbers ({exc}); return one float per "
                                  "(query, response) pair") from exc
    if scores.shape[0] != len(queries):
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores.shape[0]} values for "
                                  f"{len(queries)} texts (first text: {queries[0] + responses[0]!r}); it must "
                                  "return one float per (query, response) pair")
    bad = ~np.isfinite(scores)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RewardFunctionError(f"task {task_name!r}: the reward function returned {scores[i]} for the text "
                                  f"{queries[i] + responses[i]!r}; rewards must be finite")
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
