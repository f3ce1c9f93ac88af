"""`cory` command line as subprocesses on the tiny model, and argument resolution in-process."""

from __future__ import annotations

import json
import logging
import re
import os
import subprocess
import sys

import pytest
import yaml

from trainers.cli.launch import launch_command
from trainers.config.parser import first_pass, load_yaml_config, parse_train_args

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def cory(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "trainers.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"cory {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def cory_here(capsys, *args, check=True) -> tuple[int, str, str]:
    """`cory ARGS` in this process (`trainers.cli.main`): (exit status, stdout, stderr). The same command without a
    new interpreter's seconds of imports; `cory` stays where the test needs a process of its own (``python -m``, the
    log lines a process prints on stderr, a later process reproducing a run)."""
    from trainers.cli import main

    status = main(list(args))
    out, err = capsys.readouterr()
    if check and status != 0:
        raise AssertionError(f"cory {' '.join(args)} failed ({status}):\n{err[-3000:]}")
    return status, out, err


def test_train_eval_plot_round_trip(tmp_path):
    run = tmp_path / "run"
    cory("train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "2",
         "--role_exchange_period", "1", "--torch_threads", "1")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[0]["cory/role_exchange"] == 1.0 and rows[1]["cory/pioneer_is_llm1"] == 0.0
    assert (run / "samples.jsonl").exists() and (run / "config.yaml").exists()
    assert any((run / "tensorboard").iterdir())
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["num_iterations"] == 2 and saved["model"] == "tiny"

    proc = cory("eval", str(run), "--episodes", "2")
    written = run / "eval-llm1-iter-000001.json"  # beside checkpoints/, which rotation prunes
    assert proc.stdout.strip().splitlines()[-1] == f"wrote {written}"
    result = json.loads(written.read_text())
    assert result["model_name"] == "llm1"  # two exchanges: llm1 is back in the pioneer seat
    for key in ("task_reward", "kl", "combined_reward", "distinct_1", "distinct_2", "response_len"):
        assert key in result["after"] and key in proc.stdout
    # the tiny preset has no held-out slice: its evaluation says it reads training queries
    assert result["after"]["num_queries"] == 2 and "llm1 in the pioneer seat, task reward" in proc.stdout
    assert "train-split queries (not held out)" in proc.stdout

    cory("plot", str(run), "--out", str(tmp_path / "plots"))
    for name in ("curves.png", "pareto.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 1000


@pytest.mark.parametrize("flags, option", [(["--lora_alpha", "0", "--use_lora", "true"], "lora_alpha"),
                                           (["--learning_rate", "inf"], "learning_rate"),
                                           (["--config", "INF_YAML"], "learning_rate")])
def test_a_bad_number_is_one_line_before_any_folder_exists(tmp_path, capsys, caplog, flags, option):
    """--lora_alpha 0 trained 4 iterations with KL exactly 0; --learning_rate inf died at
    iteration 0 and left a folder that blocked a re-run."""
    (tmp_path / "inf.yaml").write_text("learning_rate: .inf\n")
    flags = [str(tmp_path / "inf.yaml") if f == "INF_YAML" else f for f in flags]
    run = tmp_path / "run"
    caplog.set_level(logging.INFO)  # a `cory` process prints its log records (INFO and up) on stderr
    status, _, err = cory_here(capsys, "train", "--preset", "tiny", "--output_dir", str(run), *flags, check=False)
    assert status == 2 and not run.exists()
    assert len(err.strip().splitlines()) == 1 and f"{option}=" in err and not caplog.records


def test_existing_run_refused_then_resumed(tmp_path, capsys):
    run = tmp_path / "run"
    cory_here(capsys, "train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "1",
              "--torch_threads", "1")
    status, _, err = cory_here(capsys, "train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "1",
                               check=False)
    assert status == 2 and "--resume" in err and "--overwrite" in err
    cory_here(capsys, "train", "--config", str(run / "config.yaml"), "--num_iterations", "2", "--resume",
              "--torch_threads", "1")
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == [0, 1]


def test_precedence_flag_over_yaml_over_preset(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"num_iterations": 7, "learning_rate": 0.01, "batch_size": 8}))
    configs = parse_train_args(["--preset", "tiny", "--config", str(cfg), "--learning_rate", "0.02"])
    assert configs.model.model == "tiny"  # preset
    assert configs.run.num_iterations == 7 and configs.update.batch_size == 8  # YAML over preset
    assert configs.update.learning_rate == 0.02  # flag over YAML
    assert configs.env.max_new_tokens == 6  # preset value kept
    configs = parse_train_args(["--role_exchange_period", "3", "--knowledge_transfer", "false", "--temperature", "0.5"])
    assert configs.run.role_exchange_period == 3 and configs.env.knowledge_transfer is False
    assert configs.sampling.temperature == 0.5 and configs.model.model == "smollm2-135m-instruct"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "huge"], "valid presets"),
        (["--no_such_option", "1"], "valid options"),
        (["--batch_size", "10", "--mini_batch_size", "4"], "divisible"),
        (["--role_exchange_period", "-1"], "role_exchange_period"),
    ],
)
def test_bad_train_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        parse_train_args(args)


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_num_processes_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=f"^--num_processes='{value}' is invalid: use an integer >= 1$"):
        first_pass(["--preset", "tiny", "--num_processes", value])


def test_parse_train_args_refuses_num_processes_it_cannot_honour():
    with pytest.raises(ValueError, match="--num_processes 2 is handled by `cory train`"):
        parse_train_args(["--preset", "tiny", "--num_processes", "2"])
    assert parse_train_args(["--preset", "tiny", "--num_processes", "1"]).model.model == "tiny"


def test_num_processes_inside_a_launch_of_another_size_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    status, _, err = cory_here(capsys, "train", "--preset", "tiny", "--num_processes", "2", check=False)
    assert status == 2 and "inside a launch of 3 processes" in err


def test_num_processes_is_split_off_and_launches_accelerate():
    first = first_pass(["--preset", "tiny", "--num_processes", "4", "--seed", "1"])
    n, rest = first.num_processes, first.rest
    assert (n, rest) == (4, ["--preset", "tiny", "--seed", "1"])
    assert (first.preset, first.learner) == ("tiny", None)
    assert first_pass(["--preset", "tiny", "--num_processes=2"]).rest == ["--preset", "tiny"]
    assert first_pass(["--preset", "tiny"]).num_processes == 1
    cmd = launch_command(4, ["-m", "trainers.cli", "train", *rest], port=29511)
    assert cmd[1:4] == ["-m", "trainers.cli.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "4" and cmd[cmd.index("--main_process_port") + 1] == "29511"
    assert cmd[cmd.index("trainers.cli"):] == ["trainers.cli", "train", "--preset", "tiny", "--seed", "1"]


def test_yaml_with_wrong_type_or_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: [1, 2]\n")
    with pytest.raises(ValueError, match="batch_size must be"):
        load_yaml_config(bad)
    bad.write_text("bach_size: 4\n")
    with pytest.raises(ValueError, match="unknown option.*bach_size"):
        load_yaml_config(bad)
    with pytest.raises(FileNotFoundError):
        load_yaml_config(tmp_path / "missing.yaml")
    bad.write_text("learning_rate: 1e-3\nlr_text: x\n".replace("lr_text: x\n", ""))
    assert load_yaml_config(bad) == {"learning_rate": 0.001}  # YAML 1.1 reads 1e-3 as text


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    status, _, err = cory_here(capsys, "train", "--preset", "nope", check=False)
    assert status == 2 and "valid presets" in err and "Traceback" not in err
    status, _, err = cory_here(capsys, "frobnicate", check=False)
    assert status == 2 and "valid commands" in err
    status, _, err = cory_here(capsys, "train", "--preset", "tiny", "--data_path", str(tmp_path / "missing.csv"),
                               "--output_dir", str(tmp_path / "r"), check=False)
    assert status == 2 and "missing.csv" in err


def test_bench_two_arms_two_seeds(tmp_path):
    out = tmp_path / "bench"
    proc = cory("bench", "--arms", "cory", "ppo", "--seeds", "0", "1", "--output_dir", str(out),
                "--num_iterations", "1", "--", "--preset", "tiny", "--torch_threads", "1")
    table = (out / "results.md").read_text()
    assert "| cory | 2 |" in table and "| ppo | 2 |" in table and "±" in table
    assert (out / "curves.png").exists() and (out / "pareto.png").exists()
    assert "task reward" in proc.stdout


def test_eval_uses_the_runs_held_out_reviews(tmp_path, capsys):
    """A run trained with --heldout_fraction evaluates on the held-out side; the two sides share no review."""
    from cory_env import EnvConfig, make_task

    run = tmp_path / "held"
    cory_here(capsys, "train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "1",
              "--heldout_fraction", "0.3", "--torch_threads", "1", "--tensorboard", "false")
    cory_here(capsys, "eval", str(run), "--episodes", "2", "--out", str(tmp_path / "eval.json"))
    result = json.loads((tmp_path / "eval.json").read_text())
    assert (result["query_split"], result["heldout_fraction"]) == ("test", 0.3)
    sides = {}
    for split in ("train", "test"):
        task = make_task("imdb", EnvConfig(heldout_fraction=0.3, query_split=split), None)
        sides[split] = {r["query"] for r in task.records}
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]


def _help(capsys, monkeypatch, *args) -> str:
    """What `cory ARGS --help` prints (exit 0), at the 80 columns a `cory` process writing into a pipe wraps to."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exited:
        cory_here(capsys, *args, "--help")
    assert exited.value.code in (0, None)
    return capsys.readouterr().out


def test_options_are_never_abbreviated_and_help_groups_them(capsys, monkeypatch):
    """argparse took --num_iteration for --num_iterations; --help was one flat list of 378 lines."""
    with pytest.raises(ValueError, match=r"--num_iteration: did you mean --num_iterations\?"):
        parse_train_args(["--preset", "tiny", "--num_iteration", "2"])
    with pytest.raises(ValueError, match="unknown option"):
        parse_train_args(["--pres", "tiny"])
    short = _help(capsys, monkeypatch, "train")  # what a first run changes, the learner's and task's own options
    assert len(short.splitlines()) <= 150 and "--help_all lists all" in short
    assert re.search(r"^  --learning_rate", short, flags=re.M) and not re.search(r"^  --top_p", short, flags=re.M)
    help_text = _help(capsys, monkeypatch, "train", "--help_all")
    groups = ["run options (CORYConfig)", "model options (ModelConfig)", "env options read by task 'imdb' (EnvConfig)",
              "IMDB task options (--task imdb)", "update options read by learner 'ppo' (PPOConfig)",
              "sampling options (SamplingConfig)"]
    where = [help_text.index(g) for g in groups]
    assert where == sorted(where) and help_text.index("--preset PRESET") < where[0]
    flag = lambda text, name: re.search(rf"^  --{name}\b", text, flags=re.M)  # noqa: E731
    assert where[3] < flag(help_text, "min_review_chars").start() < where[4] < flag(help_text, "gamma").start()
    assert flag(help_text, "group_size") is None  # what the default run (ppo) does not read is not shown
    # the chosen learner and task decide the groups and the options shown (their specs)
    grpo = _help(capsys, monkeypatch, "train", "--learner", "grpo", "--task", "gsm8k")
    assert "update options read by learner 'grpo' (GRPOConfig)" in grpo
    assert flag(grpo, "group_size") and flag(grpo, "learning_rate") and flag(grpo, "data_path")
    for unread in ("gamma", "vf_coef", "whiten_rewards", "min_review_chars", "reward", "heldout_fraction"):
        assert flag(grpo, unread) is None, unread


def test_plot_of_a_missing_run_leaves_no_folder(tmp_path, capsys):
    status, _, err = cory_here(capsys, "plot", str(tmp_path / "missing"), check=False)
    assert status == 2 and "metrics.jsonl" in err
    assert not (tmp_path / "missing").exists()


def test_main_job_output_log_lines_and_eval_json(tmp_path):
    """The before/after line is the last thing printed, and each evaluation logs its reward as it ends; log lines
    are not glued onto the progress bar;
    the hub probe's fallback line prints once (training and both evaluations read one resolved source);
    eval.json's combined reward uses the run's beta, as `cory eval` does."""
    run = tmp_path / "main"
    proc = cory("train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "2", "--data_path", "hub",
                "--heldout_fraction", "0.2", "--eval_episodes", "4", "--adap_kl_ctrl", "false",
                "--init_kl_coef", "0.3", "--torch_threads", "1", "--tensorboard", "false")
    assert "in the pioneer seat, held-out task reward on 4 episodes" in proc.stdout.strip().splitlines()[-1]
    assert proc.stderr.count("unreachable") == 1
    import re

    assert not re.search(r"\][ \t]*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", proc.stderr), proc.stderr[-2000:]
    ran = json.loads((run / "eval.json").read_text())
    after = ran["after"]
    assert after["combined_reward"] == pytest.approx(after["task_reward"] - 0.3 * after["kl"])
    for when in ("before", "after"):  # each evaluation says its result as it ends, not only the last line
        assert f"held-out reward {when} training: {ran[when]['reward']:.3f}, KL to the reference" in proc.stderr


@pytest.mark.parametrize("args, message", [(["--eta", "inf"], "--eta=inf is invalid: use a finite number"),
                                           (["--episodes", "0"], "--episodes=0 is invalid: use an integer >= 1"),
                                           (["--seed", "-1"], "--seed=-1 is invalid: use an integer >= 0"),
                                           (["--episode", "1"], "not used by the HfArgumentParser: ['--episode'"),
                                           (["--model_name", ""], "--model_name '' names no model")])
def test_eval_numbers_and_abbreviations_are_refused_before_any_model_loads(tmp_path, capsys, args, message):
    from trainers.cli import main

    assert main(["eval", str(tmp_path / "no-run"), *args]) == 2
    assert message in capsys.readouterr().err


def test_cory_eval_reproduces_the_runs_own_evaluation_by_default(tmp_path, capsys):
    """`cory eval RUN` with no option is the run's own held-out evaluation: the same before and after as the
    training run printed (same queries, seed, episodes and sampling), and the same line."""
    run = tmp_path / "own"
    _, trained, _ = cory_here(capsys, "train", "--preset", "tiny", "--output_dir", str(run), "--num_iterations", "2",
                              "--heldout_fraction", "0.2", "--eval_episodes", "8", "--torch_threads", "1")
    evaluated = cory("eval", str(run), "--torch_threads", "1")  # a later process, as a user runs it
    line = lambda text: next(l for l in text.splitlines() if "held-out task reward" in l)  # noqa: E731,E741
    assert line(evaluated.stdout) == line(trained)
    ran = json.loads((run / "eval.json").read_text())
    (written,) = run.glob("eval-llm*-iter-000001.json")
    again = json.loads(written.read_text())
    assert again["after"]["rewards"] == ran["after"]["rewards"] and again["before"]["rewards"] == ran["before"]["rewards"]
    assert again["gain_sem"] == ran["gain_sem"] and again["distinct_queries"] == ran["distinct_queries"]


@pytest.mark.parametrize("argv", [[], ["--preset", "imdb-quick"], ["--preset", "tiny-vocab", "--learner", "mappo"],
                                  ["--task", "gsm8k", "--learner", "grpo"]])
def test_every_flag_shows_its_fields_help_and_the_default_this_run_has(argv):
    """`cory train --help` tells the truth: every shown option's help is its field's, its default the value the run
    would take (the preset's when a preset sets it, not the built-in one), each --no_X switch says what it sets (it
    used to carry X's description and "(default: False)"), and parsing the same arguments gives those defaults."""
    import argparse
    import dataclasses

    from trainers.config.parser import build_train_parser

    parser, classes, _ = build_train_parser(argv)
    configs = parse_train_args(argv)
    values = configs.to_flat()
    fields = {f.name: f for cls in classes for f in dataclasses.fields(cls)}
    shown = {a.dest: a for a in parser._actions if a.help != argparse.SUPPRESS and a.dest in fields
             and not a.option_strings[0].startswith("--no_")}
    assert shown, "no option shown"
    given = {a.lstrip("-") for a in argv if a.startswith("--")}
    for dest, action in shown.items():
        assert action.help.startswith(fields[dest].metadata["help"][:60]), dest
        if dest not in given:
            assert action.default == values[dest], \
                f"--{dest} shows default {action.default!r}, the run has {values[dest]!r}"
    for action in parser._actions:
        if action.option_strings and action.option_strings[0].startswith("--no_"):
            assert action.help == f"Set {action.dest} to false (the same as --{action.dest} false)."
            assert action.default is argparse.SUPPRESS
    text = parser.format_help()
    for switch in ("--adap_kl_ctrl", "--no_adap_kl_ctrl"):  # both twins in the help, not only in the usage line
        assert f"\n  {switch}" in text


def test_train_help_imports_no_model_or_training_code():
    """`cory train --help` spent most of its start-up importing the model loading code (`agents.loading`:
    transformers' model classes, accelerate), `datasets` and the training loop, none of which the help reads; now
    it imports the option dataclasses only. A new process, so that nothing another test imported counts."""
    heavy = ("agents.loading", "agents.policy", "trainers.loop.cory", "transformers.generation",
             "transformers.models.auto.configuration_auto", "datasets", "accelerate", "scipy", "pandas")
    code = ("import sys\nfrom trainers.cli import main\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in %r if m in sys.modules), file=sys.stderr)" % (heavy,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr[-2000:]
    assert proc.returncode == 0 and proc.stdout.startswith("usage: cory train"), proc.stderr[-2000:]
