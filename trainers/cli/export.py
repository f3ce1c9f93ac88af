"""`cory export CHECKPOINT --out DIR`: one trained model of a checkpoint as a folder that plain ``transformers`` loads.

The model is rebuilt from the run's recorded configs with its trained weights (`trainers.loop.evaluate.
load_target`, as ``cory eval``) and written by `trainers.export.export_model`: the whole LM at the top of
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
import json
from pathlib import Path
from typing import Sequence


def _bool(text: str) -> bool:
    from transformers.hf_argparser import string_to_bool
    return string_to_bool(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cory export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="A checkpoint folder, or a run directory (its latest checkpoint).")
    parser.add_argument("--out", required=True,
                        help="Folder to write (created; must be empty or absent, and outside the run's checkpoints/).")
    parser.add_argument("--model_name", default=None,
                        help="Which model: llm1, llm2, ... (default: the model the run's own held-out evaluations "
                             "follow, as cory eval).")
    parser.add_argument("--merge_lora", type=_bool, default=True,
                        help="LoRA runs: true (default) merges the model's adapter into a copy of the base and writes "
                             "a whole model (AutoModelForCausalLM.from_pretrained(DIR) loads it); false writes the "
                             "adapter alone in DIR/<model_name> (peft's PeftModel.from_pretrained(base, that) loads "
                             "it onto the run's base model). Full fine-tuning runs always write the whole model.")
    return parser


def run_export(argv: Sequence[str]) -> int:
    """``cory export ...``; returns the exit status.

    Raises:
        FileExistsError: `--out` exists and is not empty (nothing is overwritten).
        ValueError: `--out` lies inside the run's ``checkpoints/``; from loading the checkpoint; the export,
            reloaded, does not reproduce the trained model's logits (`check_export`; what was written is removed).
    """
    from trainers.loop.evaluate import load_target
    from trainers.export import check_out, export_model
    args = build_parser().parse_args(list(argv))
    out = Path(args.out)
    check_out(out, args.checkpoint)
    target = load_target(args.checkpoint, args.model_name, use="exported")
    print(json.dumps(export_model(target, out, merge_lora=args.merge_lora)))
    return 0
