"""A plug-in costs nothing until it is named: beside installed packages that are broken (a module that raises on
import, a module that is not there), two packages claiming one learner name and a package claiming the built-in name
``ppo``, ``cory train --help`` and a run of a built-in learner import no plug-in and work; ``--help`` names the broken
and the conflicted ones; only a run that names one fails, in one line naming the package(s)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from tests.plugins.conftest import PACKAGE, write_plugins
from trainers.cli import main
from trainers.config.parser import parse_train_args
from trainers.learning.registry import LEARNERS, register_learner

RUN = ["--preset", "tiny", "--torch_threads", "1", "--num_iterations", "1", "--tensorboard", "false", "--batch_size",
       "2", "--mini_batch_size", "2", "--ppo_epochs", "1", "--min_new_tokens", "2", "--max_new_tokens", "3"]
#: distribution -> (version, {learner name: entry point value})
DISTS = {"lazy-raises": ("0.1", {"lazy-raises": "cory_lazy_raises.plugins:SPEC"}),
         "lazy-missing": ("0.1", {"lazy-missing": "cory_lazy_missing.plugins:SPEC"}),
         "dup-a": ("0.1", {"lazy-dup": "cory_lazy_dup_a:SPEC"}),
         "dup-b": ("0.2", {"lazy-dup": "cory_lazy_dup_b:SPEC"}),
         "shadow": ("0.1", {"ppo": "cory_lazy_shadow:SPEC"})}


def _marking(site: Path, tail: str = "") -> str:
    """A module's source that records its import in ``site/imported.txt``."""
    return f"with open({str(site / 'imported.txt')!r}, 'a') as f:\n    f.write(__name__ + '\\n')\n{tail}"


@pytest.fixture()
def lazy_site(tmp_path, registries, monkeypatch):
    """The demo plug-in package (`write_plugins`) and the `DISTS` installed in one sys.path folder; every module of
    theirs writes its name to ``imported.txt`` when imported (``cory_lazy_raises.plugins`` then raises)."""
    site = write_plugins(tmp_path / "site")
    (site / "cory_lazy_raises").mkdir()
    (site / "cory_lazy_raises" / "__init__.py").write_text(_marking(site))
    (site / "cory_lazy_raises" / "plugins.py").write_text(_marking(site, "raise RuntimeError('broken on purpose')\n"))
    for module in ("cory_lazy_dup_a", "cory_lazy_dup_b", "cory_lazy_shadow"):
        (site / f"{module}.py").write_text(_marking(site, "SPEC = None\n"))
    for dist, (version, points) in DISTS.items():
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("[cory.learners]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    monkeypatch.syspath_prepend(str(site))
    for registry in registries:
        registry.refresh()
    yield site
    for name in [n for n in sys.modules if n.split(".")[0] in (PACKAGE, "cory_lazy_raises", "cory_lazy_dup_a",
                                                                "cory_lazy_dup_b", "cory_lazy_shadow")]:
        del sys.modules[name]


def _imported(site: Path) -> list[str]:
    """The plug-in modules imported so far (the demo package's by `sys.modules`, the others by their marker)."""
    marked = (site / "imported.txt").read_text().split() if (site / "imported.txt").exists() else []
    return marked + [n for n in sys.modules if n.split(".")[0] == PACKAGE]


def _flat(text: str) -> str:
    return "".join(text.split())  # --help wraps its lines anywhere, hyphens included


def test_help_imports_no_plugin_and_names_the_broken_and_conflicted_ones(lazy_site, capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    out = _flat(capsys.readouterr().out)
    assert done.value.code == 0 and _imported(lazy_site) == []
    for line in ["lazy-missing (broken: module cory_lazy_missing.plugins not found",
                 "lazy-dup (conflicted: claimed by cory_lazy_dup_a:SPEC from dup-a 0.1 and cory_lazy_dup_b:SPEC "
                 "from dup-b 0.2",
                 "lazy-raises (plug-in: cory_lazy_raises.plugins:SPEC from lazy-raises 0.1)",
                 f"demo-reinforce (plug-in: {PACKAGE}.plugins:REINFORCE from cory-demo-plugins 0.1)",
                 "also claimed by cory_lazy_shadow:SPEC from shadow 0.1, ignored: a built-in name always means the "
                 "built-in"]:
        assert _flat(line) in out, line


def test_listing_and_known_import_no_plugin_until_one_is_named(lazy_site):
    listing = dict(LEARNERS.listing())
    assert listing["lazy-raises"] == "plug-in: cory_lazy_raises.plugins:SPEC from lazy-raises 0.1"
    assert listing["ppo"].startswith("per seat: TRL 0.11 PPO") and "shadow 0.1" in listing["ppo"]
    assert list(dict(LEARNERS.known())) == ["ppo", "grpo", "mappo", "magrpo"]
    assert _imported(lazy_site) == []
    LEARNERS.get("demo-reinforce")  # named: imported, and known from now on
    assert "demo-reinforce" in dict(LEARNERS.known())
    assert listing == dict(LEARNERS.listing())  # the listing does not depend on what was imported


def test_a_built_in_run_works_beside_them_imports_none_and_warns_of_none(lazy_site, tmp_path, capsys, caplog):
    with caplog.at_level(logging.WARNING):
        configs = parse_train_args([*RUN, "--learner", "ppo"])  # every option of every known learner is read
        assert configs.run.learner == "ppo"
        status = main(["train", *RUN, "--learner", "ppo", "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 0, err
    assert _imported(lazy_site) == []
    assert not any(word in caplog.text + err for word in ("lazy", "dup-", "shadow", PACKAGE)), caplog.text + err
    assert LEARNERS.origin("ppo").startswith("trainers.learning.")  # the built-in, not the package's


@pytest.mark.parametrize(("name", "message"), [
    ("lazy-raises", "learner 'lazy-raises' (entry point 'cory_lazy_raises.plugins:SPEC' of lazy-raises 0.1) does "
                    "not load (RuntimeError: broken on purpose)"),
    ("lazy-missing", "learner 'lazy-missing' (entry point 'cory_lazy_missing.plugins:SPEC' of lazy-missing 0.1) "
                     "does not load (ModuleNotFoundError"),
    ("lazy-dup", "two installed packages register the learner 'lazy-dup' (entry point group 'cory.learners'): "
                 "cory_lazy_dup_a:SPEC from dup-a 0.1 and cory_lazy_dup_b:SPEC from dup-b 0.2; uninstall one of "
                 "them, or name the one to use by module:attr (--learner cory_lazy_dup_a:SPEC)"),
])
def test_a_run_naming_a_broken_or_conflicted_plugin_fails_in_one_line_naming_it(lazy_site, tmp_path, capsys, name,
                                                                                 message):
    status = main(["train", *RUN, "--learner", name, "--output_dir", str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never").exists()
    assert [n for n in _imported(lazy_site) if "dup" in n] == []  # a conflicted name imports neither package


@pytest.mark.parametrize(("name", "claims"), [
    ("lazy-raises", "cory_lazy_raises.plugins:SPEC (entry point of lazy-raises 0.1)"),
    ("lazy-dup", "cory_lazy_dup_a:SPEC (entry point of dup-a 0.1) and cory_lazy_dup_b:SPEC (entry point of dup-b "
                 "0.2)"),
])
def test_registering_an_installed_plugins_name_is_refused_without_importing_it(lazy_site, name, claims):
    with pytest.raises(ValueError, match=f"two learners are registered as {name!r}") as err:
        register_learner(name, lambda agent, ref_model, config: None)
    assert claims in str(err.value) and _imported(lazy_site) == []
