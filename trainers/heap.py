"""Keep freed memory in the process's heap for reuse (glibc malloc), so a training step's large tensors do not fault
fresh pages in at every allocation.

A CORY/PPO/GRPO iteration allocates and frees the same large tensors over and over: the (B, T, V) logits and their
log-softmax temporaries (8 × 12 × 49,152 fp32 = 18.9 MB per mini-batch with SmolLM2), the attention and MLP
activations, the gradients. glibc's default serves every block above its mmap threshold from a fresh ``mmap`` and
returns it to the system on ``free`` (and trims the heap's top above 128 KiB), so each such tensor's pages are
faulted in and zeroed by the kernel again at every step: ≈ 180,000 minor page faults and ≈ 0.25 s of system time per
GRPO iteration on the IMDB rung's settings (`benchmarks/iteration_profile.py`; docs/results/performance.md). With
blocks up to `MMAP_THRESHOLD_MAX` served from the heap and freed memory kept (`M_TRIM_THRESHOLD`), the same
iteration faults a handful of pages. The arithmetic is untouched: every number a run computes is the same.

Peak memory is unchanged (the peak is the peak); a process's resident memory no longer shrinks back after it.

Off glibc (macOS, Windows, musl) nothing is changed. The settings are the process's: `CORYTrainer` applies them
when `CORYConfig.heap_reuse` is on (the default), as it applies ``torch_threads``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MMAP_THRESHOLD_MAX", "TRIM_THRESHOLD", "reuse_heap"]

logger = logging.getLogger(__name__)

#: ``mallopt`` parameters (glibc ``malloc.h``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Bytes: blocks up to this size come from the heap; glibc's largest accepted mmap threshold on 64-bit
#: (``DEFAULT_MMAP_THRESHOLD_MAX`` = 4 MiB × sizeof(long)). Larger blocks (rare here) are still mapped.
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: Bytes of free memory at the heap's top kept before glibc returns it to the system (1 GiB).
TRIM_THRESHOLD = 1024 ** 3


def reuse_heap() -> bool:
    """Ask glibc malloc to serve blocks up to `MMAP_THRESHOLD_MAX` from the heap and keep up to `TRIM_THRESHOLD`
    freed bytes for reuse (``mallopt(M_MMAP_THRESHOLD)``, ``mallopt(M_TRIM_THRESHOLD)``).

    Returns:
        True when both settings were accepted; False off glibc (no ``mallopt``) or when glibc refused one (logged
        at debug level). Never raises.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        logger.debug("heap_reuse: no glibc mallopt in this process (%s); allocator left as it is", name)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    accepted = all(mallopt(param, value) == 1 for param, value in ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
                                                                   (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))
    if not accepted:
        logger.debug("heap_reuse: glibc refused a mallopt setting; allocator partly left as it is")
    return accepted
