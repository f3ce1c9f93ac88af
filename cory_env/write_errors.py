"""Write failures as `OSError` naming the file, whichever library wrote: what every write of the project wraps
itself in (a run's checkpoints, ``metrics.jsonl`` and ``samples.jsonl``, the outputs beside a run, ``cory export``,
the GGUF model's one-off conversion, `cory_env.hub`), so that a full disk or a file-size limit is the one-line error
a read-only folder already is.

Python's own writes raise `OSError` with the errno (ENOSPC: disk full; EFBIG: the file-size limit ``ulimit -f``,
RLIMIT_FSIZE) but not the file. The tensor writers lose the errno too: safetensors raises ``SafetensorError("... I/O error: File too large (os
error 27)")`` and ``torch.save`` a ``RuntimeError`` (``[enforce fail at inline_container.cc] unexpected pos``,
``basic_ios::clear``, ``PytorchStreamWriter failed writing file``). `write_errors` turns those into `OSError`: the
errno from the message when it holds one, else ENOSPC when the folder's file system has no space left, EFBIG when
the file reached the process's file-size limit, EIO otherwise.

>>> with write_errors("x.safetensors"):
...     raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
Traceback (most recent call last):
...
OSError: [Errno 5] [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598: 'x.safetensors'
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from typing import Iterator

__all__ = ["write_errors"]

#: The fix for the write failures a user can fix, by errno.
_HINTS = {errno.ENOSPC: "disk full: free space", errno.EFBIG: "a file-size limit, `ulimit -f`: raise it",
          errno.EDQUOT: "disk quota exceeded: free space or raise the quota"}
#: What torch.save's C++ writer says when a write fails (it keeps no errno).
_TORCH_WRITE_FAILURES = ("inline_container", "basic_ios", "PytorchStreamWriter", "file write failed")


def _errno_of(exc: BaseException, path: Path) -> tuple[int, bool]:
    """(errno, whether the message named it): ``(os error N)`` in the message, else what the file system says."""
    found = re.search(r"\(os error (\d+)\)", str(exc))
    if found:
        return int(found.group(1)), True
    with contextlib.suppress(OSError, ValueError, ImportError):
        if os.statvfs(path.parent).f_bavail == 0:
            return errno.ENOSPC, False
        import resource
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and path.exists() and path.stat().st_size >= limit:
            return errno.EFBIG, False
    return errno.EIO, False


def _is_write_failure(exc: BaseException) -> bool:
    if type(exc).__name__ == "SafetensorError":
        return "I/O error" in str(exc)
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _TORCH_WRITE_FAILURES)


def _with_hint(code: int, cause: str) -> str:
    hint = _HINTS.get(code)
    return f"{cause} ({hint})" if hint else cause


@contextlib.contextmanager
def write_errors(path: str | os.PathLike) -> Iterator[None]:
    """Run a write of `path` (``torch.save``, safetensors' ``save_file``, ``save_pretrained``, a Python file's
    ``write``); its write failure is raised as `OSError` with its errno, the cause (``strerror``: the library's own
    words when the errno is unknown, with the fix for a full disk or a file-size limit) and `path` (``filename``).
    An `OSError` that already names its file (``open`` of a folder it may not write) passes unchanged.

    Raises:
        OSError: the write failed (``errno`` ENOSPC, EFBIG, ..., EIO when unknown); other errors pass unchanged.
    """
    path = Path(path)
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, _with_hint(exc.errno, exc.strerror or str(exc)), str(path)) from exc
    except Exception as exc:
        if not _is_write_failure(exc):
            raise
        code, named = _errno_of(exc, path)
        cause = os.strerror(code) if named else str(exc) if code == errno.EIO else f"{os.strerror(code)} ({exc})"
        raise OSError(code, _with_hint(code, cause), str(path)) from exc
