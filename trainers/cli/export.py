"""`cory export CHECKPOINT --out DIR`: one trained model of a checkpoint as a folder that plain ``transformers`` loads.

The model is rebuilt from the run's recorded configs with its trained weights (`trainers.cli.eval.
load_checkpoint_agent`, as ``cory eval``) and written by `agents.LLMAgent.save_pretrained`: the whole LM at the top of
DIR, with its tokenizer, the value head and ``cory_agent.json`` beside it. A LoRA run's model is its adapter merged
into a copy of the base (peft's ``merge_and_unload``; tied embeddings untied first when the adapter wraps one), so
for full fine-tuning and LoRA alike::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(DIR)
    tokenizer = AutoTokenizer.from_pretrained(DIR)

and `agents.LLMAgent.from_pretrained(DIR)` loads the model with its value head. ``--merge_lora false`` writes a LoRA
model's adapter alone (a few MB) in ``DIR/<llm1|llm2>``, which loads onto the run's base with peft::

    from peft import PeftModel
    from agents import load_model_and_tokenizer
    base, _ = load_model_and_tokenizer("smollm2-135m-instruct")  # the run's --model (a hub id, folder or alias)
    model = PeftModel.from_pretrained(base, f"{DIR}/llm1")
    tokenizer = AutoTokenizer.from_pretrained(DIR)

(or ``LLMAgent.from_pretrained(DIR, model=base)``). Before it reports success the export is loaded back that way
and its logits compared with the trained model's (`check_export`); a mismatch is an error and leaves nothing
written. Checkpoints of sharded runs (``--sharding fsdp``) hold whole tensors, so they export the same way.

`--out` must be a new or empty folder outside the run's ``checkpoints/``: checkpoint rotation deletes old checkpoint
folders (and a resume rewrites them), so an export there would disappear.

Examples:
    cory export runs/imdb-quick --out exported/pioneer
    cory export runs/imdb-quick/checkpoints/iter-000023 --model_name llm2 --out exported/llm2
    cory export runs/imdb-quick --merge_lora false --out exported/pioneer-adapter
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from pathlib import Path
from typing import Sequence

import torch

from trainers.loop.checkpoint import check_outside_rotation


def _bool(text: str) -> bool:
    from transformers.hf_argparser import string_to_bool

    return string_to_bool(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cory export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="A checkpoint folder, or a run directory (its latest checkpoint).")
    parser.add_argument("--out", required=True,
                        help="Folder to write (created; must be empty or absent, and outside the run's checkpoints/).")
    parser.add_argument("--model_name", default=None,
                        help="Which model: llm1 or llm2 (default: the one in the pioneer seat at the checkpoint).")
    parser.add_argument("--merge_lora", type=_bool, default=True,
                        help="LoRA runs: true (default) merges the model's adapter into a copy of the base and writes "
                             "a whole model (AutoModelForCausalLM.from_pretrained(DIR) loads it); false writes the "
                             "adapter alone in DIR/<model_name> (peft's PeftModel.from_pretrained(base, that) loads "
                             "it onto the run's base model). Full fine-tuning runs always write the whole model.")
    return parser


def check_out(out: Path, checkpoint: str | Path) -> None:
    """Refuse an export folder that exists and is not empty, that lies inside the run's ``checkpoints/``, or that
    is a path a run owns (`trainers.cli.outputs.run_owner`: its ``tensorboard/``, a ``samples.jsonl`` not yet
    written, ...).

    Raises:
        FileExistsError: `out` is a file, or a folder that is not empty (nothing is overwritten).
        NotADirectoryError: a parent of `out` is a file.
        ValueError: `out` is inside the run's checkpoints folder, whose old checkpoint folders rotation deletes, or
            another path a run owns.
    """
    from trainers.cli.outputs import run_owner

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
    huggingface/peft#2018, #2777).

    Args:
        model: a ``PeftModel`` (edited in place: pass a copy).

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
    head and its sampling config. `agent` and the ``PeftModel`` it shares are unchanged.

    Args:
        agent: an `agents.LLMAgent` with an ``adapter_name`` inside a ``PeftModel``.

    Returns:
        A new `agents.LLMAgent` over a plain ``transformers`` LM (``adapter_name`` None) whose logits equal the
        agent's (up to float rounding of the merged weights; `check_export` measures it).
    """
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
#: rounding of the merged weights to their dtype. SmolLM2-135M, random adapters, largest absolute logit ~ 34: float32
#: difference 1.4e-4 (4e-6 of it); bfloat16 0.3 (0.009 of it; float16 rounds 8x finer). A merge into tied embeddings
#: moves logits by about as much as training did (37).
CHECK_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _float32(model):
    """`model` if all its weights are float32, else a float32 copy (the weights exactly, the compute in float32)."""
    if all(p.dtype == torch.float32 for p in model.parameters()):
        return model
    return copy.deepcopy(model).float()


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
        trained: the checkpoint's agent (`trainers.cli.eval.load_checkpoint_agent`): the logits to reproduce.
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


def run_export(argv: Sequence[str]) -> int:
    """``cory export ...``; returns the exit status.

    Raises:
        FileExistsError: `--out` exists and is not empty (nothing is overwritten).
        ValueError: `--out` lies inside the run's ``checkpoints/``; from loading the checkpoint; the export,
            reloaded, does not reproduce the trained model's logits (`check_export`; what was written is removed).
    """
    args = build_parser().parse_args(list(argv))
    out = Path(args.out)
    check_out(out, args.checkpoint)
    from trainers.cli.eval import load_checkpoint_agent

    loaded = load_checkpoint_agent(args.checkpoint, args.model_name)
    agent, lora = loaded.agent, loaded.agent.adapter_name is not None
    agent.eval()
    written = merged_agent(agent) if lora and args.merge_lora else agent
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)
    try:
        written.save_pretrained(out)
        diff = check_export(out, agent, written)
    except BaseException:  # a mismatch, a full disk, Ctrl-C: no half-written or wrong export is left
        _remove_written(out, created)
        raise
    kind = "lora adapter" if written.adapter_name is not None else "merged model" if lora else "model"
    print(json.dumps({"checkpoint": str(loaded.checkpoint), "model_name": loaded.model_name, "out": str(out),
                      "written": kind, "max_logit_diff": diff}))
    return 0
