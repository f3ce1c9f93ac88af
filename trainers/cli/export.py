"""`cory export CHECKPOINT --out DIR`: one trained model of a checkpoint as a folder that plain ``transformers`` loads.

The model is rebuilt from the run's recorded configs with its trained weights (`trainers.cli.eval.
load_checkpoint_agent`, as ``cory eval``) and written by `agents.LLMAgent.save_pretrained`: for full fine-tuning the
whole LM at the top of DIR (``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
load it), for LoRA the adapter in ``DIR/<llm1|llm2>`` (``PeftModel.from_pretrained(base, that)``); the value head and
``cory_agent.json`` beside it (`LLMAgent.from_pretrained(DIR)` loads all of it). Checkpoints of sharded runs
(``--sharding fsdp``) hold whole tensors, so they export the same way.

Examples:
    cory export runs/imdb-quick --out exported/pioneer
    cory export runs/imdb-quick/checkpoints/iter-000023 --model_name llm2 --out exported/llm2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cory export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="A checkpoint folder, or a run directory (its latest checkpoint).")
    parser.add_argument("--out", required=True, help="Folder to write (created; must be empty or absent).")
    parser.add_argument("--model_name", default=None,
                        help="Which model: llm1 or llm2 (default: the one in the pioneer seat at the checkpoint).")
    return parser


def run_export(argv: Sequence[str]) -> int:
    """``cory export ...``; returns the exit status.

    Raises:
        FileExistsError: `--out` exists and is not empty (nothing is overwritten).
    """
    args = build_parser().parse_args(list(argv))
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out} exists and is not empty; choose a new folder (nothing was overwritten)")
    from trainers.cli.eval import load_checkpoint_agent

    loaded = load_checkpoint_agent(args.checkpoint, args.model_name)
    loaded.agent.save_pretrained(out)
    print(json.dumps({"checkpoint": str(loaded.checkpoint), "model_name": loaded.model_name, "out": str(out)}))
    return 0
