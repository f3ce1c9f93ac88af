"""Heap reuse (trainers.heap) and the fill-free deterministic mode: the process settings a trainer applies for speed,
which must change no number."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import trainers.loop.cory as cory_loop
from trainers import heap
from trainers.loop.build import seed_everything
from trainers.loop.cory import CORYTrainer

ROOT = Path(__file__).resolve().parents[2]
# mallinfo2 (glibc >= 2.33) reads glibc's own counters
glibc_counters = pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not hasattr(ctypes.CDLL(None), "mallinfo2"),
                                    reason="needs glibc >= 2.33 (mallopt, mallinfo2)")

# In a fresh process: read glibc's counters (mallinfo2: `arena` bytes of heap, `uordblks` of them in use, `hblkhd`
# bytes in separate mappings),
# allocate five 20 MiB blocks, read them again, free the blocks, read once more. By default a block that size is a
# mapping of its own, returned to the system on free (its pages fault in afresh next time: ≈ 180,000 faults per GRPO
# iteration); with the heap reused it comes from the heap, which keeps the freed memory.
_COUNTERS = textwrap.dedent("""
    import ctypes, json, sys
    import torch
    from trainers.heap import reuse_heap
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                         "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "reuse":
        assert reuse_heap()
    start = libc.mallinfo2()
    blocks = [torch.empty(5 * 1024 * 1024).fill_(1.0) for _ in range(5)]
    held = libc.mallinfo2()
    del blocks
    freed = libc.mallinfo2()
    print(json.dumps({"held_mapped": held.hblkhd - start.hblkhd, "held_heap": held.uordblks - start.uordblks,
                      "grown_heap": held.arena - start.arena, "trimmed": held.arena - freed.arena}))
""")
MIB = 1024 * 1024


def _clean_env() -> dict[str, str]:
    """This process's environment without the user's allocator settings (which `reuse_heap` leaves alone)."""
    drop = {"GLIBC_TUNABLES", "LD_PRELOAD", *heap._GLIBC_VARIABLES}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONPATH": str(ROOT)}


def _counters(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _COUNTERS, mode], capture_output=True, text=True, check=True,
                         env=_clean_env())
    return json.loads(out.stdout.splitlines()[-1])


@glibc_counters
def test_reused_heap_serves_and_keeps_large_blocks():
    default, reused = _counters("default"), _counters("reuse")
    assert default["held_mapped"] >= 100 * MIB  # glibc's default: each block its own mapping
    # from the heap instead (bytes in use there: the heap may already hold some free bytes, so it grows a little less)
    assert reused["held_mapped"] < 100 * MIB and reused["held_heap"] >= 100 * MIB
    assert reused["grown_heap"] >= 90 * MIB and reused["trimmed"] == 0  # and kept after the free, not trimmed away


def test_reuse_heap_leaves_the_users_allocator_settings(monkeypatch, caplog):
    for name, value in (("MALLOC_MMAP_THRESHOLD_", "1048576"), ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"),
                        ("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")):
        with monkeypatch.context() as m:
            m.setattr(os, "environ", {name: value})
            assert heap.user_allocator_settings() == [name]
            with caplog.at_level(logging.INFO, logger="trainers.heap"):
                assert heap.reuse_heap() is False
            assert name in caplog.text
    assert heap.user_allocator_settings({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "LD_PRELOAD": "libgomp.so"}) == []


def test_reuse_heap_is_a_no_op_without_mallopt(monkeypatch):
    monkeypatch.setattr(heap, "user_allocator_settings", lambda: [])
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())  # a C library without mallopt (macOS, musl, Windows)
    assert heap.reuse_heap() is False


def test_trainer_applies_heap_reuse_only_when_asked(tiny_run, monkeypatch):
    calls = []
    monkeypatch.setattr(cory_loop, "reuse_heap", lambda: calls.append(1) or True)
    CORYTrainer(tiny_run(num_iterations=1))
    assert calls == [1]
    CORYTrainer(tiny_run(num_iterations=1, heap_reuse=False, overwrite=True))
    assert calls == [1]


def test_deterministic_mode_skips_torch_nan_fill():
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory)
    try:
        torch.utils.deterministic.fill_uninitialized_memory = True  # torch's default, whatever ran before
        seed_everything(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.utils.deterministic.fill_uninitialized_memory = saved[2]
