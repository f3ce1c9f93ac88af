"""The ladder's `trl-grpo` arm: TRL's `GRPOTrainer` on the IMDB rung, an outside anchor for this project's GRPO
(`trl-grpo-default`: the same in TRL's own default precision, bf16 autocast, for a CPU with native bf16).

    pip install -e ".[trl]"        # trl 1.16 (works with the project's transformers 5 / torch 2.13 CPU)
    python benchmarks/learning.py --rung imdb --arms grpo trl-grpo --jobs 2

Everything but the trainer is shared with the `grpo` arm, so the two arms differ only in the learner's code:

* **model**: the same SmolLM2-135M-Instruct + LoRA (r, alpha, dropout, target modules), from the `grpo` arm's own
  configs (`rungs.arm_configs`), loaded once by `load_run_model`; TRL wraps it in the LoRA adapter and
  trains that in place, and its reference model is the base with the adapter disabled, as ours.
* **queries**: the exact query stream of the `grpo` arm: iteration i's group heads from
  ``env.reset(seed=derive_seed(seed, i, 2))`` of an env of group size k (training slice only), in order (TRL's dataset shuffle
  off), each answered k times.
* **reward**: the env's task reward (VADER of query + response), called on (query, completion) texts.
* **budget and update**: per 16 episodes (4 queries × k = 4 samples), 2 passes (`num_iterations`) of mini-batches
  of 8 (`per_device_train_batch_size` 8, `steps_per_generation` 2), the arm's lr (1e-3) constant (TRL's default
  linear decay turned off, as ours), β 0.05 with a k3 KL term in the loss (TRL's and ours), clip 0.2, std-scaled group
  advantages, no gradient clipping (ours: `max_grad_norm` None), temperature 1, 8-12 new tokens (TRL: up to 12
  with ``min_new_tokens`` 8; ours draws each row's length in [8, 12]).
* **evaluation**: the same `CORYTrainer.evaluate` on the same held-out queries and seed (`EVAL_SEED_BASE + seed`),
  at the same points, with the model in eval mode.

Left at TRL's defaults (documented differences): loss aggregation ``loss_type="dapo"`` (token mean over the
generation batch; ours: token mean per mini-batch), AdamW with weight decay 0 (ours: Adam), prompt tokenisation of
the decoded query text (ours: the query's token ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

@dataclass
class TRLRun:
    """A `GRPOTrainer` built on the `grpo` arm's settings (`make_trl_trainer`), with what evaluating it needs."""

    trainer: Any
    configs: Any  # the grpo arm's `RunConfigs`
    iterations: int  # generation batches (our iterations) the trainer will run
    updates_per_iteration: int  # TRL optimiser steps per generation batch
    tokenizer: Any
    rung: Any
    tmp: Any  # the temporary run folder (cleaned up by the caller)


def make_trl_trainer(seed: int, episodes: int, *, rung_name: str = "imdb", run_dir: str | None = None,
                     precision: str = "fp32", device: str = "cpu", flags: Sequence[str] = ()) -> TRLRun:
    """TRL `GRPOTrainer` on the `grpo` arm's settings of `rung_name` for `episodes` completions (module docstring).

    Args:
        precision: ``"fp32"`` (this project's choice on a CPU without native bf16, the rung's runs) or
            ``"trl-default"`` (TRL's own default: ``bf16=True`` unless fp16 is set, i.e. bf16 autocast).
        device: ``"cpu"`` (the rung's runs) or ``"cuda"`` (TRL places the model on this process's GPU).
        flags: `cory train` flags after the rung's and the arm's (e.g. ``--model DIR --data_path CSV`` where the
            defaults are not reachable), as `benchmarks.rungs.arm_configs` takes them.

    Raises:
        ImportError: trl is not installed (``pip install -e ".[trl]"``).
        ValueError: an unknown `precision`.
    """
    import tempfile

    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig

    from benchmarks.rungs import RUNGS, arm_configs
    from cory_env import BatchedCORYEnv
    from trainers.loop.loading import load_run_model
    from trainers.loop.cory import derive_seed

    if precision not in ("fp32", "trl-default"):
        raise ValueError(f"precision must be 'fp32' or 'trl-default', got {precision!r}")
    torch.set_num_threads(1)
    rung = RUNGS[rung_name]
    tmp = tempfile.TemporaryDirectory(prefix="cory-trl-grpo-")
    run_dir = run_dir or tmp.name
    configs, iterations = arm_configs(rung_name, "grpo", seed, episodes, f"{run_dir}/ours", flags)
    ppo, env_cfg, sampling = configs.update, configs.env, configs.sampling
    k = ppo.group_size
    base, tokenizer = load_run_model(configs)
    env = BatchedCORYEnv(env_cfg, tokenizer, batch_size=ppo.batch_size, reward_fn=rung.reward_fn,
                         task_options=configs.task_options, group_size=k)

    # the grpo arm's query stream: one group head per k rows, iteration by iteration
    prompts = []
    for it in range(iterations):
        _, info = env.reset(seed=derive_seed(configs.run.seed, it, 2))
        prompts += info["query_text"][::k]
    dataset = Dataset.from_dict({"prompt": prompts})
    task_reward = env.task.reward_fn

    def reward(prompts, completions, **_):
        return [float(r) for r in task_reward(list(prompts), list(completions), [{} for _ in prompts])]

    steps_per_generation = ppo.batch_size // ppo.mini_batch_size
    args = trl.GRPOConfig(
        output_dir=f"{run_dir}/trl", use_cpu=device == "cpu", seed=seed, report_to="none", save_strategy="no", logging_steps=16,
        learning_rate=ppo.learning_rate, lr_scheduler_type="constant", max_grad_norm=ppo.max_grad_norm or 0.0,
        optim="adamw_torch",
        per_device_train_batch_size=ppo.mini_batch_size, gradient_accumulation_steps=1,
        steps_per_generation=steps_per_generation, num_generations=k, num_iterations=ppo.ppo_epochs,
        max_steps=iterations * steps_per_generation * ppo.ppo_epochs, beta=ppo.init_kl_coef,
        epsilon=ppo.cliprange, scale_rewards="group", temperature=sampling.temperature, top_k=0,
        top_p=1.0,
        max_completion_length=env_cfg.max_new_tokens,
        generation_kwargs={"min_new_tokens": env_cfg.min_new_tokens}, shuffle_dataset=False,
        gradient_checkpointing=False, disable_dropout=False, disable_tqdm=True,
        **({"bf16": False} if precision == "fp32" else {}),
    )
    torch.manual_seed(seed)
    lora = LoraConfig(r=configs.model.lora_r, lora_alpha=configs.model.lora_alpha,
                      lora_dropout=configs.model.lora_dropout, bias="none", target_modules=configs.model.lora_modules,
                      task_type="CAUSAL_LM")
    trainer = trl.GRPOTrainer(model=base, reward_funcs=reward, args=args, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=lora)
    return TRLRun(trainer=trainer, configs=configs, iterations=iterations,
                  updates_per_iteration=steps_per_generation * ppo.ppo_epochs, tokenizer=tokenizer, rung=rung, tmp=tmp)


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int, *, rung_name: str = "imdb",
                       run_dir: str | None = None, precision: str = "fp32") -> dict:
    """Train the pioneer's LoRA adapter with TRL `GRPOTrainer` for `episodes` completions (`make_trl_trainer`);
    evaluate on held-out queries before training and at the rung's evaluation points.

    Returns:
        dict: before, after (held-out pioneer reward), episodes, curve [[episodes, reward], ...], final_eval (KL,
        distinct-n of the last evaluation), train_cpu_s, trl_version, precision.

    Raises:
        ImportError: trl is not installed (``pip install -e ".[trl]"``).
    """
    import trl
    from transformers import TrainerCallback

    from agents import LLMAgent, ReferenceModel
    from benchmarks.ladder_run import EVAL_SEED_BASE, TrainingClock, eval_points
    from cory_env.seating import PIONEER
    from trainers.evaluation.evaluator import Evaluator

    arm = "trl-grpo" if precision == "fp32" else "trl-grpo-default"  # the ladder's name of this arm
    clock = TrainingClock()  # as the project's arms: loading the model and building the trainer count as training
    run = make_trl_trainer(seed, episodes, rung_name=rung_name, run_dir=run_dir, precision=precision)
    configs, model = run.configs, run.trainer.model

    def evaluate() -> dict:
        was_training = model.training
        model.eval()
        try:
            seats = {PIONEER: LLMAgent(model, run.tokenizer, sampling=configs.sampling, adapter_name="default")}
            evaluator = Evaluator(configs.env, reward_fn=run.rung.reward_fn, task_options=configs.task_options,
                                  kl_penalty=configs.learner_spec.kl_estimator(configs.update))
            return evaluator.pioneer(seats[PIONEER], ReferenceModel(model, disable_adapters=True),
                                     episodes=eval_episodes, seed=EVAL_SEED_BASE + seed)
        finally:
            model.train(was_training)

    points = {p * run.updates_per_iteration: p * configs.update.batch_size
              for p in eval_points(run.rung, run.iterations)}
    evaluate = clock.excluded(evaluate)
    curve = []

    class HeldOut(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ARG002 - transformers' callback signature
            if state.global_step in points:
                curve.append(clock.point(arm, seed, points[state.global_step], evaluate()))

    run.trainer.add_callback(HeldOut())
    curve.append(clock.point(arm, seed, 0, evaluate()))
    run.trainer.train()
    run.tmp.cleanup()
    out = clock.summary(curve)
    return {**out, "after": out["final"], "episodes": run.iterations * configs.update.batch_size,
            "trl_version": trl.__version__, "precision": precision}
