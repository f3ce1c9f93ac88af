"""The IMDB task (docs/paper.md §2): continue the first 2-7 tokens of a movie review, rewarded for positive sentiment.

| piece | where |
|---|---|
| data | `cory_env.tasks.imdb_data`: built-in review openings, a local CSV/JSONL/Parquet, or the hub (`stanfordnlp/imdb`) |
| options | `IMDBOptions`: ``min_review_chars``, ``query_min_tokens``, ``query_max_tokens`` (``cory train --task imdb``) |
| reward | `EnvConfig.reward`: a name of `cory_env.tasks.imdb_rewards` (``vader`` offline, ``vader-gain``, the paper's ``distilbert-imdb``) or any ``--reward`` |
| prompts | pioneer: the query; observer: `OBSERVER_TEMPLATE` (the official code's knowledge-transfer template) |
| eval | the pioneer alone on the held-out slice (`EnvConfig.heldout_fraction`): reward, KL, distinct-n |
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from cory_env.checks import check_number
from cory_env.data import heldout_split
from cory_env.prompts import PIONEER_TEMPLATE
from cory_env.tasks.base import Task, TaskSpec
from cory_env.tasks.imdb_data import load_imdb_records, resolve_imdb_source

__all__ = ["OBSERVER_TEMPLATE", "SPEC", "IMDBOptions", "make_imdb_task", "resolve_data_source"]

logger = logging.getLogger(__name__)

#: The official code's IMDB knowledge-transfer template (docs/paper.md §1 step 3): it ends with q, so the observer
#: writes its own continuation of q after reading the pioneer's.
OBSERVER_TEMPLATE = 'I can make this sentence "{query}{response}" more positive: {query}'


@dataclass(frozen=True)
class IMDBOptions:
    """The IMDB task's own options (``cory train --task imdb``; `RunConfigs.task_options`).

    Raises:
        ValueError: from `__post_init__`, naming the field, its value and the fix.
    """

    _argument_group_name = "IMDB task options (--task imdb)"  # `cory train --help` group

    min_review_chars: int = field(default=200, metadata={
        "help": "IMDB: drop reviews shorter than this many characters after removing `<br />` "
                "(official baseline script: 200; the paper's text: 100; 0 keeps every non-empty review). "
                "Not applied to the built-in openings."})
    query_min_tokens: int = field(default=2, metadata={
        "help": "IMDB: fewest tokens kept from the start of a review as the query q (paper: 2). The "
                "query length is drawn per episode from [query_min_tokens, query_max_tokens]."})
    query_max_tokens: int = field(default=7, metadata={
        "help": "IMDB: most tokens kept from the start of a review as the query q (paper: 7)."})

    def __post_init__(self) -> None:
        check_number(self.min_review_chars, "min_review_chars", integer=True, low=0, fix="0 keeps every review")
        check_number(self.query_min_tokens, "query_min_tokens", integer=True, low=1,
                     fix="a query needs at least one token")
        check_number(self.query_max_tokens, "query_max_tokens", integer=True, low=self.query_min_tokens,
                     fix=f"at least query_min_tokens={self.query_min_tokens}")


def make_imdb_task(config, tokenizer=None, options: IMDBOptions | None = None) -> Task:
    """The IMDB sentiment-continuation task: ``Task(name="imdb", ...)`` with the official code's knowledge-transfer
    template by default.

    Args:
        config: `EnvConfig`; reads ``data_path``, ``heldout_fraction``, ``query_split`` (`cory_env.data.heldout_split`),
            ``reward``, ``min_new_tokens``, ``max_new_tokens`` and the two templates.
        tokenizer: unused (IMDB allows every token).
        options: `IMDBOptions` (None: the defaults).

    Raises:
        FileNotFoundError, ValueError: from `cory_env.tasks.imdb_data.load_imdb_records` and
            `cory_env.rewards.make_reward_fn`.
    """
    options = IMDBOptions() if options is None else options
    loaded = load_imdb_records(config.data_path, min_review_chars=options.min_review_chars)
    records = heldout_split(loaded, config.query_split, config.heldout_fraction)
    source = "built-in review openings" if config.data_path is None else f"reviews of {config.data_path}"
    side = f" (the {config.query_split} side of the held-out slice)" if config.heldout_fraction else ""
    logger.info("IMDB queries: %d of %d %s%s", len(records), len(loaded), source, side)
    return Task(name="imdb", records=records, reward_fn=config.reward,  # resolved by Task (make_reward_fn)
                observer_template=OBSERVER_TEMPLATE, pioneer_template=PIONEER_TEMPLATE,
                query_tokens=(options.query_min_tokens, options.query_max_tokens),
                min_new_tokens=config.min_new_tokens, max_new_tokens=config.max_new_tokens)


def resolve_data_source(config):
    """`config` with ``data_path="hub"`` resolved by one hub probe (`cory_env.tasks.imdb_data.resolve_imdb_source`:
    the hub, or None = the built-in openings when it is unreachable), so that every env a run builds reads the same
    source and the probe and its log line happen once (`TaskSpec.resolve`)."""
    source = resolve_imdb_source(config.data_path)
    return config if source == config.data_path else replace(config, data_path=source)


SPEC = TaskSpec(make_imdb_task, options=IMDBOptions, evaluation="pioneer", resolve=resolve_data_source,
                reads=("data_path", "reward", "heldout_fraction", "query_split", "min_new_tokens", "max_new_tokens"),
                summary="IMDB sentiment continuation (paper §2): review openings, positive-sentiment reward")
