"""Peak memory: CORY ÷ single-agent PPO, for full fine-tuning and for memory-shared LoRA.

Each arm is one ``cory train`` process (SmolLM2-135M-Instruct, CPU, fp32, a small batch, ``--num_iterations``
iterations) started on its own; its peak resident set size comes from the OS: ``os.wait4`` returns the finished
child's ``rusage`` and ``ru_maxrss`` (KiB on Linux) is its peak RSS. The trainer's own ``sys/peak_rss_gb`` metric
(``getrusage(RUSAGE_SELF)`` in the child) is read back from ``metrics.jsonl`` as a cross-check. Ratios:

* **rss_cory_vs_ppo_full** (target <= 1.75): full fine-tuning. CORY holds llm1, llm2 and the frozen reference
  model (3 copies of the weights) and two Adam states; PPO holds the policy and the reference (2 copies) and one.
* **rss_cory_vs_ppo_lora** (target <= 1.15): memory-shared LoRA. One frozen base with one adapter per model; the
  reference model is the base with adapters disabled, so CORY adds only an adapter, its Adam state and the
  observer's activations.
* **rss_cory_vs_ppo_lora_gc**: the same with ``--gradient_checkpointing true`` in both arms (activations are
  recomputed in backward, so the observer's longer sequences no longer set the peak).

Peak RSS includes the Python interpreter, torch and the model load (the same in both arms), so the ratios are
what a user sees for a whole process, not for the training tensors alone.

Run::

    python benchmarks/memory.py [--iterations 2] [--out benchmarks/results/memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/memory.py` from a clone
    sys.path.insert(0, str(REPO))
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import data_dir, recorded_path  # noqa: E402

IMDB_CSV = data_dir() / "imdb_reviews_1000.csv"  # the data folder, $CORY_SHARED_DATA (benchmarks/paths.py)
# (algo, layout); layout: full fine-tune, memory-shared LoRA, LoRA with gradient checkpointing
ARMS = tuple((algo, layout) for layout in ("full", "lora", "lora_gc") for algo in ("ppo", "cory"))
TARGETS = {"full": 1.75, "lora": 1.15, "lora_gc": 1.15}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--iterations", type=int, default=2, help="CORY iterations per arm")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    add_out_option(p, "memory.json")
    args = p.parse_args(argv)
    args.out = checked_out(p, args)  # before the runs
    return args


def train_command(algo: str, layout: str, output_dir: Path, args: argparse.Namespace) -> list[str]:
    """The ``cory train`` command line of one arm (`layout`: "full", "lora" or "lora_gc")."""
    cmd = [sys.executable, "-m", "trainers.cli", "train", "--model", args.model, "--algo", algo,
           "--use_lora", str(layout != "full").lower(), "--num_iterations", str(args.iterations),
           "--gradient_checkpointing", str(layout == "lora_gc").lower(),
           "--batch_size", str(args.batch_size), "--mini_batch_size", str(args.batch_size),
           "--ppo_epochs", str(args.ppo_epochs), "--min_new_tokens", str(args.new_tokens),
           "--max_new_tokens", str(args.new_tokens), "--context_len", "96", "--tensorboard", "false",
           "--log_samples", "0", "--torch_threads", str(args.threads), "--output_dir", str(output_dir)]
    if IMDB_CSV.exists():
        cmd += ["--data_path", str(IMDB_CSV)]
    return cmd


def peak_rss_gib(cmd: list[str], log_file: Path) -> float:
    """Run `cmd` to completion; its peak RSS in GiB from ``os.wait4``.

    Raises:
        RuntimeError: if the child fails (the message points to its log).
    """
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # tell Popen the child was reaped
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}; see {log_file}")
    return usage.ru_maxrss / 2**20


def logged_peak_rss_gib(output_dir: Path) -> float | None:
    """The last ``sys/peak_rss_gb`` the trainer logged, or None."""
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1]).get("sys/peak_rss_gb") if lines else None


def main(argv=None) -> dict:
    args = parse_args(argv)
    results: dict = {"model": recorded_path(args.model), "iterations": args.iterations, "batch_size": args.batch_size,
                     "new_tokens": args.new_tokens, "ppo_epochs": args.ppo_epochs, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for algo, layout in ARMS:
            out_dir = Path(tmp) / f"{algo}-{layout}"
            rss = peak_rss_gib(train_command(algo, layout, out_dir, args), Path(tmp) / f"{algo}-{layout}.log")
            logged = logged_peak_rss_gib(out_dir)
            results[f"{algo}_{layout}"] = {"peak_rss_gib": round(rss, 3),
                                           "logged_peak_rss_gib": None if logged is None else round(logged, 3)}
            print(f"{algo:4s} {layout:7s}: peak RSS {rss:.2f} GiB", flush=True)
    for layout, target in TARGETS.items():
        ratio = results[f"cory_{layout}"]["peak_rss_gib"] / results[f"ppo_{layout}"]["peak_rss_gib"]
        results[f"rss_cory_vs_ppo_{layout}"] = round(ratio, 3)
        results[f"target_{layout}"] = target
        print(f"{layout}: CORY / PPO peak RSS = {ratio:.3f} (target <= {target})")
    write_json(args.out, results, indent=2)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
