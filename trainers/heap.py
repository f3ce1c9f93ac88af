"""Keep freed memory in the process's heap for reuse (glibc malloc), so a training step's large tensors do not fault
fresh pages in at every allocation.

A CORY/PPO/GRPO iteration allocates and frees the same large tensors over and over: the (B, T, V) logits and their
log-softmax temporaries (8 × 12 × 49,152 fp32 = 18.9 MB per mini-batch with SmolLM2), the attention and MLP
activations, the gradients. glibc serves a block above its mmap threshold (128 KiB at first, raised as mapped blocks
are freed, up to 32 MiB) from a fresh ``mmap`` and unmaps it on ``free``, and it trims the heap's free top above its
trim threshold, so such tensors' pages are faulted in and zeroed by the kernel again step after step (measured:
docs/results/performance.md). With blocks up to `MMAP_THRESHOLD` served from the heap and up to `TRIM_THRESHOLD`
freed bytes kept, the same iteration faults a handful of pages. Every number a run computes is the same.

Memory: peak RSS moves by about 1 %; the resident memory no longer shrinks back after a peak, since freed memory
stays in the heap. Blocks above `MMAP_THRESHOLD` are still mapped.

The settings are the process's and stay for its life (glibc has no call that restores its dynamic threshold).
`CORYTrainer` applies them when `CORYConfig.heap_reuse` is on (the default), as it applies ``torch_threads``. They are
not applied where the user chose the allocator's behaviour (`user_allocator_settings`: glibc's ``MALLOC_*``
variables, ``GLIBC_TUNABLES`` malloc tunables, another malloc in ``LD_PRELOAD``), nor off glibc (macOS, Windows,
musl: no ``mallopt``).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "reuse_heap", "user_allocator_settings"]

logger = logging.getLogger(__name__)

#: ``mallopt`` parameters (glibc ``malloc.h``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Bytes: blocks up to this size come from the heap. A choice, not a glibc limit: the ceiling of glibc's own dynamic
#: threshold (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit), above every per-step tensor of the IMDB rung.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Bytes of free memory at the heap's top kept before glibc returns it to the system (1 GiB).
TRIM_THRESHOLD = 1024 ** 3
#: glibc's environment variables for the same settings (``mallopt(3)``).
_GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                    "MALLOC_ARENA_MAX")


def user_allocator_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """The allocator settings the user gave this process (`environ`, default ``os.environ``), which `reuse_heap`
    leaves alone.

    Returns:
        The names of the set variables among glibc's ``MALLOC_*`` (`_GLIBC_VARIABLES`), ``GLIBC_TUNABLES`` when it
        holds a ``glibc.malloc.`` tunable, and ``LD_PRELOAD`` when it preloads another malloc (a library whose name
        contains "malloc": jemalloc, tcmalloc, mimalloc); empty when there are none.
    """
    environ = os.environ if environ is None else environ
    found = [name for name in _GLIBC_VARIABLES if environ.get(name)]
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        found.append("GLIBC_TUNABLES")
    if "malloc" in environ.get("LD_PRELOAD", ""):
        found.append("LD_PRELOAD")
    return found


def reuse_heap() -> bool:
    """Ask glibc malloc to serve blocks up to `MMAP_THRESHOLD` from the heap and keep up to `TRIM_THRESHOLD` freed
    bytes for reuse (``mallopt(M_MMAP_THRESHOLD)``, ``mallopt(M_TRIM_THRESHOLD)``), unless the user set the
    allocator up (`user_allocator_settings`).

    Returns:
        True when both settings were accepted; False when the user's settings stand (logged at info level), off
        glibc (no ``mallopt``), or when glibc refused one (logged at debug level). Never raises.
    """
    chosen = user_allocator_settings()
    if chosen:
        logger.info("heap_reuse: leaving the allocator as %s set it", ", ".join(chosen))
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's mallopt where glibc is the libc
    except (OSError, AttributeError, TypeError):
        logger.debug("heap_reuse: no mallopt in this process (not glibc); allocator left as it is")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    accepted = [mallopt(param, value) == 1 for param, value in ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                                                (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))]
    if not all(accepted):
        logger.debug("heap_reuse: glibc refused a mallopt setting (accepted: %s); allocator partly left as it is",
                     accepted)
    return all(accepted)
