"""Test-only data-parallel group: two processes holding exactly the same data, simulated in one process."""

from __future__ import annotations

from trainers.distributed import DataParallel


class TwoIdenticalProcesses(DataParallel):
    """A data-parallel group of two processes holding exactly the same data, in one process: every all-reduce sum
    doubles its input; averaging equal gradients leaves them as they are. The real collectives are tested end to
    end by the DDP subprocess tests (tests/trainers/test_distributed.py)."""

    def __init__(self):
        super().__init__()
        self.world_size = 2
        self.synced = 0  # gradient averagings asked for

    def sum(self, tensor):
        return 2 * tensor

    def sync_gradients(self, params, bucket_numel=1 << 24):
        self.synced += 1  # equal gradients: their average is themselves
