"""The checks before ladder JSONs made apart are summarised together (`benchmarks.ladder_summary.merge`): one table must
not mix runs of other settings, other budgets or, unnoticed, other code.

Refused, each with the field named: two JSONs whose ``episodes`` differ; runs whose settings differ (the JSON's
``shared_flags`` followed by the run's own extra ``flags``, read as `cory train` reads them: the last value of a flag
wins); runs of this project's arms whose episode budgets differ (a ``-Nx`` arm's divided by N; another library's
arm against its own runs only); the same (arm, seed) twice; a run whose final or before reward is not a finite
number (NaN, ±inf: no mean, IQM or interval can be taken over it); and runs that record different commits
(``commit``, a ``git describe`` string; a run without one is ``"unrecorded"``) unless the caller allows it
(``--across_commits``: only after checking that the seeded numbers did not change between those commits).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

__all__ = ["UNRECORDED", "check_mergeable", "flag_settings", "settings_flags"]

#: The commit of a run that records none (written before runs recorded their commit).
UNRECORDED = "unrecorded"


def flag_settings(flags: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The settings a `cory train` flag list makes: each ``--flag`` with the values after it, the last occurrence
    winning as in the parser (values before any flag are kept under ``""``).

    >>> flag_settings(["--init_kl_coef", "0.05", "--use_lora", "true", "--init_kl_coef", "0.2"])
    {'--init_kl_coef': ('0.2',), '--use_lora': ('true',)}
    """
    out: dict[str, tuple[str, ...]] = {}
    name, values = "", []
    for token in [*flags, "--"]:
        if token.startswith("--"):
            if name or values:
                out[name] = tuple(values)  # a repeated flag keeps its first place, with its last values
            name, values = token, []
        else:
            values.append(token)
    return out


def settings_flags(settings: dict[str, tuple[str, ...]]) -> list[str]:
    """A flag list that makes `settings` again (`flag_settings` read back).

    >>> settings_flags({"--init_kl_coef": ("0.2",), "--use_lora": ("true",)})
    ['--init_kl_coef', '0.2', '--use_lora', 'true']
    """
    return [token for name, values in settings.items() for token in ((name,) if name else ()) + values]


def _label(run: dict, path: str) -> str:
    return f"{run['arm']} seed {run['seed']} ({path})"


def _shown(values: tuple[str, ...] | None) -> str:
    return "unset" if values is None else " ".join(values) or "given without a value"


def check_mergeable(parts: Sequence[tuple[str, dict, list[dict]]], *, budget: Callable[[dict], tuple[str, int]],
                    across_commits: bool = False) -> list[str]:
    """Refuse to merge ladder JSONs that do not belong in one table (see the module docstring).

    Args:
        parts: ``(path, ladder JSON, its runs)`` per file.
        budget: run -> (group, episodes): runs of one group must have the same episodes (this project's arms share
            one group and the rung's budget; another library's arm is its own group).
        across_commits: allow runs that record different commits (or some none).

    Returns:
        The merged runs' shared settings as a flag list (`settings_flags`).

    Raises:
        SystemExit: naming the field that differs (``episodes``, a flag of ``shared_flags``/``flags``, a run's
            episodes, the commits) and the runs or files on each side; or the run and file of a reward that is not
            a finite number.
    """
    labelled = [(run, path, part) for path, part, runs in parts for run in runs]
    seen: dict[tuple[str, int], str] = {}
    for run, path, _ in labelled:
        for key in ("final", "before"):
            if not isinstance(run.get(key), (int, float)) or not math.isfinite(run[key]):
                raise SystemExit(f"--merge: {_label(run, path)} has {key} reward {run.get(key)!r}, not a finite "
                                 "number; leave that run out (or run it again) and merge the rest")
        key = (run["arm"], run["seed"])
        if key in seen:
            raise SystemExit(f"--merge: {run['arm']} seed {run['seed']} is in both {seen[key]} and {path}; pass each "
                             "run once (a merged JSON already holds the runs of the files it was made from)")
        seen[key] = path
    episodes = {path: part.get("episodes") for path, part, _ in parts}
    if len(set(episodes.values())) > 1:
        shown = ", ".join(f"{n} in {path}" for path, n in episodes.items())
        raise SystemExit(f"--merge: the ladder JSONs differ in episodes ({shown}); merge only runs of one rung budget")
    first_run, first_path, first_part = labelled[0] if labelled else (None, None, None)
    if first_run is None:
        return []
    settings = flag_settings([*first_part.get("shared_flags", []), *first_run.get("flags", [])])
    for run, path, part in labelled[1:]:
        other = flag_settings([*part.get("shared_flags", []), *run.get("flags", [])])
        for name in dict.fromkeys([*settings, *other]):
            if settings.get(name) != other.get(name):
                raise SystemExit(
                    f"--merge: the runs differ in the rung settings (shared_flags, then each run's flags): {name} is "
                    f"{_shown(settings.get(name))} for {_label(first_run, first_path)} but {_shown(other.get(name))} "
                    f"for {_label(run, path)}; merge only runs made with the same settings")
    budgets: dict[str, tuple[int, str]] = {}
    for run, path, _ in labelled:
        group, n = budget(run)
        if group in budgets and budgets[group][0] != n:
            raise SystemExit(f"--merge: the runs differ in episodes: {budgets[group][1]} ran {budgets[group][0]} but "
                             f"{_label(run, path)} {n} (a -Nx arm's episodes divided by N); merge only runs of one "
                             "episode budget")
        budgets.setdefault(group, (n, _label(run, path)))
    commits: dict[str, list[str]] = {}
    for run, path, _ in labelled:
        commits.setdefault(run.get("commit") or UNRECORDED, []).append(_label(run, path))
    if len(commits) > 1 and not across_commits:
        shown = "; ".join(f"{commit}: {', '.join(labels)}" for commit, labels in commits.items())
        raise SystemExit(f"--merge: the runs record different commits ({shown}); the same seed can give other numbers "
                         "on other code: check that the seeded numbers did not change between these commits, then "
                         "pass --across_commits")
    return settings_flags(settings)
