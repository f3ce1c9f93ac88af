"""Evaluation: held-out evaluations of a run's models (the pioneer alone, as CORY is deployed; every seat; influence),
a trained run's checkpoint, cross-play, pass@k, and statistics over seeds.

| module | what |
|---|---|
| `evaluator` | `Evaluator`: the one object the trainer, `cory eval` and `cory crossplay` evaluate through (held-out envs built once, each seat's sampling) |
| `episodes` | `evaluate_pioneer` (task reward, KL, distinct-n), `evaluate_collective`, `evaluation_batches`, the gain and its standard error |
| `influence` | how much knowledge transfer moves each later seat (influence) and whether it copies (copy rate) |
| `crossplay` | every model of some runs with every other: self-play, cross-play, the groups' statistics, marl-eval's format |
| `passk` | pass@k estimators and the GSM8K pass@k run |
| `report` | results as the lines a person reads (the before/after line, the tables) |
| `stats` | robust statistics over seeds: IQM, percentile-bootstrap intervals, P(A > B) (the ladder, `cory crossplay`) |

They play through `trainers.rollout.run_episodes`, the loop training rolls out with.
"""
