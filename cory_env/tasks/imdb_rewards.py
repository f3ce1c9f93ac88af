"""The IMDB task's rewards (docs/paper.md §2: positive sentiment of query + response), registered as ``--reward`` names.

| name | score | offline |
|---|---|---|
| ``"vader"`` | VADER compound score of ``query + response``, in [-1, 1] | yes (`vaderSentiment`) |
| ``"vader-gain"`` | VADER(query + response) − VADER(query), in [-2, 2]: what the response adds | yes |
| ``"distilbert-imdb"`` | raw POSITIVE logit of ``lvwerra/distilbert-imdb`` (paper) | needs the model |

``vader-gain`` subtracts a number that depends on the query alone, so it ranks a query's responses exactly as
``vader`` does and leaves the optimal policy unchanged; it removes the query's own sentiment (most of the variance
of ``vader`` over IMDB openings) from what a learner's value head must learn before its advantages mean anything.
"""

from __future__ import annotations

import logging
from typing import Any

from cory_env.rewards import RewardSpec

__all__ = ["DISTILBERT_IMDB", "VADER", "VADER_GAIN", "DistilbertImdbReward", "VaderGainReward", "VaderReward"]

logger = logging.getLogger(__name__)


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

    def __init__(self, model: str = "lvwerra/distilbert-imdb", *, batch_size: int = 16, device: Any = None) -> None:
        self.model, self.batch_size, self.device = model, batch_size, device
        self._pipe = None

    def __call__(self, queries: list[str], responses: list[str], records: list[dict] | None = None) -> list[float]:
        if self._pipe is None:
            from transformers import pipeline
            logger.info("loading sentiment reward model %s", self.model)
            self._pipe = pipeline("sentiment-analysis", model=self.model, device=self.device)
        texts = [q + r for q, r in zip(queries, responses)]
        outputs = self._pipe(texts, top_k=None, function_to_apply="none", batch_size=self.batch_size)
        return [float(next(d["score"] for d in out if d["label"].upper() == "POSITIVE")) for out in outputs]


VADER = RewardSpec(VaderReward, summary="VADER compound of query + response, in [-1, 1] (offline)")
VADER_GAIN = RewardSpec(VaderGainReward, summary="VADER(q + a) - VADER(q), in [-2, 2] (offline)")
DISTILBERT_IMDB = RewardSpec(DistilbertImdbReward, offline=False,
                             summary="raw POSITIVE logit of lvwerra/distilbert-imdb (the paper's; needs the model)")
