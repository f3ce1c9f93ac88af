import json

import pytest

from trainers.evaluation.episodes import distinct_n
from trainers.loop.metrics import SAMPLES_FILE, MetricsLogger, read_jsonl, truncate_jsonl


def test_distinct_n_hand_computed():
    texts = ["a b a b", "a b c"]
    # unigrams: a b a b a b c -> 3 unique / 7
    assert distinct_n(texts, 1) == pytest.approx(3 / 7)
    # bigrams: ab ba ab ab bc -> {ab, ba, bc} 3 / 5
    assert distinct_n(texts, 2) == pytest.approx(3 / 5)
    assert distinct_n(["one"], 2) == 0.0
    with pytest.raises(ValueError):
        distinct_n(texts, 0)


def test_metrics_logger_writes_and_truncates(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=True, config_text="a: 1")
    for it in range(5):
        log.log(it, {"pioneer/kl": float(it)})
    log.log_samples(0, [{"query": "q", "pioneer_response": "ünïcode 🎬"}])
    log.close()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4]
    assert any(p.name.startswith("events") for p in (tmp_path / "tensorboard").iterdir())
    truncate_jsonl(tmp_path / "metrics.jsonl", 2)
    assert [r["iteration"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    sample = json.loads((tmp_path / "samples.jsonl").read_text(encoding="utf-8"))
    assert sample["pioneer_response"] == "ünïcode 🎬"


def test_read_jsonl_ignores_torn_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1, "x"', encoding="utf-8")
    assert read_jsonl(path) == [{"iteration": 0}]


def test_plots_never_switch_matplotlibs_backend(tmp_path):
    """Importing the CLI (plots and bench included) or writing the PNGs leaves an interactive session's backend."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    MetricsLogger(tmp_path / "run", tensorboard=False).log(0, {"pioneer/task_reward": 0.5, "pioneer/kl": 0.1,
                                                               "pioneer/combined_reward": 0.4})
    code = ("import matplotlib; matplotlib.use('svg'); "
            "import trainers.cli, trainers.cli.plot, trainers.cli.bench, trainers.loop.plots; "
            "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
            f"paths = trainers.loop.plots.plot_runs([{str(tmp_path / 'run')!r}], {str(tmp_path)!r}); "
            "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
            "print(*[p.name for p in paths])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["curves.png", "pareto.png"]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_samples_record_which_model_sat_in_which_seat(tiny_run):
    from trainers.loop.cory import CORYTrainer

    trainer = CORYTrainer(tiny_run("seats", num_iterations=2, role_exchange_period=1, log_samples=2))
    trainer.train()
    rows = read_jsonl(trainer.output_dir / SAMPLES_FILE)
    seated = {(r["iteration"], r["pioneer_model"], r["observer_model"]) for r in rows}
    assert seated == {(0, "llm1", "llm2"), (1, "llm2", "llm1")}  # role exchange after iteration 0
