"""Evaluation results as the lines a person reads: the held-out before/after line (`cory train`, `cory eval`), the
pioneer evaluation's table and GSM8K's pass@k table. Pure functions of the results (`trainers.evaluation.episodes`,
`trainers.evaluation.passk`); the commands print them."""

from __future__ import annotations

__all__ = ["before_after_line", "format_passk_table", "format_table"]


def format_table(result: dict) -> str:
    """A pioneer evaluation's result as ``key  value`` lines."""
    keys = ("task_reward", "kl", "combined_reward", "distinct_1", "distinct_2", "response_len", "num_queries")
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {result[k]:.4f}" if isinstance(result[k], float) else f"{k:<{width}}  {result[k]}"
                     for k in keys if k in result)


def format_passk_table(result: dict) -> str:
    """The GSM8K result as a k | unbiased | first-k table plus accuracy, format rate, length and speed."""
    lines = [f"GSM8K pass@k on {result['num_problems']} problems x {result['num_samples']} samples",
             "k  unbiased  first-k"]
    for k, value in result["pass_at_k"].items():
        lines.append(f"{k}  {value:8.4f}  {result['pass_at_k_first'][k]:7.4f}")
    lines.append(f"accuracy {result['accuracy']:.4f}  format_rate {result['format_rate']:.3f}  "
                 f"response_len {result['response_len']:.1f}  {result['tokens_per_s']:.1f} tokens/s "
                 f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


def before_after_line(model: str, before: dict, after: dict, gain: dict) -> str:
    """The one line that says what training did to `model` on held-out queries (`gain_summary`'s fields; a gain
    without a standard error says "s.e. n/a" with the reason; training queries are named as such, not held out)."""
    sem = (f" ± {gain['gain_sem']:.3f} s.e., clustered by query" if gain.get("gain_sem") is not None else
           f", s.e. n/a: {gain.get('gain_sem_note') or 'not computed'}")
    held_out = after["query_split"] == "test"  # else training queries drawn with a fresh seed (not held out)
    return (f"{model} in the pioneer seat, {'held-out ' if held_out else ''}task reward on {gain['episodes']} "
            f"episodes of {gain['distinct_queries']} distinct {after['query_split']}-split queries"
            f"{'' if held_out else ' (not held out)'} (the same queries and sampling seeds): before "
            f"{before['reward']:.3f} -> after {after['reward']:.3f} (gain {gain['gain']:+.3f}"
            f"{sem}); combined reward (task − β·KL) "
            f"{gain['combined_before']:.3f} -> {gain['combined_after']:.3f}; KL to the reference {after['kl']:.2f} "
            f"nats; distinct-2 {before['distinct_2']:.2f} -> {after['distinct_2']:.2f}")
