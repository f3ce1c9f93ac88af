"""Named presets for `cory train --preset NAME`: flat field -> value overrides of the config dataclasses.

Precedence: command-line flags > `--config FILE.yaml` > preset > dataclass defaults.
"""

from __future__ import annotations

#: The learning ladder's tiny-model settings (benchmarks/rungs.py's ``TINY``), shared by its presets.
_LADDER = {"model": "tiny", "seating": "cory", "context_len": 12, "heldout_fraction": 0.2, "batch_size": 512,
           "mini_batch_size": 128, "ppo_epochs": 4, "learning_rate": 1e-3, "ent_coef": 0.01, "vf_coef": 0.5, "adap_kl_ctrl": False,
           "init_kl_coef": 0.01, "role_exchange_period": 5, "eval_episodes": 512, "log_samples": 2,
           "torch_threads": 1}

PRESETS: dict[str, dict] = {
    # A tiny random model on the built-in openings: a full run of a few iterations in seconds (tests, trying flags).
    "tiny": {"model": "tiny", "output_dir": "runs/tiny", "num_iterations": 4, "role_exchange_period": 2,
             "batch_size": 4, "mini_batch_size": 2, "ppo_epochs": 2, "learning_rate": 1e-3,
             "min_new_tokens": 3, "max_new_tokens": 6, "context_len": 64, "log_samples": 2},
    # A learner's first check (docs/extending.md): the first-symbol bandit on the tiny model, one seat, learning from
    # about 0.2 to 0.9 held-out reward within a minute on one CPU thread. It sets no option of a particular learner
    # (only the learning rate and batch size every learner reads), so a plug-in learner is warned of nothing.
    "learner-check": {
        "model": "tiny", "task": "first_symbol", "seating": "ppo", "output_dir": "runs/learner-check",
        "context_len": 12, "heldout_fraction": 0.2, "num_iterations": 40, "batch_size": 64, "learning_rate": 1e-3,
        "eval_episodes": 256, "log_samples": 2, "torch_threads": 1,
    },
    # The learning ladder's tiny-model rungs (benchmarks/rungs.py, docs/results/learning.md), the CORY arm of each
    # with the ladder's settings and episode budget (tests/trainers/test_presets.py holds them equal): large batches
    # (a tiny model's step costs the same for 32 or 512 rows), an entropy bonus against early collapse, a value-loss
    # weight of 0.5, a small fixed KL coefficient, T_REx 5, a held-out fifth of the queries. The 20-token cooperative
    # task (65,536 episodes):
    "tiny-vocab": {**_LADDER, "task": "tiny_vocab", "output_dir": "runs/tiny-vocab", "num_iterations": 128},
    # the relay task, where knowledge transfer is necessary (65,536 episodes; the pair of docs/partners.md)
    "relay": {**_LADDER, "task": "relay", "output_dir": "runs/relay", "num_iterations": 128},
    # the chain-relay task on a chain of three seats (131,072 episodes)
    "chain-relay": {**_LADDER, "task": "chain_relay", "seating": "chain:3", "output_dir": "runs/chain-relay",
                    "num_iterations": 256},
    # The README's first command: real SmolLM2-135M-Instruct on CPU in a few minutes, LoRA, VADER reward, IMDB
    # from the hub when reachable, else the built-in openings (or --data_path FILE). It ends by printing the
    # pioneer's held-out reward before and after training. CORY with GRPO learners (lr, beta and lengths from the
    # IMDB rung of benchmarks/learning.py). 24 iterations with exchanges after 12 and 24 (llm1 ends in the pioneer
    # seat) and 128 held-out episodes (benchmarks/results/main_job_seeds.json holds seeds 0-4 of this preset).
    "imdb-quick": {
        "model": "smollm2-135m-instruct", "output_dir": "runs/imdb-quick", "data_path": "hub",
        "learner": "grpo", "group_size": 4,
        "num_iterations": 24, "role_exchange_period": 12, "batch_size": 16, "mini_batch_size": 8, "ppo_epochs": 2,
        "use_lora": True, "lora_r": 16, "lora_alpha": 32, "learning_rate": 1e-3,
        "min_new_tokens": 8, "max_new_tokens": 12, "context_len": 96, "init_kl_coef": 0.05, "adap_kl_ctrl": False,
        "heldout_fraction": 0.2, "eval_episodes": 128, "torch_threads": 2,
        "eval_influence": False,  # the observer's influence would add ~3 min to its two evaluations; docs/partners.md
    },
    # GSM8K on CPU with SmolLM2-135M-Instruct and LoRA: 256-token answers (the paper's evaluation length), a
    # window of 800 tokens that holds the chat-template observer prompt (question + the pioneer's 256-token
    # answer) plus its own answer. Data: --data_path $CORY_SHARED_DATA/gsm8k_train.jsonl (else the hub's train split).
    # PPO knobs from the authors' GSM8K script where they fit a CPU (lr 1e-4, init_kl_coef 0.1 fixed).
    "gsm8k-quick": {
        "task": "gsm8k", "model": "smollm2-135m-instruct", "output_dir": "runs/gsm8k-quick",
        "num_iterations": 8, "role_exchange_period": 4, "batch_size": 8, "mini_batch_size": 4, "ppo_epochs": 1,
        "use_lora": True, "lora_r": 16, "lora_alpha": 32, "learning_rate": 1e-4,
        "init_kl_coef": 0.1, "adap_kl_ctrl": False,
        "min_new_tokens": 256, "max_new_tokens": 256, "context_len": 800, "log_samples": 2,
        "torch_threads": 2,
    },
    # The paper's IMDB settings (official code, docs/paper.md §2), for a GPU.
    "imdb-paper": {
        "model": "gpt2-large", "output_dir": "runs/imdb-paper", "data_path": "hub", "reward": "distilbert-imdb",
        "min_review_chars": 100, "query_min_tokens": 2, "query_max_tokens": 7,
        "min_new_tokens": 4, "max_new_tokens": 15, "context_len": 128,
        "num_iterations": 102, "role_exchange_period": 5, "batch_size": 256, "mini_batch_size": 256,
        "ppo_epochs": 4, "learning_rate": 1.41e-5, "init_kl_coef": 0.4, "adap_kl_ctrl": True, "target": 6.0,
        "horizon": 10000.0, "kl_penalty": "full", "use_score_scaling": True, "use_score_norm": True,
        "cliprange": 0.2, "cliprange_value": 0.2, "vf_coef": 0.1, "top_k": 0, "top_p": 1.0,
        "repetition_penalty": 1.1, "checkpoint_every": 10,
    },
}


def preset(name: str) -> dict:
    """A copy of preset `name`.

    Raises:
        ValueError: unknown name (lists the valid ones).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}")
    return dict(PRESETS[name])
