"""Security: loading never executes code, remote code is off by default, text is never evaluated, no shell.

* checkpoints and saved agents load through safetensors or ``torch.load(weights_only=True)`` only: a pickle whose
  ``__reduce__`` would run code is refused with `CheckpointError` and its payload never runs;
* ``trust_remote_code`` is False unless the caller sets it;
* dataset rows and model outputs are data: nothing in the packages calls eval/exec, unpickles, loads YAML unsafely,
  or starts a shell, and a path full of shell syntax is used literally.
"""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from agents import LLMAgent, loading
from cory_env import hub
from cory_env import raw_env
from cory_env.tasks.base import Task
from trainers.config import RunConfigs
from trainers.loop.checkpoint import CheckpointError, latest_checkpoint
from trainers.loop.cory import CORYTrainer

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cory_env", "agents", "trainers")


class _Payload:
    """Unpickling this creates `marker` (a stand-in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def _tiny_configs(output_dir: Path, **overrides) -> RunConfigs:
    return RunConfigs.from_flat({"model": "tiny", "output_dir": str(output_dir), "num_iterations": 1,
                                 "role_exchange_period": 1, "tensorboard": False, "log_samples": 1, "torch_threads": 1,
                                 "batch_size": 2, "mini_batch_size": 2, "ppo_epochs": 1, "min_new_tokens": 1,
                                 "max_new_tokens": 2, **overrides}, strict=True)


def test_payload_is_live_when_unpickled_unsafely(tmp_path):
    """Control: the payload really runs code when loaded without weights_only (so the refusals below mean it)."""
    torch.save(_Payload(tmp_path / "ran"), tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("target", ["llm1/learner.pt", "llm2/learner.pt", "rng.pt"])
def test_malicious_pickle_in_checkpoint_is_refused_and_never_runs(tmp_path, target):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    CORYTrainer(_tiny_configs(run)).train()
    torch.save(_Payload(marker), latest_checkpoint(run) / target)
    with pytest.raises(CheckpointError, match=rf"refusing to load .*{target.split('/')[-1]}.*weights_only"):
        CORYTrainer(_tiny_configs(run, resume=True, num_iterations=2))
    assert not marker.exists()


def test_agent_folder_with_only_pickled_weights_is_refused(tmp_path, tiny_tok, tiny_model):
    folder, marker = tmp_path / "agent", tmp_path / "pwned"
    LLMAgent(tiny_model, tiny_tok).save_pretrained(folder)
    for weights in folder.glob("*.safetensors"):
        if weights.name != "value_head.safetensors":
            weights.unlink()
    torch.save(_Payload(marker), folder / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="no safetensors model weights"):
        LLMAgent.from_pretrained(folder)
    assert not marker.exists()


def test_trust_remote_code_is_off_unless_set(tmp_path, tiny_tok, tiny_model, monkeypatch):
    for fn in (loading.load_model_and_tokenizer, loading.load_tokenizer):
        assert inspect.signature(fn).parameters["trust_remote_code"].default is False
    tiny_tok.save_pretrained(tmp_path / "m")
    tiny_model.save_pretrained(tmp_path / "m")
    seen = []
    real = loading.load_pretrained

    def spy(auto_cls, name_or_path, local, hub, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        return real(auto_cls, name_or_path, local, hub, **kwargs)

    monkeypatch.setattr(loading, "load_pretrained", spy)  # the model's load
    monkeypatch.setattr(hub, "load_pretrained", spy)  # the tokenizer's (`load_tokenizer`)
    loading.load_model_and_tokenizer(str(tmp_path / "m"))
    assert seen == [False, False]


CODE_TEXT = "__import__('os').mkdir({marker!r}) {{{{ {marker!r} }}}} $(mkdir {marker}) `mkdir {marker}` <<2+2>>"


def test_dataset_text_and_model_output_are_never_evaluated(tmp_path, tiny_tok, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    text = CODE_TEXT.format(marker=str(marker))
    task = Task(name="code", records=[{"query": text, "answer": text}], reward_fn="vader",
                observer_template="{query}{response} {query}")
    env = raw_env(tokenizer=tiny_tok, task=task, min_new_tokens=4, max_new_tokens=4, context_len=256)
    env.reset(seed=0)
    code_ids = tiny_tok.encode(" __import__('os')", add_special_tokens=False)
    for i in range(8):  # both seats "answer" with code
        env.step(code_ids[i % len(code_ids)])
    assert np.isfinite(env.rewards["pioneer"])
    assert not marker.exists() and not list(tmp_path.iterdir())


def test_gsm8k_answer_extraction_does_not_evaluate(tmp_path):
    answers = pytest.importorskip("cory_env.tasks.gsm8k_answers")
    marker = tmp_path / "pwned"
    text = CODE_TEXT.format(marker=str(marker)) + " #### __import__('os')"
    answers.extract_answer(text)
    assert not marker.exists()


def test_output_dir_with_shell_syntax_is_used_literally(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    weird = tmp_path / "run; mkdir pwned1 && $(mkdir pwned2) `mkdir pwned3` | mkdir pwned4 'x\"y"
    CORYTrainer(_tiny_configs(weird)).train()
    assert (weird / "checkpoints" / "latest").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [weird.name]


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            yield node, owner, name


def _kw(node: ast.Call, name: str):
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value
    return None


def test_packages_never_evaluate_unpickle_or_use_a_shell():
    problems = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node, owner, name in _calls(tree):
                where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
                if isinstance(node.func, ast.Name) and name in {"eval", "exec", "compile", "__import__"}:
                    problems.append(f"{where}: {name}()")
                if owner == "os" and (name in {"system", "popen"} or name.startswith(("spawn", "exec"))):
                    problems.append(f"{where}: os.{name}()")
                if owner in {"pickle", "dill", "cloudpickle", "marshal", "shelve"} and name.startswith("load"):
                    problems.append(f"{where}: {owner}.{name}()")
                if owner == "yaml" and name in {"load", "load_all", "unsafe_load", "full_load"}:
                    problems.append(f"{where}: yaml.{name}() (use yaml.safe_load)")
                if owner == "torch" and name == "load":
                    flag = _kw(node, "weights_only")
                    if not (isinstance(flag, ast.Constant) and flag.value is True):
                        problems.append(f"{where}: torch.load without weights_only=True")
                shell = _kw(node, "shell")
                if isinstance(shell, ast.Constant) and shell.value:
                    problems.append(f"{where}: shell=True")
                remote = _kw(node, "trust_remote_code")
                if isinstance(remote, ast.Constant) and remote.value is True:
                    problems.append(f"{where}: trust_remote_code=True")
    assert not problems, "unsafe calls:\n" + "\n".join(problems)
