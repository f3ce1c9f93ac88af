"""Every path option says what is wrong with the path it was given (missing, a folder where a file is expected, a
file where a folder is, not in its format) and the fix, in one line with exit 2: a folder given as --data_path used
to be reported as "not found"."""

from __future__ import annotations

import pytest

from trainers.cli import main

TINY = ["--model", "tiny", "--num_iterations", "1", "--batch_size", "2", "--mini_batch_size", "2",
        "--min_new_tokens", "2", "--max_new_tokens", "3", "--context_len", "64", "--tensorboard", "false"]


def _run(argv, capsys) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("task, fix", [("imdb", "pass an existing CSV/JSONL/Parquet file"),
                                       ("gsm8k", "pass a JSONL file, or 'hub:train'")])
def test_data_path(tmp_path, capsys, task, fix):
    args = ["train", *TINY, "--task", task, "--output_dir", str(tmp_path / "r"), "--data_path"]
    err = _run([*args, str(tmp_path)], capsys)
    assert f"{str(tmp_path)!r} is a folder, not a file; {fix}" in err
    err = _run([*args, str(tmp_path / "missing.csv")], capsys)
    assert f"{str(tmp_path / 'missing.csv')!r} does not exist; {fix}" in err
    (tmp_path / "queries.txt").write_text("a\nb\n")
    err = _run([*args, str(tmp_path / "queries.txt")], capsys) if task == "imdb" else "unsupported suffix"
    assert "unsupported suffix" in err
    assert not (tmp_path / "r").exists()


def test_config_file(tmp_path, capsys):
    err = _run(["train", "--config", str(tmp_path)], capsys)
    assert "--config" in err and "is a folder, not a file; pass a YAML file" in err
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    assert "is not valid YAML" in _run(["train", "--config", str(tmp_path / "bad.yaml")], capsys)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert "expected a mapping of option: value, got list" in _run(["train", "--config",
                                                                     str(tmp_path / "list.yaml")], capsys)


def test_eval_and_plot_paths(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    err = _run(["eval", str(tmp_path / "file")], capsys)
    assert "checkpoint" in err and "is a file, not a folder; give a run directory" in err
    err = _run(["eval", str(tmp_path / "nothing")], capsys)
    assert "does not exist" in err
    err = _run(["eval", "--task", "gsm8k", "--model", "tiny", "--data_path", str(tmp_path)], capsys)
    assert "--data_path" in err and "is a folder, not a file" in err
    err = _run(["plot", str(tmp_path / "file"), "--out", str(tmp_path / "p.png")], capsys)
    assert "run directory" in err and "is a file, not a folder" in err
