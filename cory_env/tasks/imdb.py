"""The IMDB task (paper §2): continue the first 2-7 tokens of a movie review, rewarded for positive sentiment."""

from __future__ import annotations

from cory_env.data import heldout_split, load_imdb_records
from cory_env.prompts import IMDB_OBSERVER_TEMPLATE, PIONEER_TEMPLATE
from cory_env.tasks.base import Task

__all__ = ["make_imdb_task"]


def make_imdb_task(config, tokenizer=None) -> Task:
    """The IMDB sentiment-continuation task.

    Args:
        config: `EnvConfig`; reads ``data_path``, ``min_review_chars``, ``heldout_fraction``, ``query_split``
            (`cory_env.data.heldout_split`), ``reward``, ``query_min_tokens``,
            ``query_max_tokens``, ``min_new_tokens``, ``max_new_tokens`` and the two templates.
        tokenizer: unused (IMDB allows every token).

    Returns:
        ``Task(name="imdb", ...)`` with the official code's knowledge-transfer template by default.

    Raises:
        FileNotFoundError, ValueError: from `cory_env.data.load_imdb_records` and `cory_env.rewards.make_reward_fn`.
    """
    return Task(
        name="imdb",
        records=heldout_split(load_imdb_records(config.data_path, min_review_chars=config.min_review_chars),
                              config.query_split, config.heldout_fraction),
        reward_fn=config.reward,  # resolved by Task (make_reward_fn)
        observer_template=(IMDB_OBSERVER_TEMPLATE if config.observer_template is None else config.observer_template),
        pioneer_template=PIONEER_TEMPLATE if config.pioneer_template is None else config.pioneer_template,
        query_tokens=(config.query_min_tokens, config.query_max_tokens),
        min_new_tokens=config.min_new_tokens,
        max_new_tokens=config.max_new_tokens,
    )
