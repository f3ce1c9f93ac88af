"""Data-parallel training on Hugging Face ``accelerate``: the few collectives the learners and the trainer need.

`DataParallel` wraps the process group that ``accelerate launch`` / ``torchrun`` start (accelerate's
``PartialState``: NCCL on GPUs, gloo on CPU). Every process holds full copies of the models, rolls out its own
``batch_size`` episodes (TRL's convention: ``batch_size`` is per process, the global batch is
``batch_size * world_size``) and keeps identical state because every decision is taken on global numbers:

* gradients are averaged across processes before each optimiser step (`sync_gradients`, in-place all-reduces of
  64 MiB buckets, over that learner's own trainable tensors only; this is what lets the memory-shared LoRA layout, where
  two adapters live in one module, run data-parallel without DDP's unused-parameter machinery);
* each process's mini-batch loss is re-weighted by its share of the global mini-batch's tokens (`pool_token_means`), so
  the averaged gradient equals the gradient of the global token mean (TRL's ``masked_mean`` over the whole
  mini-batch) even when processes hold different numbers of response tokens;
* whitening, score statistics, the ratio-threshold guard, early stopping and the KL controller read global
  (all-reduced) sums;
* logged statistics are averaged across processes; only the main process writes files.

With one process every method is the identity, so single-process code pays nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping

import torch

logger = logging.getLogger(__name__)

__all__ = ["DataParallel", "check_device", "full_tensor", "is_sharded", "launched_world_size"]


def is_sharded(tensor: torch.Tensor) -> bool:
    """True for a ``DTensor`` (a parameter, gradient or optimizer state that FSDP2 sharded)."""
    from torch.distributed.tensor import DTensor
    return isinstance(tensor, DTensor)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a ``DTensor`` all-gathered (a collective: every process must call it, in the same order),
    anything else as it is."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def check_device(device: str, world_size: int) -> bool:
    """Check a `CORYConfig.device` value for a run of `world_size` processes; True when it means the CPU.

    Raises:
        ValueError: CUDA asked for on a machine without it, or a device with an index (``cuda:1``) for several
            processes (every process would share it; ``auto`` gives each the GPU of its local rank).
    """
    cpu = not torch.cuda.is_available() if device == "auto" else torch.device(device).type == "cpu"
    if torch.device("cpu" if device == "auto" else device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} needs CUDA, which this machine lacks (torch {torch.__version__}); "
                         "pass --device cpu or --device auto")
    if world_size > 1 and device not in ("auto", "cpu") and torch.device(device).index is not None:
        raise ValueError(f"device={device!r} would put all {world_size} processes on one device; pass --device auto "
                         "(each process takes the GPU of its local rank) or --device cpu")
    return cpu


def launched_world_size() -> int:
    """The process count a launcher (``accelerate launch``, ``torchrun``, MPI) put in the environment; 1 if none."""
    for key in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(key)
        if value:
            return int(value)
    return 1


class DataParallel:
    """The data-parallel process group of one training run (identity when there is one process).

    Build it with `DataParallel.from_launcher()`; `DataParallel()` is the single-process group.

    Attributes:
        world_size: number of processes W.
        rank: this process's index in [0, W).
        device: where this process's models live (``cuda:<local rank>`` under a multi-GPU launch, else CPU).
        closed: True after `close` destroyed the process group.
    """

    def __init__(self, state=None, *, device: torch.device | str | None = None) -> None:
        self._state, self._mesh = state, None
        self.closed = False  # set by close(): the process group is destroyed
        self.world_size = 1 if state is None else int(state.num_processes)
        self.rank = 0 if state is None else int(state.process_index)
        device = torch.device(("cpu" if state is None else state.device) if device is None else device)
        self.device = torch.device("cpu") if device.type == "cpu" else device  # one spelling of the CPU

    @classmethod
    def from_launcher(cls, device: str = "auto") -> "DataParallel":
        """The process group started by ``accelerate launch`` / ``torchrun`` (single-process when none started one).

        Args:
            device: "auto" (accelerate's choice: this process's GPU when CUDA is available, else CPU), "cpu"
                (force CPU; gloo backend), or an explicit torch device string.

        Raises:
            ValueError: a device this machine or launch cannot use (`check_device`), or ``accelerate launch`` that
                started one process although asked for several (``--multi_gpu`` missing).
            RuntimeError: if accelerate started another number of processes than the launcher announced.
        """
        world = launched_world_size()
        cpu = check_device(device, world)
        if world == 1:
            if os.environ.get("ACCELERATE_USE_CPU") is not None and os.environ.get("MASTER_PORT"):
                # accelerate's simple launcher: asked for several processes (it set MASTER_PORT) but started one
                raise ValueError("accelerate launch started one process although several were asked for; add "
                                 "--multi_gpu (it selects the torchrun launcher, also on CPU-only machines)")
            return cls(device=("cuda" if not cpu else "cpu") if device == "auto" else device)
        from accelerate import PartialState
        state = PartialState(cpu=cpu)
        if state.num_processes != world:
            raise RuntimeError(f"the launcher set WORLD_SIZE={world} but accelerate started {state.num_processes} "
                               "process(es); launch with `accelerate launch --multi_gpu --num_processes N` or torchrun")
        chosen = state.device
        logger.info("data-parallel process %d/%d on %s (%s backend)", state.process_index, world, chosen, state.backend)
        return cls(state, device=chosen)

    # ------------------------------------------------------------------ who am I
    @property
    def is_main(self) -> bool:
        """True on the process that writes logs and checkpoints (rank 0)."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """True when more than one process trains."""
        return self.world_size > 1

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others (e.g. a download or a cache conversion)."""
        if not self.enabled:
            yield
            return
        with self._state.main_process_first():
            yield

    def device_mesh(self):
        """The 1-D ``DeviceMesh`` over every process (FSDP2's layout), built on the existing process group once."""
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh
            self._mesh = init_device_mesh(self.device.type, (self.world_size,))
        return self._mesh

    def barrier(self) -> None:
        """Wait until every process reaches this line (accelerate's ``wait_for_everyone``)."""
        if self.enabled:
            self._state.wait_for_everyone()

    def close(self, *, wait: bool = False) -> None:
        """Destroy this process's process group (torch's documented shutdown; call once per process, at the end).

        Without it, gloo's worker threads can outlive the interpreter and abort the process at exit, which the
        launcher reports as a failed run. No collective may follow; a second call, or one process, does nothing.

        Args:
            wait: first wait at a barrier until every process is here (a clean end of the run: no process tears down
                its connections while a peer is still in a collective). False (after an error) does not wait: the
                others may never arrive.
        """
        if self.enabled and not self.closed:
            if wait:
                self.barrier()
            self._state.destroy_process_group()
            self.closed = True
            self._mesh = None

    # ------------------------------------------------------------------ collectives
    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise sum of `tensor` (any float or integer tensor of the same shape and dtype on every process)
        over all processes (a new tensor; the input itself when W = 1)."""
        if not self.enabled:
            return tensor
        from accelerate.utils import reduce
        return reduce(tensor.detach().to(self.device), reduction="sum").to(tensor.device)  # reduce sums a copy

    def mean_stats(self, stats: Mapping[str, float]) -> dict[str, float]:
        """Average a flat dict of python floats over processes (one all-reduce); keys must match on every process."""
        if not self.enabled:
            return dict(stats)
        keys = sorted(stats)
        values = self.sum(torch.tensor([float(stats[k]) for k in keys], dtype=torch.float64)) / self.world_size
        return dict(zip(keys, values.tolist()))

    def pool_token_means(self, stats: Mapping[str, float], mask: torch.Tensor) -> tuple[dict[str, float], float]:
        """Pool one mini-batch's token means over processes, and this process's loss weight, in one all-reduce.

        With W processes, local token counts n_r and the global count N = Σ n_r:

        * each statistic becomes Σ_r n_r·s_r / N, the token mean over every process's tokens (a value equal on
          every process stays as it is);
        * the weight is n_r · W / N: averaging the per-process gradients of weight · masked_mean_r equals the
          gradient of the global masked mean Σ_r Σ_t l / N (TRL's token mean over the whole global mini-batch).

        Args:
            stats: python floats, the same keys on every process.
            mask: bool (b, T), this process's response tokens in the mini-batch.

        Returns:
            (pooled stats, weight); with one process (a copy of `stats`, 1.0).
        """
        if not self.enabled:
            return dict(stats), 1.0
        keys = sorted(stats)
        n = float(mask.sum())
        totals = self.sum(torch.tensor([float(stats[k]) * n for k in keys] + [n], dtype=torch.float64))
        total_tokens = float(totals[-1])
        return dict(zip(keys, (totals[:-1] / total_tokens).tolist())), n * self.world_size / total_tokens

    def any(self, flag: bool) -> bool:
        """True on every process if `flag` is True on any (e.g. a stop request that reached one process only)."""
        return self.mean_stats({"flag": float(flag)})["flag"] > 0

    def sync_gradients(self, params: Iterable[torch.nn.Parameter], bucket_numel: int = 1 << 24) -> None:
        """Average the gradients of `params` across processes in place.

        The gradients are all-reduced in flat fp32 buckets of at most `bucket_numel` elements (default 2^24: 64 MiB),
        so the extra memory is one bucket, not a copy of every gradient. A parameter without a gradient on this
        process contributes zeros (and receives the average), so every process ends with the same gradients and,
        after the same optimiser step, the same weights. FSDP2-sharded parameters (``DTensor``) are skipped: their
        gradients were already averaged by FSDP2's reduce-scatter in backward.
        """
        if not self.enabled:
            return
        import torch.distributed as torch_dist
        params = [p for p in params if p.requires_grad and not is_sharded(p)]
        if not params:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.nn.Parameter] = []
        size = 0
        for p in [*params, None]:  # None flushes the last bucket
            if p is not None and (not bucket or size + p.numel() <= bucket_numel):
                bucket.append(p)
                size += p.numel()
                continue
            flat = torch.cat([q.grad.reshape(-1).to(self.device, torch.float32) for q in bucket])  # (size,) fp32
            torch_dist.all_reduce(flat, op=torch_dist.ReduceOp.SUM)
            flat.div_(self.world_size)
            offset = 0
            for q in bucket:
                n = q.numel()
                q.grad.copy_(flat[offset:offset + n].view_as(q.grad))
                offset += n
            bucket, size = ([p], p.numel()) if p is not None else ([], 0)

    def broadcast_parameters(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Copy the main process's values of `params` to every process (identical starting weights). FSDP2 shards
        (``DTensor``) are skipped: each process holds another part, cut from weights broadcast before sharding
        (`trainers.loop.sharding.shard_agents`)."""
        if not self.enabled:
            return
        import torch.distributed as torch_dist
        with torch.no_grad():
            for p in params:  # in place, one tensor at a time: no second copy of the weights
                if not is_sharded(p):
                    torch_dist.broadcast(p.data, src=0)

    def max_abs_param_difference(self, params: Iterable[torch.nn.Parameter]) -> float:
        """Largest abs(θ_r − θ_0) over `params` and processes (0.0 with one process): a check that replicas agree
        (sharded parameters are compared whole, `trainers.loop.sharding.full_tensor`: a collective)."""
        if not self.enabled:
            return 0.0
        from accelerate.utils import broadcast, gather
        flat = torch.cat([full_tensor(p.detach()).reshape(-1).to(torch.float32) for p in params]).to(self.device)
        reference = broadcast(flat.clone(), from_process=0)
        return float(gather((flat - reference).abs().max().reshape(1)).max().item())
