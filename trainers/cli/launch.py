"""`cory train --num_processes N`: start N data-parallel training processes on this machine (``accelerate launch``).

The launcher checks the settings once (`preflight`), so that a mistake is one error line and not one traceback per
process, then runs ``python -m trainers.cli train ...`` (without ``--num_processes``) in every process and forwards
Ctrl-C / SIGTERM / SIGHUP to them (docs/distributed.md).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from typing import Sequence

from trainers.config import RunConfigs


def preflight(configs: RunConfigs, num_processes: int) -> None:
    """The checks every training process would run (`trainers.loop.plan.plan_run` on the same parsed configs), once,
    before any process starts. The tokenizer is loaded here (a GGUF model is converted into the shared cache once).

    Raises:
        ValueError / FileExistsError / FileNotFoundError / OSError: as `plan_run`.
    """
    from trainers.loop.loading import load_run_tokenizers
    from trainers.loop.plan import plan_run
    plan_run(configs, load_run_tokenizers(configs), num_processes=num_processes)


def free_port() -> int:
    """A TCP port that is free on this machine now (for the launcher's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_command(num_processes: int, program: Sequence[str], *, port: int | None = None) -> list[str]:
    """The ``accelerate launch`` command that runs `program` on `num_processes` processes of this machine.

    Args:
        num_processes: N >= 2.
        program: what each process runs, e.g. ``["-m", "trainers.cli", "train", "--preset", "tiny"]`` or
            ``["script.py", ...]``.
        port: the rendezvous port; default a free one.

    ``--multi_gpu`` selects accelerate's torchrun launcher, which also serves CPU-only machines (each process then
    trains on the CPU with the gloo backend; `trainers.distributed`).
    """
    return [sys.executable, "-m", "trainers.cli.launch", "--multi_gpu", "--num_machines", "1",
            "--num_processes", str(num_processes), "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port or free_port()), *program]


#: Set by `run_launcher` for the training processes: the folder where each writes its one-line error
#: (`trainers.cli.main`), so that the launcher prints each distinct error once.
ERROR_DIR_ENV = "CORY_ERROR_DIR"


def accelerate_launch(argv: Sequence[str]) -> int:
    """``accelerate launch ARGV`` in this process, returning the highest exit status of the training processes:
    torch's launcher reports a failed process by raising `ChildFailedError` (a traceback and a failure table
    after the process's own error line), which is caught here; the processes' errors are printed by
    `run_launcher`. Under `run_launcher`, torch's launcher logs into its temporary folder (removed at the end)
    instead of leaving a ``torchelastic_*`` folder in the system's temp directory at every run."""
    import logging
    import os
    from accelerate.commands.launch import launch_command as accelerate_launch_command
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    argv = list(argv)
    if os.environ.get(ERROR_DIR_ENV) and "--log_dir" not in argv:  # torch's own logs go with the launcher's folder
        argv[:0] = ["--log_dir", os.path.join(os.environ[ERROR_DIR_ENV], "torchelastic")]  # (else a /tmp folder each run)
    try:
        accelerate_launch_command(launch_command_parser().parse_args(argv))
    except ChildFailedError as err:
        return max((failure.exitcode for failure in err.failures.values()), default=1) or 1
    return 0


def run_launcher(cmd: list[str]) -> int:
    """Run the launcher in its own session to its end and return its exit status.

    SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) sent to this process are forwarded to the launcher,
    which asks every training process to stop (they finish the iteration and write a checkpoint within the
    launcher's shutdown timeout); this process keeps waiting, so no training process is orphaned. After a forwarded
    signal the exit status is 130, as for a one-process run stopped by Ctrl-C.
    """
    import os
    import tempfile
    errors = tempfile.TemporaryDirectory(prefix="cory-errors-")
    env = {**os.environ, ERROR_DIR_ENV: errors.name}
    # the terminal's Ctrl-C reaches us only: no double signal
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    forwarded: list[int] = []

    def forward(signum, frame):  # noqa: ARG001 - signal handler signature
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with errors:
            for line in process_errors(errors.name):
                print(line, file=sys.stderr)
    return 130 if forwarded and status != 0 else status


def process_errors(folder: str) -> list[str]:
    """The distinct error lines the training processes wrote into `folder` (``rank-N.txt``, `trainers.cli.main`), lowest
    rank first. Lines that differ only inside quotes (each process quotes its own offending text) are one error, printed
    once as the lowest rank wrote it; when the processes failed differently, each line names its processes."""
    import re
    from pathlib import Path
    by_error: dict[str, tuple[str, list[int]]] = {}
    files = sorted(Path(folder).glob("rank-*.txt"), key=lambda p: int(p.stem.removeprefix("rank-")))
    for path in files:
        line = path.read_text(encoding="utf-8").strip()
        if line:
            key = re.sub(r"'[^']*'", "''", line)
            by_error.setdefault(key, (line, []))[1].append(int(path.stem.removeprefix("rank-")))
    if len(by_error) == 1:
        return [line for line, _ in by_error.values()]
    return [f"{line} (process{'es' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
            for line, ranks in by_error.values()]


if __name__ == "__main__":  # ``python -m trainers.cli.launch ACCELERATE_ARGS``: what `launch_command` runs
    sys.exit(accelerate_launch(sys.argv[1:]))
