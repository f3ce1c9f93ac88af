"""`cory export`: a LoRA run and a full fine-tuning run export to a folder that plain ``transformers`` loads with the
checkpoint model's logits; ``--merge_lora false`` writes the adapter alone, which loads onto its base with peft; an
``--out`` inside the run's rotating ``checkpoints/`` is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agents import LLMAgent
from agents.reference import activate_adapter
from trainers.cli import main as cory_main
from trainers.loop.evaluate import load_target
from trainers.loop.loading import load_run_model
from trainers.loop.checkpoint import latest_checkpoint
from trainers.loop.cory import CORYTrainer

TEXTS = ["A quiet film that", "The plot twists and"]


def _train(tiny_run, name: str, **overrides) -> str:
    configs = tiny_run(name, num_iterations=1, **overrides)
    CORYTrainer(configs).train()
    return configs.run.output_dir


def _logits(model, tokenizer) -> torch.Tensor:
    """(B, T, V) logits on TEXTS, padded on the left (the padding side is not part of a saved tokenizer)."""
    tokenizer.padding_side = "left"
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def _checkpoint_logits(run: str) -> tuple[torch.Tensor, object]:
    """Logits of the checkpoint's pioneer model as `cory eval` rebuilds it (its own adapter active, eval mode)."""
    agent = load_target(run).agent
    agent.eval()
    if agent.adapter_name is not None:
        activate_adapter(agent.model, agent.adapter_name)
    return _logits(agent.model, agent.tokenizer), agent


def _export(capsys, *argv: str) -> dict:
    assert cory_main(["export", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("use_lora", [True, False], ids=["lora", "full"])
def test_export_loads_with_plain_transformers_and_keeps_the_logits(tiny_run, tmp_path, capsys, use_lora):
    run = _train(tiny_run, "lora" if use_lora else "full", use_lora=use_lora, lora_r=4)
    out = tmp_path / "exported"
    result = _export(capsys, run, "--out", str(out))
    model = AutoModelForCausalLM.from_pretrained(out)  # docs/training.md's two lines (Export)
    tokenizer = AutoTokenizer.from_pretrained(out)
    expected, agent = _checkpoint_logits(run)
    assert tokenizer(TEXTS)["input_ids"] == agent.tokenizer(TEXTS)["input_ids"]
    torch.testing.assert_close(_logits(model, tokenizer), expected, rtol=1e-4, atol=1e-5)
    if use_lora:  # the adapter trained, so the export must carry it: the base alone gives other logits
        with agent.model.disable_adapter():
            assert not torch.allclose(_logits(agent.model, agent.tokenizer), expected, atol=1e-4)
        from trainers.export import merged_agent

        base = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
        merged = merged_agent(agent)  # on a copy: the shared base and both adapters stay as they were
        assert set(agent.model.peft_config) == {"llm1", "llm2"} and merged.adapter_name is None
        assert all(torch.equal(p, base[n]) for n, p in agent.model.named_parameters())
        activate_adapter(agent.model, agent.adapter_name)
        assert torch.equal(_logits(agent.model, agent.tokenizer), expected)
    loaded = LLMAgent.from_pretrained(out)  # with its value head
    assert loaded.adapter_name is None
    torch.testing.assert_close(loaded.value_head.state_dict(), agent.value_head.state_dict())
    assert result["written"] == ("merged model" if use_lora else "model")


def test_adapter_only_export_loads_onto_its_base_with_peft(tiny_run, tmp_path, capsys):
    from peft import PeftModel

    run = _train(tiny_run, "adapter", use_lora=True, lora_r=4)
    out = tmp_path / "adapter-export"
    result = _export(capsys, run, "--merge_lora", "false", "--out", str(out))
    name = result["model_name"]  # the pioneer's model: llm2 after the run's role exchange
    assert result["written"] == "lora adapter" and name == "llm2"
    assert (out / name / "adapter_config.json").is_file() and not (out / "config.json").exists()
    expected, _ = _checkpoint_logits(run)
    configs = tiny_run("adapter", num_iterations=1, use_lora=True, lora_r=4)
    base, _ = load_run_model(configs)  # the run's --model (here the in-memory tiny model)
    model = PeftModel.from_pretrained(base, str(out / name))  # the docs' peft lines
    model.eval()
    torch.testing.assert_close(_logits(model, AutoTokenizer.from_pretrained(out)), expected, rtol=1e-4, atol=1e-5)
    # the tiny base was built in memory: its name is not recorded, so LLMAgent needs the base, and says how
    with pytest.raises(ValueError, match=r"records no base model.*LLMAgent.from_pretrained\(DIR, model=base\)"):
        LLMAgent.from_pretrained(out)
    agent = LLMAgent.from_pretrained(out, model=load_run_model(configs)[0])
    agent.eval()
    torch.testing.assert_close(_logits(agent.model, agent.tokenizer), expected, rtol=1e-4, atol=1e-5)


def test_export_refuses_an_out_inside_the_runs_checkpoints(tiny_run, tmp_path, capsys):
    """Checkpoint rotation deletes old ``checkpoints/iter-*`` folders (and a resume rewrites them): an export there
    would vanish. Refused in one line, exit 2, before any model loads; a folder outside is fine."""
    run = Path(_train(tiny_run, "rotating"))
    checkpoint = latest_checkpoint(run)
    link = tmp_path / "link"
    link.symlink_to(run / "checkpoints")
    for source in (run, checkpoint):
        for out in (checkpoint / "exported", run / "checkpoints" / "exported", link / checkpoint.name / "x"):
            assert cory_main(["export", str(source), "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.startswith("cory export: error: --out ") and err.count("\n") == 1
            assert f"is inside the run's checkpoints folder {(run / 'checkpoints').resolve()}" in err
            assert "choose a path outside it" in err and not out.exists()
    assert _export(capsys, str(checkpoint), "--out", str(run / "exported"))["written"] == "model"
    with pytest.raises(SystemExit) as exit_info:  # argparse: one usage line and the error
        cory_main(["export", str(run), "--merge_lora", "maybe", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "--merge_lora: Truthy value expected: got maybe" in capsys.readouterr().err


def test_export_writes_a_model_card_and_the_runs_training_config(tiny_run, tmp_path, capsys):
    """TRL writes a model card and the training arguments beside a saved model; before, `cory export` wrote neither:
    the folder did not say which run, model or settings it came from. The config reloads as the run's own."""
    import yaml

    from trainers.config.parser import parse_train_args

    run = Path(_train(tiny_run, "card", seed=3))
    out = tmp_path / "exported"
    result = _export(capsys, str(run), "--out", str(out))
    written = out / "cory_training.yaml"
    assert yaml.safe_load(written.read_text()) == yaml.safe_load((run / "config.yaml").read_text())
    again = parse_train_args(["--config", str(written)])  # `cory train --config cory_training.yaml`
    assert again.to_flat() == tiny_run("card", num_iterations=1, seed=3).to_flat()
    card = (out / "README.md").read_text()
    assert card.startswith(f"# {result['model_name']} of a cory run\n")
    for said in (f"from `{result['checkpoint']}`", f"model `{result['model_name']}`", "task `imdb`",
                 "1 iteration", "seed 3", "base model `tiny`", "`cory_training.yaml`"):
        assert said in card, said
