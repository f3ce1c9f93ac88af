"""Export one trained model of a checkpoint as a folder that plain ``transformers`` loads (``cory export``): the
whole LM at the top of the folder with its tokenizer, the value head and ``cory_agent.json`` beside it
(`agents.LLMAgent.save_pretrained`); a LoRA model merged into a copy of its base (`merged_agent`), or its adapter
alone; a model card (``README.md``) and the run's training config (``cory_training.yaml``) beside it, as TRL writes
them. The export is loaded back and its logits compared with the trained model's before it counts as done
(`check_export`); a mismatch, a full disk or a stop removes what was written.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
import yaml

from trainers.loop.outputs import run_owner
from trainers.loop.checkpoint import check_outside_rotation
from cory_env.write_errors import write_errors

__all__ = ["CHECK_SHAPE", "CHECK_TOLERANCE", "check_export", "check_out", "export_model", "merged_agent",
           "untie_adapted_embeddings"]


def check_out(out: Path, checkpoint: str | Path) -> None:
    """Refuse an export folder that exists and is not empty, that lies inside the run's ``checkpoints/``, or that is a
    path a run owns (`trainers.loop.outputs.run_owner`: its ``tensorboard/``, a ``samples.jsonl`` not yet written, ...).

    Raises:
        FileExistsError: `out` is a file, or a folder that is not empty (nothing is overwritten).
        NotADirectoryError: a parent of `out` is a file.
        ValueError: `out` is inside the run's checkpoints folder, whose old checkpoint folders rotation deletes, or
            another path a run owns.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file; give a new or empty folder (nothing was overwritten)")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"--out {out} exists and is not empty; choose a new folder (nothing was overwritten)")
    under = next((p for p in out.parents if p.exists()), None)
    if under is not None and not under.is_dir():
        raise NotADirectoryError(f"--out {out}: {under} is a file, not a folder; choose another path")
    check_outside_rotation(out, checkpoint, option="--out", example="-export")
    if (owner := run_owner(out)) is not None:
        raise ValueError(f"--out {out} is {owner}: a run's own files are never replaced; choose a new folder")


def untie_adapted_embeddings(model) -> bool:
    """Give a tied output embedding its own copy of the shared weight when the LoRA wraps either embedding, and
    record ``tie_word_embeddings=False``, so that merging changes only the layer the adapter trained.

    With tied embeddings (SmolLM2, Gemma, GPT-2) ``lm_head`` and ``embed_tokens`` hold one tensor; a LoRA on either
    adapts that layer alone during training, but merging writes the update into the shared tensor (both layers
    move) and a saved config that still says "tied" makes the loader tie them again. peft warns so and documents
    the fix, merging "after cloning the weights (to untie the embeddings)" (``BaseTuner._check_merge_allowed``;
    huggingface/peft#2018, #2777). `model`: a ``PeftModel``, edited in place (pass a copy).

    Returns:
        True when it untied, False when the embeddings are not tied or no adapter wraps them.
    """
    base = model.get_base_model()
    layers = [base.get_input_embeddings(), base.get_output_embeddings()]
    if any(layer is None for layer in layers) or not any(hasattr(layer, "base_layer") for layer in layers):
        return False
    inner, outer = (layer.get_base_layer() if hasattr(layer, "base_layer") else layer for layer in layers)
    if outer.weight is not inner.weight and outer.weight.data_ptr() != inner.weight.data_ptr():
        return False
    outer.weight = torch.nn.Parameter(outer.weight.detach().clone(), requires_grad=outer.weight.requires_grad)
    base.config.tie_word_embeddings = False
    return True


def merged_agent(agent):
    """A plain-LM copy of a LoRA agent: its adapter merged into a copy of the base (peft's ``merge_and_unload``;
    tied embeddings untied first when the adapter wraps one: `untie_adapted_embeddings`), with a copy of its value
    head and its sampling config. `agent` (an `agents.LLMAgent` with an ``adapter_name``) and the ``PeftModel`` it
    shares are unchanged; the copy's logits equal the agent's up to float rounding of the merged weights
    (`check_export` measures it)."""
    from agents import LLMAgent
    from agents.reference import preserved_requires_grad
    model = copy.deepcopy(agent.model)  # the base and every adapter: merging edits the base's weights in place
    with preserved_requires_grad(model):
        model.set_adapter(agent.adapter_name)
    untie_adapted_embeddings(model)
    lm = model.merge_and_unload(adapter_names=[agent.adapter_name])
    lm.eval()
    return LLMAgent(lm, agent.tokenizer, value_head=copy.deepcopy(agent.value_head), sampling=agent.sampling,
                    precision=agent.precision)


#: `check_export`: this many random token sequences (seeded), of this many tokens each.
CHECK_SHAPE = (4, 32)
#: `check_export`: the largest absolute logit difference allowed, as a fraction of 1 + the trained model's largest
#: absolute logit, by the dtype of the written weights. Both models are evaluated in float32, so what remains is the
#: rounding of the merged weights to their dtype (SmolLM2-135M: 4e-6 of it in float32, 0.009 in bfloat16).
CHECK_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _float32(model):
    """`model` if all its weights are float32, else a float32 copy (the weights exactly, the compute in float32)."""
    return model if all(p.dtype == torch.float32 for p in model.parameters()) else copy.deepcopy(model).float()


def _reload(out: Path, written):
    """What `run_export` wrote in `out` as float32, loaded the documented way: ``AutoModelForCausalLM.
    from_pretrained(out)``, or the adapter alone onto a copy of the base with ``PeftModel.from_pretrained``."""
    if written.adapter_name is None:
        from transformers import AutoModelForCausalLM
        return AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    from peft import PeftModel
    base = copy.deepcopy(written.model).unload().float()  # the frozen base, without any adapter
    return PeftModel.from_pretrained(base, str(out / written.adapter_name), adapter_name=written.adapter_name)


def check_export(out: Path, trained, written) -> float:
    """Load the export in `out` back and compare its logits with the trained model's, both in float32, on
    `CHECK_SHAPE` random token sequences (seeded; the global RNG is untouched).

    Args:
        out: the folder `run_export` wrote.
        trained: the checkpoint's agent (`trainers.loop.evaluate.load_target`): the logits to reproduce.
        written: the agent that was saved (`trained` itself, or its `merged_agent`).

    Returns:
        The largest absolute logit difference.

    Raises:
        ValueError: the largest absolute logit difference exceeds `CHECK_TOLERANCE` (of the written weights' dtype)
            times 1 + the largest absolute trained logit.
    """
    from agents.reference import activate_adapter
    if trained.adapter_name is not None:
        activate_adapter(trained.model, trained.adapter_name)
    dtype = next(written.model.parameters()).dtype
    device = next(trained.model.parameters()).device
    vocab = trained.model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, CHECK_SHAPE, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        expected = _float32(trained.model).eval()(input_ids=ids).logits
        got = _reload(out, written).to(device).eval()(input_ids=ids).logits
    diff = float((got - expected).abs().max())
    allowed = CHECK_TOLERANCE.get(dtype, 3e-2) * (1.0 + float(expected.abs().max()))
    if not diff <= allowed:
        raise ValueError(f"the exported model does not reproduce the trained one: its logits differ by up to "
                         f"{diff:.3g} (allowed {allowed:.3g} for {str(dtype).removeprefix('torch.')} weights) on "
                         f"{CHECK_SHAPE[0]} random sequences of {CHECK_SHAPE[1]} tokens; nothing was written"
                         + ("; --merge_lora false writes the adapter alone, which loads onto the run's base with "
                            "peft" if written is not trained else ""))
    return diff


def _remove_written(out: Path, created: Path | None) -> None:
    """Undo an export: remove `created` (the first folder of `out`'s path that did not exist), else empty `out`."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
        return
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def model_card(target, kind: str) -> str:
    """The exported model's card (``README.md``): what it is, the run it comes from, how it was trained and how to
    load it."""
    c = target.configs
    return (f"# {target.model_name} of a cory run\n\n"
            f"A {kind} exported by `cory export` from `{target.checkpoint}`: model `{target.model_name}` of a "
            f"`{c.run.learner}` run on task `{c.env.task}` (seating `{c.env.seating or 'the task default'}`, "
            f"{c.run.num_iterations} iteration{'s' * (c.run.num_iterations != 1)}, seed {c.run.seed}), base model "
            f"`{c.model.model}`.\n\n"
            "Its training config is `cory_training.yaml` beside this card (`cory train --config cory_training.yaml "
            "--output_dir NEW_FOLDER` trains the run again).\n\n"
            "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
            "model = AutoModelForCausalLM.from_pretrained(FOLDER)\ntokenizer = AutoTokenizer.from_pretrained(FOLDER)\n"
            "```\n\nA LoRA adapter alone (`--merge_lora false`) loads onto the run's base with peft's "
            "`PeftModel.from_pretrained(base, FOLDER/<model_name>)`.\n")


def export_model(target, out: Path, *, merge_lora: bool = True) -> dict:
    """Write `target`'s model (`trainers.loop.evaluate.EvalTarget`) into `out` (checked by `check_out`),
    load it back and compare (`check_export`), with its model card and training config beside it; returns what the
    command prints (checkpoint, model_name, out, written, max_logit_diff).

    Raises:
        ValueError: the export does not reproduce the trained model's logits (what was written is removed).
        OSError: a write failed (what was written is removed).
    """
    agent, lora = target.agent, target.agent.adapter_name is not None
    agent.eval()
    written = merged_agent(agent) if lora and merge_lora else agent
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)
    kind = "lora adapter" if written.adapter_name is not None else "merged model" if lora else "model"
    try:
        with write_errors(out):  # a full disk, a file-size limit: OSError naming the folder, whichever library wrote
            written.save_pretrained(out)
            diff = check_export(out, agent, written)
            (out / "cory_training.yaml").write_text(yaml.safe_dump(target.configs.to_flat(), sort_keys=False),
                                                    encoding="utf-8")
            (out / "README.md").write_text(model_card(target, kind), encoding="utf-8")
    except BaseException:  # a mismatch, a full disk, Ctrl-C: no half-written or wrong export is left
        _remove_written(out, created)
        raise
    return {"checkpoint": str(target.checkpoint), "model_name": target.model_name, "out": str(out), "written": kind,
            "max_logit_diff": diff}
