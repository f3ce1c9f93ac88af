"""TRL's optional score preprocessing: running moments, scaling by the running std, normalisation, clipping.

`RunningMoments` is part of the state that travels with a model at role exchange (checkpointed as plain floats).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from cory_env.checks import check_number

__all__ = ["SCORE_STD_FLOOR", "RunningMoments", "scale_scores"]

logger = logging.getLogger(__name__)

SCORE_STD_FLOOR = 0.1
"""Score scaling divides by max(running std, SCORE_STD_FLOOR × running RMS of the scores) (+ eps), so the scaled
scores stay within about ±10 RMS units. TRL 0.11 divides by the std alone (+ float eps), so a batch of equal scores,
whose std is round-off (5e-13), turns a score of 1.0 into 8.4e6 and the value loss into 2.9e13. The floor is
relative, so it does not depend on the reward's units, and it is inactive whenever the scores' coefficient of
variation (std / abs(mean)) is above about 0.1."""

def _identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


@dataclass
class RunningMoments:
    """Running mean and standard deviation of all scores seen so far (parallel-variance merge).

    Starts from mean 0, var 1, count 1e-24 (so the first batch dominates). Arithmetic is float64.

    Attributes:
        mean: running mean.
        std: running standard deviation with Bessel's correction over the total count.
        var: running population variance.
        count: number of scores merged (plus the 1e-24 prior).

    Source:
        TRL 0.11.4 `trl.trainer.utils.RunningMoments` (after OpenLMLab MOSS-RLHF); Chan et al. parallel variance.
    """

    mean: float = 0.0
    std: float = 1.0
    var: float = 1.0
    count: float = 1e-24
    floor_warned: bool = field(default=False, repr=False, compare=False)  # not state: the floor's warning was given

    @torch.no_grad()
    def update(self, xs: torch.Tensor, reduce_sum: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
               ) -> tuple[float, float]:
        """Merge a batch of scores into the running moments.

        Args:
            xs: float, any shape (typically (B,)); all elements count.
            reduce_sum: data-parallel training: a function summing a tensor over processes
                (`trainers.distributed.DataParallel.sum`); the batch is then every process's scores together, so all
                processes hold the same moments (TRL's ``get_global_statistics``). None: this process only.

        Returns:
            (batch mean, batch std with Bessel's correction; NaN for a single element).

        Raises:
            ValueError: if `xs` is empty, or the running count would stay ≤ 1 (a first batch of one score has no
                standard deviation: use a batch of at least 2).
        """
        if xs.numel() == 0:
            raise ValueError("RunningMoments.update got an empty tensor; pass at least one score")
        x = xs.detach().to(torch.float64).reshape(-1)
        if reduce_sum is None:  # this process only
            reduce_sum = _identity
        # two passes (over all processes): the batch mean, then the squared deviations from it
        totals = reduce_sum(torch.stack([x.sum(), torch.tensor(float(x.numel()), dtype=torch.float64,
                                                              device=x.device)]))
        n = int(round(float(totals[1])))
        batch_mean = float(totals[0]) / n
        batch_var = float(reduce_sum(((x - batch_mean) ** 2).sum().reshape(1))[0]) / n  # population variance
        total = self.count + n
        if total <= 1.0:
            raise ValueError(f"RunningMoments needs more than 1 score in total, got {total:g}; "
                             "use a batch of at least 2 scores")
        delta = batch_mean - self.mean
        old_sum = self.var * self.count + delta**2 * self.count * n / total
        new_var = (old_sum + batch_var * n) / total
        self.mean = self.mean + delta * n / total
        self.std = math.sqrt(new_var * total / (total - 1))
        self.var = new_var
        self.count = total
        batch_std = math.sqrt(batch_var * n / (n - 1)) if n > 1 else float("nan")
        return batch_mean, batch_std

    def state_dict(self) -> dict[str, float]:
        """The moments as plain floats (for checkpoints)."""
        return {"mean": float(self.mean), "std": float(self.std), "var": float(self.var), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore moments saved by `state_dict`.

        Raises:
            ValueError: if keys are missing or unexpected.
        """
        expected = {"mean", "std", "var", "count"}
        if set(state) != expected:
            raise ValueError(f"RunningMoments state keys {sorted(state)} != {sorted(expected)}; "
                             "pass the dict returned by RunningMoments.state_dict()")
        for key in expected:
            setattr(self, key, float(state[key]))


def scale_scores(scores: torch.Tensor, moments: Optional[RunningMoments], *, use_score_scaling: bool = True,
                 use_score_norm: bool = False, score_clip: Optional[float] = None,
                 reduce_sum: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> torch.Tensor:
    """TRL's score preprocessing: running-std scaling, optional normalisation, optional clipping.

    With score scaling on (`moments` given and `use_score_scaling`): first `moments.update(scores)` (this mutates
    `moments`), then s / (σ + eps), or (s − mean) / (σ + eps) with `use_score_norm`, using the moments *after*
    the update, eps = machine epsilon of the scores' dtype and σ = max(std, `SCORE_STD_FLOOR` · sqrt(mean² + var))
    (TRL: σ = std; the floor keeps nearly constant scores from being multiplied by up to 1/eps, and logs a warning
    the first time it acts). Then, if `score_clip`, clip to [−score_clip, score_clip] (also without scaling).
    `use_score_norm` without scaling is ignored, as in TRL.

    Args:
        scores: float (B,), sequence rewards (for CORY, the collective reward). Not edited.
        moments: the seat's running statistics, or None to skip scaling.
        use_score_scaling: scale by the running std (`PPOConfig.use_score_scaling`); False skips scaling and
            leaves `moments` untouched.
        use_score_norm: subtract the running mean too (`PPOConfig.use_score_norm`).
        score_clip: clip bound > 0 (`PPOConfig.score_clip`), or None.
        reduce_sum: data-parallel: update the moments with every process's scores (see `RunningMoments.update`).

    Returns:
        float (B,), same dtype as `scores`.

    Raises:
        TypeError: if `scores` is not floating point.
        ValueError: if `score_clip` is not positive; see `RunningMoments.update`.

    Source:
        TRL 0.11.4 `PPOTrainer.step` (score scaling and clipping block), with the std floor added.
    """
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a float tensor, got {scores.dtype}; pass `scores.float()`")
    if score_clip is not None:
        check_number(score_clip, "score_clip", above=0, fix="or None to disable")
    out = scores
    if moments is not None and use_score_scaling:
        moments.update(scores, reduce_sum)
        floor = SCORE_STD_FLOOR * math.sqrt(moments.mean**2 + moments.var)
        if moments.std < floor:
            log = logger.debug if moments.floor_warned else logger.warning
            log("score scaling: the running score std %.3g is below the floor %.3g (%.1f x the scores' RMS %.3g: the "
                "scores are nearly constant); dividing by the floor instead of by a std of round-off",
                moments.std, floor, SCORE_STD_FLOOR, floor / SCORE_STD_FLOOR)
            moments.floor_warned = True
        sigma = max(moments.std, floor)
        scale = torch.tensor(sigma, dtype=scores.dtype, device=scores.device) + torch.finfo(scores.dtype).eps
        if use_score_norm:
            out = (scores - torch.tensor(moments.mean, dtype=scores.dtype, device=scores.device)) / scale
        else:
            out = scores / scale
    if score_clip is not None:
        out = torch.clip(out.float(), -score_clip, score_clip).to(scores.dtype)
    return out
