"""Evaluation: the pioneer alone (as CORY is deployed) or both seats, on sampled episodes.

| module | what |
|---|---|
| `episodes` | `evaluate_pioneer` (task reward, KL, distinct-n), `evaluate_collective`, `evaluation_batches` |
| `passk` | pass@k estimators and the GSM8K pass@k run |
| `influence` | how much knowledge transfer moves each later seat (influence) and whether it copies (copy rate) |
| `stats` | robust statistics over seeds: IQM, percentile-bootstrap intervals, P(A > B) (the ladder, `cory crossplay`) |

They play through `trainers.rollout.run_episodes`, the loop training rolls out with.
"""
