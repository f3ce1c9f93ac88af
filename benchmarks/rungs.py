"""The learning ladder's rungs and arms (`benchmarks/learning.py` runs them): what each rung trains (`Rung`: shared
`cory train` flags, the episode budget, the default arms, floors and ceilings; `RUNGS`), the other libraries' arms
(`ExternalArm`, `EXTERNAL_ARMS`), an arm's name read as (base arm, episode factor) (`arm_spec`: ``ppo-2x``), and the
`RunConfigs` of one of this project's arms on a rung (`arm_configs`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from benchmarks.paths import DATA_MARK, resolved_flags
from cory_env.tasks.chain_relay import without_kt_optimum
from cory_env.tasks.first_symbol import first_symbol_reward

__all__ = ["EXTERNAL_ARMS", "IMDB", "RUNGS", "TINY", "ExternalArm", "Rung", "arm_configs", "arm_spec",
           "rung_flags_read", "unavailable_reason"]


@dataclass(frozen=True)
class Rung:
    """One rung: shared `cory train` flags, the episode budget per arm, the default arms and the floors."""

    flags: tuple[str, ...]
    episodes: int
    arms: tuple[str, ...]
    floors: dict[str, float]
    eval_episodes: int = 512
    eval_points: int = 8
    reward_fn: Callable | None = None
    collective: bool = True  # CORY arms report the collective reward (False: the pioneer's task reward)
    floor_on_gain: bool = False  # floors bound the gain over the untrained model (True) or the final reward
    help: str = ""
    extra_floor: dict = field(default_factory=dict)
    ceilings: dict[str, float] = field(default_factory=dict)  # arm -> the final reward it must not exceed
    keep_texts: bool = False  # every curve point keeps a few samples and every response text (collapse is read there)


# Settings every tiny-model arm shares (chosen by the factor table, docs/results/learning_factors.md): large
# batches (the tiny model's step costs about the same for 32 or 512 rows), an entropy bonus against early collapse,
# a value-loss weight of 0.5 (TRL's 0.1 left CORY's value heads behind), a small fixed KL coefficient, T_REx 5 as in
# the official code (dropout is off by default: `--disable_dropout`).
TINY = ("--model", "tiny", "--task", "tiny_vocab", "--context_len", "12", "--heldout_fraction", "0.2",
        "--batch_size", "512", "--mini_batch_size", "128", "--ppo_epochs", "4", "--learning_rate", "1e-3",
        "--ent_coef", "0.01", "--vf_coef", "0.5", "--adap_kl_ctrl", "false", "--init_kl_coef", "0.01",
        "--role_exchange_period", "5")

# The IMDB rung: the paper's task on the offline default model, reward and data.
IMDB = Rung(
    flags=("--model", "smollm2-135m-instruct", "--task", "imdb",
           "--data_path", f"{DATA_MARK}/imdb_reviews_1000.csv", "--heldout_fraction", "0.2",
           "--use_lora", "true", "--lora_r", "16", "--lora_alpha", "32", "--batch_size", "16",
           "--mini_batch_size", "8", "--ppo_epochs", "2", "--learning_rate", "1e-3", "--ent_coef", "0.0",
           "--adap_kl_ctrl", "false", "--init_kl_coef", "0.05",
           # PPO learners only (GRPO normalises within groups and ignores them), and lr 1e-3 for every arm:
           # the factor table of docs/results/learning_factors.md (single-agent PPO gained +0.08 on average at
           # lr 5e-4 without them, +0.45 at lr 1e-3 with them)
           "--use_score_scaling", "true", "--use_score_norm", "true", "--whiten_rewards", "true",
           "--min_new_tokens", "8", "--max_new_tokens", "12", "--context_len", "96", "--role_exchange_period", "5"),
    episodes=400, arms=("ppo-2x", "cory", "grpo-2x", "cory-grpo"),
    floors={"ppo": 0.2, "cory": 0.2, "grpo": 0.2, "cory-grpo": 0.2}, eval_episodes=128,
    eval_points=8, collective=False, floor_on_gain=True, keep_texts=True,
    help="SmolLM2-135M-Instruct + LoRA, VADER, real IMDB reviews; floors are gains over the base model; "
         "ppo-2x / grpo-2x: the single-agent arms with twice the episodes (equal compute with CORY's two models)",
)

RUNGS: dict[str, Rung] = {
    "sanity": Rung(
        flags=TINY + ("--batch_size", "64", "--mini_batch_size", "16"), episodes=64 * 40, arms=("ppo",),
        floors={"ppo": 0.9}, extra_floor={"cpu_s": 60.0}, reward_fn=first_symbol_reward, collective=False,
        eval_episodes=256, eval_points=4,
        help="tiny model, tiny_vocab queries, reward 1 for a first symbol in {a, b, c}",
    ),
    "tiny_vocab": Rung(
        flags=TINY, episodes=512 * 128,
        arms=("ppo", "grpo", "cory", "cory-wo-kt", "cory-wo-rex", "cory-grpo"),
        floors={"ppo": 0.9, "cory": 1.8},
        help="tiny model on the 20-token cooperative task",
    ),
    "relay": Rung(
        flags=tuple("relay" if f == "tiny_vocab" else f for f in TINY), episodes=512 * 128,
        arms=("cory", "cory-wo-kt", "mappo", "cory-grpo", "magrpo"), floors={"cory": 1.8},
        ceilings={"cory-wo-kt": 1.25},
        help="tiny model on the relay task: the query is private to the pioneer, so knowledge transfer is necessary "
             "(w/o KT optimum 1.25)",
    ),
    "chain_relay": Rung(
        flags=tuple("chain_relay" if f == "tiny_vocab" else f for f in TINY), episodes=512 * 256,
        arms=("chain3", "chain3-wo-kt", "chain3-mappo", "chain3-grpo", "chain3-magrpo"), floors={"chain3": 2.7},
        ceilings={"chain3-wo-kt": round(without_kt_optimum(3, heldout_fraction=0.2), 3)},
        help="tiny model on the chain-relay task: 3 seats, the query private to the first, seat k reads seat k-1 "
             "only (optimum 3; without knowledge transfer 1 + 2p = 1.546 on the held-out slice: "
             "cory_env.tasks.chain_relay)",
    ),
    "imdb": IMDB,
    "imdb_batch256": replace(
        IMDB, flags=IMDB.flags + ("--batch_size", "256", "--mini_batch_size", "256", "--ppo_epochs", "4",
                                  "--gradient_checkpointing", "true"),
        episodes=256 * 24, arms=("ppo", "cory"),
        help="the imdb rung at the paper's batch (docs/paper.md §2: 256 queries per iteration, one mini-batch of "
             "256, 4 PPO epochs; activation checkpointing), 24 iterations (the paper ran about 102); for a GPU: "
             "--jobs 6 --flags --device cuda (benchmarks/README.md)"),
}


@dataclass(frozen=True)
class ExternalArm:
    """Another library's arm: `module` has ``train_and_evaluate(seed, episodes, eval_episodes, **options) -> dict``;
    it runs on `rung`, reports `metric` ("collective", or "pioneer" for a single-agent arm), and its library comes
    from the project's extra `extra`; `requires` are modules it imports only when it runs (checked before running);
    `options` are (keyword, value) pairs passed to ``train_and_evaluate`` (e.g. TRL's own precision)."""

    module: str
    metric: str
    rung: str
    extra: str
    requires: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()


#: Other libraries' arms.
EXTERNAL_ARMS = {
    "tianshou": ExternalArm("trainers.adapters.tianshou", "collective", "tiny_vocab", "dev"),
    "sb3-maskable-ppo": ExternalArm("trainers.adapters.sb3", "pioneer", "tiny_vocab", "baselines"),
    "torchrl": ExternalArm("trainers.adapters.torchrl", "collective", "tiny_vocab", "baselines"),
    "trl-grpo": ExternalArm("benchmarks.trl_grpo", "pioneer", "imdb", "trl", requires=("trl",)),
    # TRL in its own default precision (bf16 autocast): for a CPU with native bf16 (AVX512-BF16/AMX); emulated elsewhere
    "trl-grpo-default": ExternalArm("benchmarks.trl_grpo", "pioneer", "imdb", "trl", requires=("trl",),
                                    options=(("precision", "trl-default"),)),
    # CoMLRL's MAGRPO: two models answering the query alone, against `magrpo-wo-kt` (benchmarks/comlrl_magrpo.py)
    "comlrl-magrpo": ExternalArm("benchmarks.comlrl_magrpo", "pioneer", "imdb", "comlrl",
                                 requires=("comlrl.trainers.reinforce",)),
}


def unavailable_reason(arm: str) -> str | None:
    """None when another library's arm `arm` can run (its modules import), else why not."""
    try:
        for module in (EXTERNAL_ARMS[arm].module, *EXTERNAL_ARMS[arm].requires):
            importlib.import_module(module)
    except ImportError as err:
        return f"not installed ({err}); pip install -e \".[{EXTERNAL_ARMS[arm].extra}]\""
    return None


# An arm ``NAME-Nx`` is arm NAME with N times the rung's episodes: ``-2x`` is the equal-compute control (a CORY run
# trains two models on one episode budget; the paper's control is a 2x-size model, which offline we lack), longer
# factors are the long-horizon arms (distribution collapse).


def arm_spec(arm: str) -> tuple[str, int]:
    """(base arm, episode factor) of an arm name: ``"ppo-2x"`` is ``("ppo", 2)``, ``"cory-4x"`` is ``("cory", 4)``,
    ``"ppo"`` and ``"cory-wo-rex"`` are themselves with factor 1 (a suffix is a factor when it is a number followed
    by ``x``).

    Raises:
        ValueError: a ``-Nx`` suffix whose N is not a whole number >= 1 (``ppo-0x``, ``ppo-1.5x``).

    >>> arm_spec("cory-wo-kt-4x"), arm_spec("cory-wo-rex")
    (('cory-wo-kt', 4), ('cory-wo-rex', 1))
    """
    base, dash, suffix = arm.rpartition("-")
    factor = suffix[:-1]
    if not dash or not suffix.endswith("x") or not re.fullmatch(r"[0-9.eE+-]+", factor):
        return arm, 1
    if not (factor.isascii() and factor.isdigit()) or int(factor) < 1:
        raise ValueError(f"arm {arm!r}: the episode factor of a -Nx arm must be a whole number >= 1, got "
                         f"{factor!r}; write e.g. {base}-4x")
    return base, int(factor)


def rung_flags_read(rung_flags: Sequence[str], arm_flags: Sequence[str]) -> list[str]:
    """The rung's flags without those naming another learner's own options than the arm's learner reads (a rung's
    PPO-only settings in a GRPO arm): the rung's flags are every arm's settings, like a preset, while `cory train`
    refuses another learner's option given as a flag.

    >>> rung_flags_read(["--batch_size", "8", "--whiten_rewards", "true"], ["--learner", "grpo"])
    ['--batch_size', '8']
    """
    import dataclasses as dc

    from trainers.config.parser import first_pass
    from trainers.config import option_fields
    from trainers.learning.registry import learner_spec

    learner = first_pass([*rung_flags, *arm_flags]).learner or "ppo"
    others = set(option_fields()) - {f.name for f in dc.fields(learner_spec(learner).config_class)}
    out: list[str] = []
    for i, arg in enumerate(rung_flags):
        name = arg.removeprefix("--").split("=")[0]
        dropped = arg.startswith("--") and name in others
        value_of_dropped = (i > 0 and not arg.startswith("--") and rung_flags[i - 1].startswith("--")
                            and rung_flags[i - 1].removeprefix("--").split("=")[0] in others)
        if not (dropped or value_of_dropped):
            out.append(arg)
    return out


def arm_configs(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = (), *,
                resume: bool = False):
    """(`RunConfigs`, iterations) of one of this project's arms on a rung: the rung's flags, then the arm's (a
    ``-2x`` arm's base arm's), then `flags`; one torch thread; ``iterations = episodes // batch_size`` (at least 1;
    `episodes` is this arm's own budget); `run_dir` replaced (or, with `resume`, continued from its latest
    checkpoint); the rung's ``$CORY_SHARED_DATA/NAME`` is the data file's path (`benchmarks.paths.resolved_flags`:
    FileNotFoundError naming the setting when it is missing)."""
    from trainers.cli.bench import arm_flags
    from trainers.config.parser import parse_train_args

    own = [*arm_flags(arm_spec(arm)[0]), *flags]
    flags = resolved_flags([*rung_flags_read(RUNGS[rung_name].flags, own), *own])
    configs = parse_train_args(  # influence is measured when asked: --flags --eval_influence true
        ["--eval_influence", "false", *flags, "--seed", str(seed), "--output_dir", run_dir,
         "--resume" if resume else "--overwrite", "true", "--tensorboard", "false", "--log_samples", "0",
         "--torch_threads", "1", "--checkpoint_every_minutes", "0", "--num_iterations", "1"])
    iterations = max(1, episodes // configs.update.batch_size)
    return replace(configs, run=replace(configs.run, num_iterations=iterations)), iterations
