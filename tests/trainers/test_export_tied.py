"""`cory export` of a LoRA run whose model ties its input and output embeddings (SmolLM2, GPT-2): a LoRA on
``lm_head`` or ``embed_tokens`` adapts that layer alone, so the merge unties them first and the export keeps the
trained logits (the input embeddings stay the base's); an export that would not reproduce the trained model is an
error, exit 2, with nothing left on disk."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from agents.tiny import tiny_causal_lm, tiny_tokenizer
from trainers.cli import main as cory_main
from trainers.loop.evaluate import load_target
from trainers.loop.cory import CORYTrainer


@pytest.fixture()
def tied_model(tmp_path):
    """A folder with a tiny Llama whose ``lm_head`` and ``embed_tokens`` share one weight, and its tokenizer."""
    tokenizer = tiny_tokenizer()
    config = tiny_causal_lm(tokenizer).config
    config.tie_word_embeddings = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    folder = tmp_path / "tied-model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _train_tied(tiny_run, tied_model, target: str) -> str:
    # a large learning rate, so the adapter on the embedding moves the logits well past float rounding
    configs = tiny_run(f"tied-{target}", model=str(tied_model), num_iterations=1, use_lora=True, lora_r=4,
                       lora_target_modules=f"q_proj,v_proj,{target}", learning_rate=3e-2)
    CORYTrainer(configs).train()
    return configs.run.output_dir


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens"])
def test_lora_on_a_tied_embedding_exports_the_trained_model(tiny_run, tied_model, tmp_path, capsys, target):
    run = _train_tied(tiny_run, tied_model, target)
    out = tmp_path / "exported"
    assert cory_main(["export", run, "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["written"] == "merged model"
    exported = AutoModelForCausalLM.from_pretrained(out)
    agent = load_target(run).agent
    agent.eval()
    agent.model.set_adapter(agent.adapter_name)
    ids = torch.randint(0, exported.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    trained = _logits(agent.model, ids)
    with agent.model.disable_adapter():
        base = _logits(agent.model, ids)
    assert (trained - base).abs().max() > 1e-2  # the adapter trained: a merge into both layers would show
    torch.testing.assert_close(_logits(exported, ids), trained, rtol=1e-4, atol=1e-5)
    base_model = AutoModelForCausalLM.from_pretrained(tied_model)
    untouched = exported.get_output_embeddings() if target == "embed_tokens" else exported.get_input_embeddings()
    torch.testing.assert_close(untouched.weight, base_model.get_input_embeddings().weight, rtol=0, atol=0)
    assert not exported.config.tie_word_embeddings
    assert result["max_logit_diff"] < 1e-4  # what the export's own check measured


def test_an_export_that_does_not_reproduce_the_trained_model_is_refused(tiny_run, tied_model, tmp_path, capsys,
                                                                        monkeypatch):
    """The merge without untying (peft's own, what an export did before) writes another model: the check refuses
    it in one line, exit 2, and removes what it wrote, the folders it created included."""
    import trainers.export as export

    run = _train_tied(tiny_run, tied_model, "lm_head")
    capsys.readouterr()
    monkeypatch.setattr(export, "untie_adapted_embeddings", lambda model: False, raising=False)
    for out in (tmp_path / "new" / "exported", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        assert cory_main(["export", run, "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("cory export: error: the exported model does not reproduce the trained one: "
                                       "its logits differ by up to ") and captured.err.count("\n") == 1
        assert "nothing was written; --merge_lora false writes the adapter alone" in captured.err
        assert not captured.out
        if out.name == "empty":
            assert out.is_dir() and not any(out.iterdir())  # the user's empty folder stays, empty
        else:
            assert not (tmp_path / "new").exists()
    # the adapter alone needs no merge: it is written, and checked the same way
    assert cory_main(["export", run, "--merge_lora", "false", "--out", str(tmp_path / "adapter")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["max_logit_diff"] < 1e-5
