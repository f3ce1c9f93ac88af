"""`UpdateGuard`: no NaN/inf loss, gradient or weight gets past an iteration's update, whoever wrote the learner.

The built-in learners check their losses and gradient norms themselves (`trainers.learning.update`), but a plug-in
learner may step its own `torch.optim` optimizer without any of those helpers (docs/extending.md). The trainer
therefore runs every update (`JointLearner.step`) through one guard, which

1. while the update runs, checks the gradients of the run's trainable parameters before any `torch.optim` optimizer
   steps them (a global optimizer step pre-hook, removed when the update ends): a NaN/inf gradient, from a NaN loss
   or a bad backward, raises `NonFiniteLossError` naming the model and the parameter, and the optimizer never steps;
2. after the update, checks the weights themselves (a learner that writes them without an optimizer, or a step so
   large that it overflows) and raises before any checkpoint is written;
3. adds to every `NonFiniteLossError` of the update the checkpoint the run can resume from (`latest`, which then
   still holds finite weights: `trainers.loop.checkpoint.refuse_nonfinite`) and that ``--resume`` continues there;
4. warns once per statistic that a learner returns as NaN/inf, naming the statistic, the learner and the model;
5. when the update fails before any weight changed (every trainable tensor's in-place version counter unchanged),
   puts back the learners' other state (KL controller, score statistics) and sets `UpdateGuard.unchanged`, so the
   trainer can keep the checkpoint of the iteration before (`trainers.loop.run_state.save_before_failure`).

Each check is one fused pass over the tensors (`trainers.learning.update.first_nonfinite`); the gradient check is
skipped for a step through `trainers.learning.update.optimizer_step`, which has just checked the same gradients' norm.
With several processes they decide together (`DataParallel.any`), so none is left waiting in a collective.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any, Mapping

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from trainers.distributed import DataParallel
from trainers.learning.joint import JointBatch, JointLearner
from trainers.learning.update import NonFiniteLossError, first_nonfinite, gradients_checked
from trainers.loop.checkpoint import resume_hint, trainable_state_names

logger = logging.getLogger(__name__)

__all__ = ["UpdateGuard"]


class UpdateGuard:
    """Runs the MARL algorithm's update with the checks of the module docstring.

    Args:
        algorithm: the run's `JointLearner` (`trainers.learning.registry.LearnerSpec.build`).
        agents: model name -> agent: every model whose trainable parameters the update may change.
        learner: the learner's name in messages (`CORYConfig.learner`).
        dist: the data-parallel group.
        output_dir: the run directory (its `latest` checkpoint is named in errors).
    """

    def __init__(self, algorithm: JointLearner, agents: Mapping[str, Any], *, learner: str, dist: DataParallel,
                 output_dir: str | os.PathLike) -> None:
        self.algorithm, self.learner, self.dist, self.output_dir = algorithm, learner, dist, output_dir
        self._params: list[torch.nn.Parameter] = []
        self._labels: dict[int, str] = {}  # id(parameter) -> "llm1's model.lm_head.weight"
        for model, agent in agents.items():
            named = dict(agent.named_parameters())
            for name in trainable_state_names(agent):
                self._params.append(named[name])
                self._labels.setdefault(id(named[name]), f"{model}'s {name}")
        self._warned: set[str] = set()
        #: After a failed `step`: True when no weight changed (and the learners' other state was put back).
        self.unchanged = False

    def step(self, batch: JointBatch) -> dict[str, dict[str, float]]:
        """``algorithm.step(batch)``, checked; returns its ``{seat: stats}``.

        Raises:
            NonFiniteLossError: a NaN/inf loss or gradient (before the optimizer steps) or weight (after the
                update), naming the model and the tensor, the last good checkpoint and ``--resume``.
        """
        versions = [p._version for p in self._params]  # in-place writes (an optimizer step) bump them
        before = {name: {k: copy.deepcopy(v) for k, v in learner.state_dict().items() if k != "optimizer"}
                  for name, learner in self.algorithm.learners.items()}
        self.unchanged = False
        handle = register_optimizer_step_pre_hook(self._before_optimizer_step)
        try:
            stats = self.algorithm.step(batch)
            self._check(self._params, "weight", f"after learner {self.learner!r}'s update (a learner that writes the "
                        "weights itself, or a step so large that it overflows)")
        except NonFiniteLossError as err:
            err.args = (f"{err}; {resume_hint(self.output_dir)}",)
            raise
        except Exception:
            if [p._version for p in self._params] == versions:  # no weight changed: the rest of the state goes back
                for name, learner in self.algorithm.learners.items():
                    learner.load_state_dict({**before[name], "optimizer": learner.state_dict()["optimizer"]})
                self.unchanged = True
            raise
        finally:
            handle.remove()
        self._warn_nonfinite_stats(stats, batch.models)
        return stats

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:  # noqa: ARG002
        if gradients_checked():  # stepped by `optimizer_step`, which has just checked the same gradients
            return
        owned = [p for group in optimizer.param_groups for p in group["params"] if id(p) in self._labels]
        if owned:  # an optimizer of the run's models (another one, e.g. a learner's own helper network, is left be)
            self._check([p for p in owned if p.grad is not None], "gradient",
                        f"in learner {self.learner!r}'s update (a NaN/inf loss?); the optimizer did not step")

    def _check(self, params: list[torch.nn.Parameter], what: str, where: str) -> None:
        """Raise `NonFiniteLossError` if a tensor (`what`: "weight" or "gradient") of `params` on any process
        holds NaN/inf."""
        bad = first_nonfinite([p if what == "weight" else p.grad for p in params])
        if not (self.dist.any(bad is not None) if self.dist.enabled else bad is not None):
            return
        label = self._labels[id(params[bad])] if bad is not None else "a tensor on another process"
        raise NonFiniteLossError(f"the {what} {label} holds NaN/inf {where}")

    def _warn_nonfinite_stats(self, stats: Mapping[str, Mapping[str, Any]], models: Mapping[str, str]) -> None:
        for seat, seat_stats in stats.items():
            for key, value in seat_stats.items():
                try:
                    finite = math.isfinite(float(value))
                except (TypeError, ValueError):
                    continue
                if finite or key in self._warned:
                    continue
                self._warned.add(key)
                logger.warning("learner %r returned %s=%s for %s in seat %s; it is logged as is (warned once per "
                               "statistic)", self.learner, key, value, models.get(seat, seat), seat)
