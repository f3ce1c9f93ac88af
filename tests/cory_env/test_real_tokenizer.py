"""The env with the real SmolLM2-135M-Instruct tokenizer (GGUF) on the real IMDB sample."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from cory_env import BatchedCORYEnv, env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.real_model,
    pytest.mark.filterwarnings("ignore:We recommend agents to be named:UserWarning"),
]


def test_api_and_seed_with_smollm2_on_imdb(smollm2_tokenizer, imdb_csv):
    kwargs = {"tokenizer": smollm2_tokenizer, "data_path": str(imdb_csv)}
    api_test(env(**kwargs), num_cycles=200)
    seed_test(lambda: env(**kwargs), num_cycles=200)


def test_knowledge_transfer_prompt_with_smollm2(smollm2_tokenizer, imdb_csv):
    tok = smollm2_tokenizer
    benv = BatchedCORYEnv(tokenizer=tok, batch_size=4, data_path=str(imdb_csv), min_new_tokens=3,
                          max_new_tokens=3)
    obs, info = benv.reset(seed=0)
    assert obs["input_ids"].shape[1] == 128 and obs["action_mask"].shape[1] == len(tok) == 49152
    response = tok.encode(" was great", add_special_tokens=False)[:3]
    response += [tok.eos_token_id] * (3 - len(response))
    for token in response:
        obs, *_ = benv.step(np.full(4, token, dtype=np.int64))
    assert benv.agent_selection == "observer"
    observer_prompt = tok.decode(obs["input_ids"][0][obs["attention_mask"][0] == 1])
    query = info["query_text"][0]
    pioneer_text = tok.decode(response, skip_special_tokens=True)
    assert observer_prompt == f'I can make this sentence "{query}{pioneer_text}" more positive: {query}'
