"""Task dataclass checks and the task registry."""

from __future__ import annotations

import numpy as np
import pytest

from cory_env import EnvConfig, Task, make_task
from cory_env.tasks.imdb import OBSERVER_TEMPLATE as IMDB_OBSERVER_TEMPLATE, IMDBOptions
from cory_env.tasks.imdb_rewards import VaderReward
from tests.conftest import REPO_ROOT


def test_imdb_task_from_config(tiny_tok, imdb_csv):
    task = make_task("imdb", EnvConfig(data_path=str(imdb_csv), max_new_tokens=20), tiny_tok, IMDBOptions(query_max_tokens=9))
    assert task.name == "imdb" and len(task.records) > 900
    assert task.observer_template == IMDB_OBSERVER_TEMPLATE and task.pioneer_template == "{query}"
    assert (task.query_tokens, task.min_new_tokens, task.max_new_tokens) == ((2, 9), 4, 20)
    assert isinstance(task.reward_fn, VaderReward)
    custom = make_task("imdb", EnvConfig(observer_template="Q {query} A {response} Q {query}"), tiny_tok)
    assert custom.observer_template == "Q {query} A {response} Q {query}"


def test_registry_builds_by_name_and_imports_builders_lazily():
    import subprocess
    import sys

    code = ("import sys, cory_env; from cory_env.tasks import TASKS; "
            "print(sorted(TASKS.names()), 'cory_env.tasks.gsm8k' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT).stdout
    # a task's module loads when it is asked for
    assert out.strip() == "['chain_relay', 'first_symbol', 'gsm8k', 'imdb', 'relay', 'tiny_vocab'] False"
    task = make_task("tiny_vocab", EnvConfig(task="tiny_vocab"), None)
    assert task.name == "tiny_vocab" and task.max_new_tokens == 2
    with pytest.raises(ValueError, match=r"unknown task 'chess'; known tasks: imdb, gsm8k, tiny_vocab, relay, chain_relay"):
        make_task("chess", EnvConfig(), None)


def test_task_checks():
    def fn(q, r):
        return [0.0] * len(q)

    base = {"name": "t", "records": [{"query": "q"}], "reward_fn": fn, "observer_template": "{query}{response}"}
    assert Task(**base).reward_fn(["a"], ["b"], [{}]) == [0.0]  # 2-argument callable normalised
    with pytest.raises(ValueError, match="has no records"):
        Task(**{**base, "records": []})
    with pytest.raises(ValueError, match="not a dict with a non-empty 'query' text"):
        Task(**{**base, "records": ["q"]})
    with pytest.raises(ValueError, match=r"lacks the placeholder\(s\) \{response\}"):
        Task(**{**base, "observer_template": "{query}"})
    with pytest.raises(ValueError, match=r"query_tokens=\(3, 2\) is invalid: use \(min, max\) with 1 <= min <= max"):
        Task(**{**base, "query_tokens": (3, 2)})
    with pytest.raises(ValueError, match="max_new_tokens=0 is invalid: use an integer >= 1"):
        Task(**{**base, "min_new_tokens": 0, "max_new_tokens": 0})
    with pytest.raises(ValueError, match="action_mask must be"):
        Task(**{**base, "action_mask": np.zeros(5, dtype=np.int8)})
    with pytest.raises(TypeError, match="a name or a callable"):
        Task(**{**base, "reward_fn": 1})


def test_a_task_with_its_own_vocabulary_brings_its_tokenizer():
    from cory_env.tasks import task_tokenizer
    from cory_env.tasks.tiny_vocab import VOCAB

    assert dict(task_tokenizer("tiny_vocab").get_vocab()) == VOCAB
    assert task_tokenizer("imdb") is None and task_tokenizer("gsm8k") is None
