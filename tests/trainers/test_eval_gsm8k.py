"""GSM8K pass@k evaluation: the batched sampling loop with a scripted agent, and `cory eval --task gsm8k` end to end
on the tiny model (base model and checkpoint), with its bad inputs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cory_env import EnvConfig
from cory_env.tasks.gsm8k import make_gsm8k_task
from trainers.cli import main as cory_main
from trainers.cli.eval import run_eval
from trainers.evaluation.passk import PAPER_EVAL_SAMPLING, evaluate_pass_at_k, pass_at_k_table

GOLDS = ["2", "7", "1000", "5", "9"]


def _write_problems(path, golds=GOLDS):
    rows = [{"question": f"Problem {i}: how many?", "answer": f"Work.\n#### {gold}"} for i, gold in enumerate(golds)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


class ScriptedAgent:
    """Answers "The answer is N" then EOS; N is the gold when `script[problem][sample]` is True, else 999.

    The problem is read from the prompt; the sample index is the row's position inside its problem's block of
    `num_samples` consecutive rows (the layout `evaluate_pass_at_k` promises).
    """

    def __init__(self, tokenizer, script, golds, num_samples):
        self.tokenizer, self.script, self.golds, self.n = tokenizer, script, golds, num_samples
        self.rows = None
        self.calls = []

    def reset_cache(self):
        self.rows = None

    def act_batch(self, obs, generator=None):
        ids, mask = obs["input_ids"], obs["attention_mask"]
        if self.rows is None:
            self.calls.append(ids.shape[0])
            self.rows, self.t = [], 0
            for i in range(ids.shape[0]):
                prompt = self.tokenizer.decode(ids[i][mask[i] == 1])
                problem = int(re.findall(r"Problem (\d+)", prompt)[-1])
                correct = self.script[problem][i % self.n]
                text = f" The answer is {self.golds[problem] if correct else 999}."
                self.rows.append(self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        actions = [row[self.t] if self.t < len(row) else self.tokenizer.eos_token_id for row in self.rows]
        self.t += 1
        return np.array(actions, dtype=np.int64)


def test_pass_at_k_of_a_scripted_agent(tmp_path, tiny_tok):
    script = [
        [True, False, False, False, False],
        [False, False, False, False, False],
        [False, False, True, True, False],
        [True] * 5,
        [False, False, False, False, True],
    ]
    path = _write_problems(tmp_path / "test.jsonl")
    config = EnvConfig(task="gsm8k", data_path=str(path), min_new_tokens=16, max_new_tokens=16)
    task = make_gsm8k_task(config, tiny_tok, split="test", one_shot=False)
    agent = ScriptedAgent(tiny_tok, script, GOLDS, num_samples=5)
    partial = []
    result = evaluate_pass_at_k(agent, task, num_samples=5, problems_per_batch=2, seed=0, callback=partial.append)

    assert agent.calls == [10, 10, 5]  # 2 + 2 + 1 problems x 5 samples per env batch
    assert result["correct"] == script and result["golds"] == GOLDS
    assert result["pass_at_k"] == pytest.approx(pass_at_k_table(script))
    assert result["pass_at_k_first"] == pytest.approx({1: 0.4, 2: 0.4, 3: 0.6, 4: 0.6, 5: 0.8})
    assert result["accuracy"] == pytest.approx(9 / 25) and result["format_rate"] == 1.0
    assert result["predictions"][1] == ["999"] * 5 and result["predictions"][2][2] == "1000"
    assert [p["num_problems"] for p in partial] == [2, 4, 5] and not partial[0]["finished"] and result["finished"]


def test_evaluate_pass_at_k_bad_inputs(tmp_path, tiny_tok):
    path = _write_problems(tmp_path / "test.jsonl")
    task = make_gsm8k_task(EnvConfig(task="gsm8k", data_path=str(path)), tiny_tok, split="test")
    agent = ScriptedAgent(tiny_tok, [[True] * 5] * 5, GOLDS, num_samples=5)
    with pytest.raises(ValueError, match=r"^ks=\[1, 2, 3\] is invalid: use budgets in \[1, num_samples=2\]"):
        evaluate_pass_at_k(agent, task, num_samples=2, ks=(1, 2, 3))
    with pytest.raises(ValueError, match="no 'gold'"):
        evaluate_pass_at_k(agent, task, records=[{"query": "Problem 0?"}])
    with pytest.raises(ValueError, match="^problems_per_batch=0 is invalid: use an integer >= 1$"):
        evaluate_pass_at_k(agent, task, problems_per_batch=0)


def test_cory_eval_gsm8k_base_model_end_to_end(tmp_path, capsys):
    path = _write_problems(tmp_path / "test.jsonl")
    out = tmp_path / "eval.json"
    assert run_eval(["--task", "gsm8k", "--model", "tiny", "--data_path", str(path), "--limit", "4",
                     "--max_new_tokens", "8", "--problems_per_batch", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    for key in ("pass_at_k", "pass_at_k_first"):
        values = [result[key][str(k)] for k in range(1, 6)]
        assert list(result[key]) == ["1", "2", "3", "4", "5"]
        assert all(0.0 <= v <= 1.0 for v in values) and values == sorted(values)
    assert result["num_problems"] == 4 and result["num_samples"] == 5 and result["finished"]
    assert np.array(result["correct"]).shape == (4, 5) and result["response_len"] <= 8
    assert result["sampling"] == {"temperature": 1.0, "top_k": 10, "top_p": 0.7, "repetition_penalty": 1.1}
    assert result["sampling"] == {k: getattr(PAPER_EVAL_SAMPLING, k) for k in result["sampling"]}
    table = capsys.readouterr().out
    assert "GSM8K pass@k on 4 problems x 5 samples" in table and "k  unbiased  first-k" in table


def test_cory_eval_gsm8k_on_a_checkpoint(tmp_path, tiny_run):
    from trainers.loop.cory import CORYTrainer

    configs = tiny_run(num_iterations=1)
    CORYTrainer(configs).train()  # an IMDB run; its pioneer is then evaluated on GSM8K
    path = _write_problems(tmp_path / "test.jsonl")
    assert run_eval([configs.run.output_dir, "--task", "gsm8k", "--data_path", str(path), "--limit", "2",
                     "--num_samples", "3", "--max_k", "3", "--max_new_tokens", "6"]) == 0
    outs = list((tmp_path / "run").glob("eval-llm*-gsm8k-iter-*.json"))
    assert len(outs) == 1
    result = json.loads(outs[0].read_text(encoding="utf-8"))
    assert list(result["pass_at_k"]) == ["1", "2", "3"] and result["model_name"] in ("llm1", "llm2")
    assert result["checkpoint"] == str(tmp_path / "run" / "checkpoints" / outs[0].stem.split("-gsm8k-")[1])


def test_missing_data_file_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=r"--data_path .*nope.jsonl.* does not exist.*gsm8k_test.jsonl"):
        run_eval(["--task", "gsm8k", "--model", "tiny", "--data_path", str(missing)])
    assert cory_main(["eval", "--task", "gsm8k", "--model", "tiny", "--data_path", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        ([], "give a CHECKPOINT"),
        (["--model", "tiny", "--task", "imdb"], "evaluates GSM8K only"),
        (["runs/x", "--model", "tiny"], "not both"),
    ],
)
def test_cli_argument_errors(argv, match):
    with pytest.raises(ValueError, match=match):
        run_eval(argv)


def test_max_k_above_num_samples(tmp_path):
    path = _write_problems(tmp_path / "test.jsonl")
    with pytest.raises(ValueError, match="^--max_k=5 is invalid: use an integer <= 3; at most --num_samples 3"):
        run_eval(["--task", "gsm8k", "--model", "tiny", "--data_path", str(path), "--num_samples", "3"])
