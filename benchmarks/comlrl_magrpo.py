"""The ladder's `comlrl-magrpo` arm: CoMLRL's `MAGRPOTrainer` (comlrl 1.4.3, one model per agent, HF generate) on
the IMDB rung, an outside anchor for this project's `MAGRPO` learner, against the arm ``magrpo-wo-kt``.

    pip install -e ".[comlrl]"     # comlrl 1.4.3; its MAGRPO module imports wandb at load (installed with it)
    python benchmarks/learning.py --rung imdb --arms magrpo-wo-kt comlrl-magrpo --jobs 2
    python benchmarks/time_to_reward.py --against comlrl                  # training CPU s to +0.2, side by side
    python benchmarks/iteration_profile.py --arms magrpo-wo-kt comlrl-magrpo  # CPU s per iteration by phase

**Information structure.** CoMLRL's MAGRPO with one turn (``num_turns=1``) has every agent answer the same prompt
independently (its agents generate in turn, each from its own formatter of the dataset item, and no agent's prompt
holds another's answer); later turns (``num_turns > 1``) show the earlier turn's answers through a user
``external_transition``, but every agent answers again in every turn and each joint answer branches k ways, so no
setting has agent 2 read agent 1's answer of the same turn. CORY's seating (the observer reads the pioneer's answer)
is therefore out of its reach, and this arm is compared with this project's MAGRPO on the same information structure:
the arm ``magrpo-wo-kt`` (the `magrpo` arm with ``--knowledge_transfer false``: the observer sees the pioneer's
prompt alone, `cory_env.config.EnvConfig.knowledge_transfer`). With both seats seeing the same query and rewarded by
the same joint reward, role exchange (T_REx 5) only relabels the seats; CoMLRL has none.

Everything but the trainer is shared with ``magrpo-wo-kt`` (settings read from its own configs,
`benchmarks.rungs.arm_configs`):

==========================  ===============================================  ===========================================
setting                     ours (``magrpo-wo-kt`` on the rung)              CoMLRL (`MAGRPOConfig` / trainer)
==========================  ===============================================  ===========================================
models                      SmolLM2-135M-Instruct, two LoRA adapters         ``agents=[peft1, peft2]``: two PeftModels
                            (r 16, α 32, q/v) on one frozen base             with the same LoRA settings on two copies
                                                                             of the base (CoMLRL has no LoRA option of
                                                                             its own; it trains the parameters with
                                                                             gradients of any module it is given)
reference model             the base (adapters off)                          its copy of each agent at the start (LoRA
                                                                             B = 0, i.e. the base)
queries                     iteration i's 4 group heads of                   the same 4 texts per iteration, in order
                            ``env.reset(seed=derive_seed(seed, i, 2))``      (one dataset item = one query)
group size k                4 (``--group_size``)                             ``num_generations`` 4, ``joint_mode``
                                                                             "aligned" (sample g of agent 1 with g of 2)
joint reward                R = r(q, a1) + r(q, a2), VADER of query +        the same callable (sum of the env task's
                            response (`trainers.learning.magrpo`)            reward of each agent's answer)
advantage                   R − mean_G(R) (``--scale_rewards false``)        ``advantage_mode`` "mean",
                                                                             ``advantage_normalization`` False
batch                       16 rows = 4 queries × k per iteration            ``rollout_buffer_size`` 4 queries
mini-batch                  8 rows                                           ``train_batch_size`` 2 queries (8 rows)
learning rate               1e-3 constant, Adam                              ``agent_learning_rate`` 1e-3, AdamW with
                                                                             its weight decay set to 0 on the built
                                                                             optimisers (CoMLRL fixes torch's 0.01)
β                           0.05 (``init_kl_coef``, fixed)                   ``reference_kl_coef`` 0.05
sampling                    temperature 1, top-k 0, top-p 1                  ``temperature`` 1, ``top_k`` 0, ``top_p`` 1
lengths                     8–12 new tokens                                  ``max_new_tokens`` 12 and
                                                                             ``min_new_tokens`` 8 (passed through
                                                                             ``train(**generation kwargs)``)
gradient clipping           none (``max_grad_norm`` None)                    none
precision                   fp32                                             fp32 (no mixed-precision option)
evaluation                  `CORYTrainer.evaluate`: llm1 in the pioneer      `trainers.evaluation.episodes.
                            seat on the held-out queries, seed               evaluate_heldout` of agent 1 (llm1), the
                            ``EVAL_SEED_BASE + seed``, llm2 under            same queries, seed, KL estimator, η and
                            ``models``, at the rung's points                 points; agent 2 under ``models``
==========================  ===============================================  ===========================================

Differences that CoMLRL's MAGRPO fixes (documented, not mapped):

* **update**: REINFORCE, one pass over each iteration's samples: loss −(Σ_t log π(a_t)) · Â per sequence (the
  token sum), averaged over the k samples and the queries of a mini-batch; no importance ratio, no clipping, no
  epochs on a rollout (ours: GRPO's clipped surrogate, token mean, ``ppo_epochs`` 2; so 2 optimiser steps per
  iteration and model there, 4 here). Adam makes the token sum's larger scale matter little; longer answers weigh
  more there.
* **KL**: β · Σ_t k3_t of each sequence (computed at generation) subtracted from its return before the group mean
  (ours: the k3 term β · KL in the loss, DeepSeekMath eq. 3). ``--kl_in_loss false --kl_penalty k3`` makes ours
  CoMLRL's penalty exactly (with ``--scale_rewards false`` the group-centred penalty is the same either side of the
  centring); add ``--ppo_epochs 1`` for its single pass.
* **lengths**: up to 12 new tokens, the first 8 without EOS (ours draws each row's length in [8, 12]); tokens after
  an end-of-sequence (padding, = EOS for SmolLM2) are scored in its loss.
* **prompts**: tokenised from the query text (ours: the query's token ids); one sequence per forward in scoring and
  the loss (ours: batched).
* **mini-batch order**: Python's ``random.shuffle`` of the queries (seeded here with the run's seed).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # imported by `python benchmarks/...` scripts from a clone
    sys.path.insert(0, str(ROOT))

#: The ladder's name of this arm, and of this project's arm it is compared with (same seating information).
ARM, OURS = "comlrl-magrpo", "magrpo-wo-kt"


def _update(configs):
    """The run's learner config (`RunConfigs.update`: batch sizes, learning rate, β, epochs, group size, ...)."""
    return configs.update


def _kl_estimator(configs) -> str:
    """The per-token KL estimator the run's learner reports as ``kl`` (the evaluations report the same)."""
    return configs.learner_spec.kl_estimator(configs.update)


@dataclass
class CoMLRLRun:
    """A CoMLRL `MAGRPOTrainer` built on ``magrpo-wo-kt``'s settings (`make_comlrl_trainer`), with its query stream
    and what evaluating it needs."""

    trainer: Any
    configs: Any  # magrpo-wo-kt's `RunConfigs`
    prompts: list[list[str]]  # per iteration, its group heads (one CoMLRL dataset item each)
    train_kwargs: dict  # generation settings CoMLRL passes through `MAGRPOTrainer.train(**kwargs)`
    tokenizer: Any
    rung: Any
    tmp: Any  # the temporary run folder (cleaned up by the caller)
    references: list = field(default_factory=list)  # per agent, the frozen reference of our evaluation

    @property
    def iterations(self) -> int:
        return len(self.prompts)


def comlrl_config(configs, device: str = "cpu"):
    """CoMLRL's `MAGRPOConfig` mapped one to one from a run's configs (the module docstring's table).

    Raises:
        ImportError: comlrl is not installed (``pip install -e ".[comlrl]"``).
        ValueError: a batch or mini-batch that is not whole groups of ``group_size`` rows; an adaptive KL
            controller (CoMLRL's β is fixed).
    """
    from comlrl.trainers.reinforce import MAGRPOConfig

    update, env, sampling = _update(configs), configs.env, configs.sampling
    k = update.group_size
    if update.adap_kl_ctrl:
        raise ValueError("adap_kl_ctrl=True: CoMLRL's reference_kl_coef is fixed; run both arms with "
                         "--adap_kl_ctrl false")
    if update.batch_size % k or update.mini_batch_size % k:
        raise ValueError(f"batch_size {update.batch_size} and mini_batch_size {update.mini_batch_size} must be whole "
                         f"groups of group_size {k} rows (CoMLRL batches queries); choose multiples of {k}")
    return MAGRPOConfig(
        num_train_epochs=1, num_agents=2, agent_learning_rate=update.learning_rate, num_generations=k,
        max_new_tokens=env.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k, num_turns=1, joint_mode="aligned", early_termination_threshold=None,
        rollout_buffer_size=update.batch_size // k, train_batch_size=update.mini_batch_size // k,
        advantage_mode="mean", advantage_normalization=update.scale_rewards, eval_interval=0, eval_num_samples=0,
        reference_kl_enabled=update.init_kl_coef > 0, reference_kl_coef=update.init_kl_coef, agent_devices=device,
        parallel_training="none")


def make_comlrl_trainer(seed: int, episodes: int, *, rung_name: str = "imdb", run_dir: str | None = None,
                        device: str = "cpu", flags: Sequence[str] = ()) -> CoMLRLRun:
    """CoMLRL `MAGRPOTrainer` on ``magrpo-wo-kt``'s settings of `rung_name` for `episodes` episodes (queries answered
    by both agents; the module docstring lists the mapping).

    Args:
        device: ``"cpu"`` (the rung's runs) or a CUDA device (both agents and references there).
        flags: `cory train` flags after the rung's and the arm's (e.g. ``--model tiny``, or ``--use_lora false`` for
            full fine-tuning on both sides), as `benchmarks.rungs.arm_configs` takes them.

    Raises:
        ImportError: comlrl (or wandb, which its MAGRPO module imports) is not installed.
        ValueError: a precision other than fp32 (CoMLRL has no mixed precision); batch sizes that are not whole
            groups (`comlrl_config`).
    """
    import copy
    import random

    import torch
    from comlrl.trainers.reinforce import MAGRPOTrainer
    from peft import LoraConfig, get_peft_model

    from agents.dropout import disable_dropout
    from benchmarks.rungs import RUNGS, arm_configs
    from cory_env import BatchedCORYEnv
    from trainers.loop.loading import load_run_model
    from trainers.loop.cory import derive_seed

    torch.set_num_threads(1)
    rung = RUNGS[rung_name]
    tmp = tempfile.TemporaryDirectory(prefix="cory-comlrl-")
    configs, iterations = arm_configs(rung_name, OURS, seed, episodes, f"{run_dir or tmp.name}/ours", flags)
    if configs.model.precision != "fp32":
        raise ValueError(f"precision {configs.model.precision!r}: CoMLRL's MAGRPO computes in its models' dtype "
                         "only; run both arms with --precision fp32")
    args = comlrl_config(configs, device)
    update = _update(configs)
    k = update.group_size
    base, tokenizer = load_run_model(configs)
    env = BatchedCORYEnv(configs.env, tokenizer, batch_size=update.batch_size, reward_fn=rung.reward_fn,
                         task_options=configs.task_options, group_size=k)
    queries = []  # the arm's query stream: one group head per k rows, iteration by iteration
    for it in range(iterations):
        _, info = env.reset(seed=derive_seed(configs.run.seed, it, 2))
        queries.append(list(info["query_text"][::k]))
    task_reward = env.task.reward_fn

    def joint_reward(*completions, prompts):
        """R = Σ_agents r(q, a_agent) of one joint sample (CoMLRL passes each agent's answer as a 1-item list)."""
        answers = [c[0] for c in completions]
        return [float(sum(task_reward([prompts[0]] * len(answers), answers, [{} for _ in answers])))]

    torch.manual_seed(seed)
    random.seed(seed)  # CoMLRL's mini-batch order
    models = [base, copy.deepcopy(base)]
    references = []
    if configs.model.use_lora:
        lora = LoraConfig(r=configs.model.lora_r, lora_alpha=configs.model.lora_alpha,
                          lora_dropout=configs.model.lora_dropout, bias="none",
                          target_modules=configs.model.lora_modules, task_type="CAUSAL_LM")
        models = [get_peft_model(m, copy.deepcopy(lora)) for m in models]
    else:
        references = [copy.deepcopy(base).requires_grad_(False).eval()]  # before training changes `base`
    if configs.model.disable_dropout:
        disable_dropout(*models)
    trainer = MAGRPOTrainer(agents=models, num_agents=2, tokenizer=tokenizer, reward_func=joint_reward, args=args)
    trainer.verbose = False  # no progress bars (CoMLRL reads this from a wandb config otherwise)
    for optimizer in trainer.optimizers:  # torch's AdamW default weight decay 0.01 -> ours (Adam, none)
        for group in optimizer.param_groups:
            group["weight_decay"] = 0.0
    generation = {"min_new_tokens": configs.env.min_new_tokens,
                  "repetition_penalty": configs.sampling.repetition_penalty}  # 1.0: off
    return CoMLRLRun(trainer=trainer, configs=configs, prompts=queries, train_kwargs=generation, tokenizer=tokenizer,
                     rung=rung, tmp=tmp, references=references)


def train_iteration(run: CoMLRLRun, it: int) -> None:
    """One iteration: CoMLRL trains on iteration `it`'s queries (one epoch of a dataset of `batch_size / k` items:
    rollouts, joint rewards and the update once its rollout buffer holds them all)."""
    from datasets import Dataset

    run.trainer.train_dataset = Dataset.from_dict({"prompt": run.prompts[it]})
    run.trainer.train(**run.train_kwargs)


def evaluate_agents(run: CoMLRLRun, episodes: int, seed: int, env=None) -> dict:
    """The held-out evaluation of the arm's own (`benchmarks.ladder_run.run_own_arm`): agent 1 (llm1) alone in the
    pioneer seat, with agent 2's (llm2) reward, KL and distinct-n under ``models``; each model in eval mode.

    Args:
        env: the held-out env (`trainers.evaluation.episodes.heldout_env`, built once per run); None builds it.
    """
    from agents import LLMAgent, ReferenceModel
    from benchmarks.ladder_report import POINT_KEYS
    from trainers.evaluation.evaluator import Evaluator

    configs, update = run.configs, _update(run.configs)
    lora = configs.model.use_lora
    eta = configs.run.eta if configs.run.eta is not None else update.init_kl_coef

    def one(index: int) -> dict:
        model = run.trainer.agents[index]
        was_training = model.training
        model.eval()
        try:
            agent = LLMAgent(model, run.tokenizer, sampling=configs.sampling, adapter_name="default" if lora else None)
            ref = ReferenceModel(model, disable_adapters=True) if lora else ReferenceModel(run.references[0])
            evaluator = Evaluator(configs.env, reward_fn=run.rung.reward_fn, task_options=configs.task_options,
                                  eta=eta, kl_penalty=_kl_estimator(configs))
            return evaluator.pioneer(agent, ref, episodes=episodes, seed=seed, env=env)
        finally:
            model.train(was_training)

    out = one(0)
    other = one(1)
    out["models"] = {"llm2": {k: other[k] for k in ("reward", *POINT_KEYS) if k in other}}
    return out


def train_and_evaluate(seed: int, episodes: int, eval_episodes: int, *, rung_name: str = "imdb",
                       run_dir: str | None = None, flags: Sequence[str] = ()) -> dict:
    """Train both agents with CoMLRL's MAGRPO for `episodes` episodes (`make_comlrl_trainer`); evaluate agent 1 on
    held-out queries before training and at the rung's evaluation points (`evaluate_agents`).

    Returns:
        dict: before, after (held-out pioneer reward of llm1), episodes, curve (point records), final_eval, cpu_s,
        train_cpu_s (model loading and building the trainer count as training, evaluations do not), comlrl_version.

    Raises:
        ImportError: comlrl is not installed (``pip install -e ".[comlrl]"``).
    """
    import comlrl

    from benchmarks.ladder_run import EVAL_SEED_BASE, TrainingClock, eval_points
    from trainers.evaluation.episodes import heldout_env

    clock = TrainingClock()
    run = make_comlrl_trainer(seed, episodes, rung_name=rung_name, run_dir=run_dir, flags=flags)
    configs, rung = run.configs, run.rung
    envs: list = []

    def evaluate() -> dict:
        if not envs:  # built once, at the first evaluation (as `CORYTrainer.evaluate`)
            envs.append(heldout_env(configs.env, run.tokenizer, episodes=eval_episodes, reward_fn=rung.reward_fn,
                                    task_options=configs.task_options))
        return evaluate_agents(run, eval_episodes, EVAL_SEED_BASE + seed, envs[0])

    evaluate = clock.excluded(evaluate)
    batch = _update(configs).batch_size
    points = set(eval_points(rung, run.iterations))
    curve = [clock.point(ARM, seed, 0, evaluate(), rung.keep_texts)]
    for it in range(run.iterations):
        train_iteration(run, it)
        if it + 1 in points:
            curve.append(clock.point(ARM, seed, (it + 1) * batch, evaluate(), rung.keep_texts))
    run.tmp.cleanup()
    out = clock.summary(curve)
    return {**out, "after": out["final"], "episodes": run.iterations * batch, "comlrl_version": comlrl.__version__}


# ---------------------------------------------------------------------------------------------------- profile
