"""The learning ladder's comparisons between arms: which pairs are compared, P(A > B) with its interval on a ladder
result, the ``IQM [low, high]`` text of a summary, and the table of P(A > B) (`trainers.evaluation.stats` does the
numerics; `benchmarks.ladder_report` the other summaries and tables).

A pair is keyed ``"A>B"`` in the JSON; its value is `trainers.evaluation.stats.improvement_summary`'s ``{"p", "ci", "n",
"seeds"}`` over the two arms' independent runs, whatever their seed sets (``"ci": None`` with a ``"why"`` when an arm
has one run).
"""

from __future__ import annotations

from typing import Sequence

from trainers.evaluation.stats import arm_summary, improvement_summary

__all__ = ["REFERENCE_ARMS", "arm_stats", "comparison_pairs", "format_interval", "improvement_table", "improvements",
           "improvements_of"]

#: The arms every other arm is compared with (P(arm > reference)), where present: the comparisons of docs/results/.
REFERENCE_ARMS = ("ppo", "cory", "chain3")


def comparison_pairs(arms: Sequence[str]) -> list[tuple[str, str]]:
    """The (A, B) pairs whose P(A > B) the ladder reports: every arm against each of `REFERENCE_ARMS` present, each
    unordered pair once (the first reference wins: ``cory`` against ``ppo``, not ``ppo`` against ``cory``).

    >>> comparison_pairs(["cory", "ppo", "ppo-2x"])
    [('cory', 'ppo'), ('ppo-2x', 'ppo'), ('ppo-2x', 'cory')]
    >>> comparison_pairs(["grpo", "cory-grpo"])
    []
    """
    pairs: list[tuple[str, str]] = []
    for ref in REFERENCE_ARMS:
        if ref in arms:
            pairs += [(arm, ref) for arm in arms if arm != ref and (ref, arm) not in pairs]
    return pairs


def improvements_of(row: dict) -> dict:
    """P(A > B) with its interval for the `comparison_pairs` of the arms of `row`.

    Args:
        row: arm -> ``{"seeds": [...], "per_seed": [...]}``, one value per seed (an ``equal_kl`` level, or
            ``result["arms"]`` with the final rewards).

    Returns:
        ``{"A>B": {"p", "ci", "n", "seeds"}}`` (`trainers.evaluation.stats.improvement_summary`).
    """
    return {f"{a}>{b}": improvement_summary(dict(zip(row[a]["seeds"], row[a]["per_seed"])),
                                            dict(zip(row[b]["seeds"], row[b]["per_seed"])), names=(a, b))
            for a, b in comparison_pairs(list(row))}


def improvements(result: dict) -> dict:
    """P(A > B) of the final held-out reward for the `comparison_pairs` of a ladder result's arms, each arm at its own
    episode budget (the table's ``episodes``: a ``-2x`` arm at twice the rung's): `improvements_of` its arms."""
    return improvements_of(result["arms"])


def arm_stats(entry: dict) -> dict:
    """The ``"stats"`` (`trainers.evaluation.stats.arm_summary`) of a per-arm summary with ``"per_seed"``; computed
    for a result written before summaries carried it."""
    return entry.get("stats") or arm_summary(entry["per_seed"])


def format_interval(stats: dict, key: str = "iqm") -> str:
    """``value [low, high]`` of a `trainers.evaluation.stats` summary (`key` ``"iqm"``, or ``"p"`` for P(A > B)), 3
    decimals; the reason where there is no interval or no value.

    >>> format_interval({"iqm": 0.345, "ci": [0.291, 0.439]})
    '0.345 [0.291, 0.439]'
    >>> format_interval({"iqm": 0.5, "ci": None, "why": "one seed"})
    '0.500 [n/a: one seed]'
    """
    if stats.get(key) is None:
        return f"n/a: {stats['why']}"
    if stats["ci"] is None:
        return f"{stats[key]:.3f} [n/a: {stats['why']}]"
    return f"{stats[key]:.3f} [{stats['ci'][0]:.3f}, {stats['ci'][1]:.3f}]"


def improvement_table(result: dict, which: str = "equal_kl") -> str | None:
    """Markdown table of P(A > B) ``[95 % CI]``: one row per compared pair, a column for the final held-out reward
    (`result["improvement"]`, each arm at its own episodes) and one per KL level of `result[which]` (an
    ``equal_kl`` summary with ``"improvement"``); ``n/a: ...`` where there is no value, — where an arm is missing.
    None when no pair is compared."""
    columns: dict[str, dict] = {}
    if result.get("improvement"):
        columns["final reward"] = result["improvement"]
    eq = result.get(which) or {}
    name = eq.get("value", "reward").replace("_", "-")
    for level, pairs in eq.get("improvement", {}).items():
        columns[f"{name} at KL {float(level):g}"] = pairs
    pairs = list(dict.fromkeys(pair for col in columns.values() for pair in col))
    if not pairs:
        return None
    lines = ["| P(A > B) | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for pair in pairs:
        cells = [format_interval(col[pair], "p") if pair in col else "—" for col in columns.values()]
        lines.append(f"| {pair.replace('>', ' > ')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
