"""A matchmaking plug-in that breaks the `trainers.matchmaking.Scheme` contract, and a population too large to build:
one line naming what went wrong and exit 2 through ``cory train``, before any folder or model (issue #60.8, #60.9)."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from tests.trainers.test_matchmaking import TINY
from trainers.cli import main
from trainers.matchmaking import Scheme, SchemeSpec

SCHEME_MODULE = "my_bad_schemes"


class Returns(Scheme):
    """A plug-in whose ``assign(t)`` returns ``returns["bad"]`` from iteration `from_iteration` on (before: a valid
    seating); `returns` is read at each call, so a test can fix the plug-in between runs."""

    def __init__(self, returns: dict, from_iteration=0):
        self.returns, self.from_iteration = returns, from_iteration

    def assign(self, iteration):
        return self.returns["bad"] if iteration >= self.from_iteration else {"pioneer": "llm1", "observer": "llm2"}


class EvaluatesBadly(Scheme):
    """A plug-in whose ``assign`` keeps the contract and whose ``evaluated`` (the held-out evaluations' seating)
    breaks it."""

    def assign(self, iteration):
        return {"pioneer": "llm1", "observer": "llm2"}

    def evaluated(self, iteration):
        return ["llm2", "llm1"]


class Raises(Scheme):
    def assign(self, iteration):
        raise RuntimeError("the plug-in's own bug in assign")


def _factory_raises(options, models, seats, seed, period):
    raise RuntimeError("the plug-in's own bug in its factory")


def _plugin(monkeypatch, attr: str, factory) -> str:
    """``--matchmaking my_bad_schemes:ATTR`` for a `SchemeSpec` of `factory` (an importable module:attr; a test
    takes the `registries` fixture, so that the registry forgets what it resolved)."""
    module = types.ModuleType(SCHEME_MODULE)
    setattr(module, attr, SchemeSpec(factory, reads_period=False))
    monkeypatch.setitem(sys.modules, SCHEME_MODULE, module)
    return f"{SCHEME_MODULE}:{attr}"


def _error_lines(err: str) -> list[str]:
    """The lines ``cory`` printed as its error (log lines, if stderr shows them, are other lines)."""
    return [line for line in err.splitlines() if line.startswith("cory train: error:")]


@pytest.mark.parametrize("factory, returned", [
    (lambda *a: Returns({"bad": {"pioneer": 1, "observer": 2}}), "assign(0) returned {'pioneer': 1, 'observer': 2}"),
    (lambda *a: Returns({"bad": ["llm1", "llm2"]}), "assign(0) returned ['llm1', 'llm2']"),
    (lambda *a: Returns({"bad": None}), "assign(0) returned None"),
    (lambda *a: None, "its factory returned NoneType None, not a trainers.matchmaking.Scheme"),
    (lambda *a: EvaluatesBadly(), "evaluated(0) returned ['llm2', 'llm1']"),
], ids=["int-names", "a-list", "none", "factory-none", "evaluated-a-list"])
def test_a_scheme_breaking_the_contract_is_one_line_and_exit_2_before_any_folder(tmp_path, capsys, monkeypatch,
                                                                                 registries, factory, returned):
    """#60.8: what a plug-in returned is checked against the contract before anything is written: one line naming the
    scheme, what it returned and the contract, no traceback (was: `KeyError: 1` / `TypeError` tracebacks after the
    run folder was made, and a factory returning None trained with CORY's role exchange while config.yaml named the
    plug-in)."""
    name, out = _plugin(monkeypatch, "BAD", factory), tmp_path / "run"
    # a model per seat: the population CORY's role exchange would train if the plug-in were dropped
    code = main(["train", *TINY, "--population", "2", "--matchmaking", name, "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    [line] = _error_lines(err)
    assert f"matchmaking scheme {name!r}: {returned}" in line
    assert "Scheme" in line and ("every seat ['pioneer', 'observer'] once" in line or "defines assign" in line)
    assert not out.exists()  # nothing trained, with the plug-in or with CORY's role exchange in its place


def test_a_scheme_breaking_the_contract_later_is_one_line_and_keeps_the_last_checkpoint(tmp_path, capsys,
                                                                                         monkeypatch, registries):
    """#60.8: an assignment that goes wrong at a later iteration is refused in one line when it is asked for (exit 2),
    and the checkpoint written before it stays the run's latest, complete, and resumable once the plug-in is fixed."""
    from trainers.loop.checkpoint import latest_checkpoint
    from trainers.loop.metrics import read_jsonl

    returns = {"bad": ["llm1", "llm2"]}
    name, out = _plugin(monkeypatch, "LATER", lambda *a: Returns(returns, from_iteration=2)), tmp_path / "run"
    args = ["train", *TINY, "--num_iterations", "3", "--checkpoint_every", "1", "--population", "3", "--matchmaking",
            name, "--output_dir", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = _error_lines(err)
    assert f"matchmaking scheme {name!r}: assign(2) returned ['llm1', 'llm2']; it must return a dict" in line
    assert latest_checkpoint(out).name == "iter-000000"  # iteration 1 had updated the weights when assign(2) failed
    returns["bad"] = {"pioneer": "llm2", "observer": "llm3"}  # the plug-in fixed, the run's settings unchanged
    assert main([*args, "--resume"]) == 0
    assert latest_checkpoint(out).name == "iter-000002"
    assert [r["iteration"] for r in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]  # resumed after iteration 0


@pytest.mark.parametrize("factory, logged", [(_factory_raises, ": its factory raised"),
                                             (lambda *a: Raises(), " raised in assign(0)")], ids=["factory", "assign"])
def test_a_schemes_own_exception_is_named_before_its_traceback(tmp_path, monkeypatch, caplog, registries, factory,
                                                              logged):
    """#60.8: a plug-in's own bug keeps its exception and traceback (it is not a user's mistake), after an ERROR line
    naming the scheme and the call that raised; no folder is made."""
    name, out = _plugin(monkeypatch, "OWN", factory), tmp_path / "run"
    with caplog.at_level(logging.ERROR, logger="trainers"):
        with pytest.raises(RuntimeError, match="the plug-in's own bug"):
            main(["train", *TINY, "--population", "3", "--matchmaking", name, "--output_dir", str(out)])
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == \
        [f"matchmaking scheme {name!r}{logged}; its traceback follows"]
    assert not out.exists()


def _factory_refuses(options, models, seats, seed, period):
    raise ValueError("this league needs an odd population")


def test_a_schemes_refusal_is_one_line_naming_the_scheme(tmp_path, capsys, monkeypatch, registries):
    """A plug-in factory's own ValueError (it refuses the run's settings) is one line that names the scheme, exit 2,
    no folder; the package's schemes keep their own wording (`--population 3 --matchmaking role-exchange`)."""
    name, out = _plugin(monkeypatch, "PICKY", _factory_refuses), tmp_path / "run"
    assert main(["train", *TINY, "--population", "2", "--matchmaking", name, "--output_dir", str(out)]) == 2
    [line] = _error_lines(capsys.readouterr().err)
    assert line.endswith(f"matchmaking scheme {name!r} refused the run: this league needs an odd population")
    assert not out.exists()
    assert main(["train", *TINY, "--population", "3", "--matchmaking", "role-exchange", "--output_dir", str(out)]) == 2
    [line] = _error_lines(capsys.readouterr().err)
    assert "refused the run" not in line and "matchmaking scheme 'role-exchange' seats as many models" in line


def test_a_population_above_the_maximum_is_one_line_before_any_model_or_folder(tmp_path, capsys, monkeypatch):
    """#60.9: ``--population 100000`` is refused at once, stating the range (was: 100000 models built, for minutes,
    before anything happened)."""
    import agents.tiny

    def trap(*args, **kwargs):
        raise AssertionError("a model was built before the population was checked")

    monkeypatch.setattr(agents.tiny, "LlamaForCausalLM", trap)
    out = tmp_path / "run"
    code = main(["train", *TINY, "--population", "100000", "--matchmaking", "uniform", "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    [line] = _error_lines(err)
    assert "population=100000 is invalid: use an integer in [2, 256]" in line  # trainers.matchmaking.MAX_POPULATION
    assert "at most 256" in line and "Traceback" not in err
    assert not out.exists()
