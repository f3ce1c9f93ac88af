"""`cory export CHECKPOINT --out DIR`: one trained model of a checkpoint as a folder that plain ``transformers`` loads.

The model is rebuilt from the run's recorded configs with its trained weights (`trainers.cli.eval.
load_checkpoint_agent`, as ``cory eval``) and written by `agents.LLMAgent.save_pretrained`: the whole LM at the top of
DIR, with its tokenizer, the value head and ``cory_agent.json`` beside it. A LoRA run's model is its adapter merged
into a copy of the base (peft's ``merge_and_unload``), so for full fine-tuning and LoRA alike::

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

(or ``LLMAgent.from_pretrained(DIR, model=base)``). Checkpoints of sharded runs (``--sharding fsdp``) hold whole
tensors, so they export the same way.

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
from pathlib import Path
from typing import Sequence

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
    """Refuse an export folder that exists and is not empty, or that lies inside the run's ``checkpoints/``.

    Raises:
        FileExistsError: `out` exists and is not empty (nothing is overwritten).
        ValueError: `out` is inside the run's checkpoints folder, whose old checkpoint folders rotation deletes.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out} exists and is not empty; choose a new folder (nothing was overwritten)")
    check_outside_rotation(out, checkpoint, option="--out", example="-export")


def merged_agent(agent):
    """A plain-LM copy of a LoRA agent: its adapter merged into a copy of the base (peft's ``merge_and_unload``),
    with a copy of its value head and its sampling config. `agent` and the ``PeftModel`` it shares are unchanged.

    Args:
        agent: an `agents.LLMAgent` with an ``adapter_name`` inside a ``PeftModel``.

    Returns:
        A new `agents.LLMAgent` over a plain ``transformers`` LM (``adapter_name`` None) whose logits equal the
        agent's (up to float rounding of the merged weights).
    """
    from agents import LLMAgent
    from agents.reference import preserved_requires_grad

    model = copy.deepcopy(agent.model)  # the base and every adapter: merging edits the base's weights in place
    with preserved_requires_grad(model):
        model.set_adapter(agent.adapter_name)
    lm = model.merge_and_unload(adapter_names=[agent.adapter_name])
    lm.eval()
    return LLMAgent(lm, agent.tokenizer, value_head=copy.deepcopy(agent.value_head), sampling=agent.sampling,
                    precision=agent.precision)


def run_export(argv: Sequence[str]) -> int:
    """``cory export ...``; returns the exit status.

    Raises:
        FileExistsError: `--out` exists and is not empty (nothing is overwritten).
        ValueError: `--out` lies inside the run's ``checkpoints/``; from loading the checkpoint.
    """
    args = build_parser().parse_args(list(argv))
    out = Path(args.out)
    check_out(out, args.checkpoint)
    from trainers.cli.eval import load_checkpoint_agent

    loaded = load_checkpoint_agent(args.checkpoint, args.model_name)
    agent, lora = loaded.agent, loaded.agent.adapter_name is not None
    if lora and args.merge_lora:
        agent = merged_agent(agent)
    agent.save_pretrained(out)
    written = "lora adapter" if agent.adapter_name is not None else "merged model" if lora else "model"
    print(json.dumps({"checkpoint": str(loaded.checkpoint), "model_name": loaded.model_name, "out": str(out),
                      "written": written}))
    return 0
