"""List values written as text (`cory_env.overrides`): a stop string may be any string, through ``KEY=VALUE`` settings
(``--seat_generation``), ``--stop_strings``, a YAML file and Python, by escapes (``\\n``, ``\\t``, ``\\,``, ``\\\\``)
or a JSON list; an item that parses to nothing (``a,,b``, a trailing comma, an empty value) is refused, never
dropped, for every list-valued option."""

from __future__ import annotations

import pytest

from cory_env import EnvConfig
from trainers.cli import main
from trainers.cli.train import parse_train_args
from trainers.config import ModelConfig, RunConfigs

#: A fast tiny run (tests/trainers/test_every_option_checked_first.py's), for the command-line cases.
TINY = ["--model", "tiny", "--num_iterations", "1", "--batch_size", "4", "--mini_batch_size", "2",
        "--min_new_tokens", "2", "--max_new_tokens", "4", "--context_len", "64", "--tensorboard", "false"]


def _observer_stops(*entries: str) -> list[str]:
    """The observer's stop strings of ``--seat_generation`` entries, as `EnvConfig` records them."""
    return EnvConfig(seat_generation=list(entries)).seat_generation["observer"]["stop_strings"]


@pytest.mark.parametrize(("written", "expected"), [
    (r"\n", ["\n"]),
    (r"\,", [","]),
    (r"\t", ["\t"]),
    (r"\\", ["\\"]),
    (r".,\n,\,", [".", "\n", ","]),
    (r"a\,b,c", ["a,b", "c"]),
])
def test_a_stop_string_written_with_escapes_is_the_character_it_names(written, expected):
    assert _observer_stops(f"observer.stop_strings={written}") == expected


def test_a_real_newline_given_as_the_value_is_a_stop_string():
    """A shell can pass a real newline (``"observer.stop_strings=$'\\n'"``): it is kept, not stripped away."""
    assert _observer_stops("observer.stop_strings=\n") == ["\n"]


def test_a_json_list_of_strings_gives_any_stop_strings():
    assert _observer_stops('observer.stop_strings=["\\n", ",", " "]') == ["\n", ",", " "]


@pytest.mark.parametrize("written", ["a,,b", "a,", ",a", ",", "", "[]", '["a", ""]'],
                         ids=["double-comma", "trailing-comma", "leading-comma", "lone-comma", "empty", "empty-json",
                              "json-empty-item"])
def test_a_stop_string_list_with_an_empty_item_is_refused_not_dropped(written):
    with pytest.raises(ValueError, match=r"seat_generation observer\.stop_strings=.* empty item"):
        EnvConfig(seat_generation=[f"observer.stop_strings={written}"])


@pytest.mark.parametrize("written", [r"\q", "a\\", r"\x41"])
def test_an_unknown_or_unfinished_escape_is_refused_naming_it(written):
    with pytest.raises(ValueError, match="unknown escape"):
        EnvConfig(seat_generation=[f"observer.stop_strings={written}"])


@pytest.mark.parametrize("flat", [
    {"seat_generation": ["observer.stop_strings=a,,b"]},
    {"seat_generation": {"observer": {"stop_strings": ""}}},
    {"stop_strings": ""},
    {"stop_strings": "a,"},
], ids=["seat-list", "seat-mapping-empty", "stop-empty", "stop-trailing-comma"])
def test_a_run_config_with_an_empty_list_item_is_refused(flat):
    with pytest.raises(ValueError, match="empty item"):
        RunConfigs.from_flat(flat, strict=True)


def test_a_run_configs_stop_strings_read_the_escapes():
    configs = RunConfigs.from_flat({"stop_strings": r"\n,\,", "seat_generation": ["pioneer.stop_strings=\\t"]},
                                   strict=True)
    assert configs.env.stop_strings == ["\n", ","]
    assert configs.env.seat_generation == {"pioneer": {"stop_strings": ["\t"]}}


def test_stop_strings_on_the_command_line_read_each_items_escapes_and_refuse_an_empty_one():
    """``--stop_strings`` takes one argv item per string (a comma is kept), each with its escapes read."""
    configs = parse_train_args(["--stop_strings", r"\n", ",", r"a\tb", r"\\"])
    assert configs.env.stop_strings == ["\n", ",", "a\tb", "\\"]
    with pytest.raises(ValueError, match="--stop_strings=.* empty item"):
        parse_train_args(["--stop_strings", ""])
    with pytest.raises(ValueError, match=r"--stop_strings=.* unknown escape \\q"):
        parse_train_args(["--stop_strings", r"\q"])


def test_seat_generation_on_the_command_line_takes_a_newline_and_a_comma():
    configs = parse_train_args(["--seat_generation", r"observer.stop_strings=\n,\,", "pioneer.stop_strings=\n"])
    assert configs.env.seat_generation == {"observer": {"stop_strings": ["\n", ","]},
                                           "pioneer": {"stop_strings": ["\n"]}}


def test_a_yaml_stop_string_reads_the_escapes_and_a_yaml_list_is_literal(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("stop_strings: '\\n,\\t'\nseat_generation:\n  observer:\n    stop_strings: ['a,b', '\\n']\n",
                    encoding="utf-8")
    configs = parse_train_args(["--config", str(path)])
    assert configs.env.stop_strings == ["\n", "\t"]  # a YAML string: the comma list with its escapes
    assert configs.env.seat_generation == {"observer": {"stop_strings": ["a,b", "\\n"]}}  # a YAML list: as written


@pytest.mark.parametrize("yaml_text", [
    'stop_strings: ""\n',
    "stop_strings: 'a,,b'\n",
    'seat_generation:\n  observer:\n    stop_strings: ""\n',
    "use_lora: true\nlora_target_modules: 'q_proj,,v_proj'\n",
], ids=["stop-empty", "stop-double-comma", "seat-empty", "lora-double-comma"])
def test_a_yaml_list_value_with_an_empty_item_is_refused(tmp_path, yaml_text):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        parse_train_args(["--config", str(path)])


@pytest.mark.parametrize("modules", ["q_proj,,v_proj", "q_proj,", ",v_proj", ""])
def test_lora_target_modules_with_an_empty_item_is_refused(modules):
    with pytest.raises(ValueError, match=f"lora_target_modules={modules!r} is invalid"):
        ModelConfig(lora_target_modules=modules)


def test_crossplay_groups_with_an_empty_run_are_refused():
    try:
        from trainers.evaluation.crossplay import parse_groups
    except ImportError:  # before the evaluations moved
        from trainers.cli.crossplay import parse_groups

    assert parse_groups(["x=a,b"], ["a", "b"]) == {"x": ["a", "b"]}
    for item in ("x=a,,b", "x=a,"):
        with pytest.raises(ValueError, match=f"--groups entry {item!r} is invalid: .*empty run"):
            parse_groups([item], ["a", "b"])


class _NoTraining:
    """Stands in for the trainer: a refused option must end the command before training starts."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("the options were accepted: training would start")


@pytest.mark.parametrize(("args", "named"), [
    (["--seat_generation", "observer.stop_strings=a,,b"], "observer.stop_strings"),
    (["--seat_generation", "observer.stop_strings=a,"], "observer.stop_strings"),
    (["--seat_generation", "observer.stop_strings="], "observer.stop_strings"),
    (["--seat_generation", "observer.stop_strings=,"], "observer.stop_strings"),
    (["--stop_strings", r"\q"], "--stop_strings"),
    (["--use_lora", "true", "--lora_target_modules", "q_proj,,v_proj"], "lora_target_modules"),
], ids=["double-comma", "trailing-comma", "empty-value", "lone-comma", "unknown-escape", "lora-double-comma"])
def test_cory_train_refuses_an_empty_or_unreadable_list_item_in_one_line(tmp_path, capsys, monkeypatch, args, named):
    monkeypatch.setattr("trainers.loop.cory.CORYTrainer", _NoTraining)
    run = tmp_path / "run"
    status = main(["train", *TINY, *args, "--output_dir", str(run)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("cory train: error:"), err
    assert named in err and "Traceback" not in err
    assert not run.exists()
