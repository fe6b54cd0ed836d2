"""A sandbox's child processes: started so that they die with it, each in a process group of
its own, output appended to a log file (:func:`spawn_child`)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from pathlib import Path

__all__ = ["file_size", "spawn_child"]


def file_size(path: Path) -> int:
    """The size of the file at ``path``; 0 if there is none."""
    return path.stat().st_size if path.exists() else 0


def spawn_child(
    cmd: list[str], log_path: Path, nice: int = 0, env: tuple[tuple[str, str], ...] = ()
) -> subprocess.Popen[bytes]:
    """``cmd`` as a child that dies with this process, in a process group of its own (a
    Ctrl-C on this process's terminal is this process's to handle: it stops its children in
    order, and a child is never mistaken for one that failed), no input, its output appended
    to ``log_path``, at ``nice`` (added to this process's), with ``env`` added to the
    environment it inherits (through ``env NAME=VALUE ...``: only the CLI reads this process's
    environment)."""
    if env:
        cmd = ["env", *(f"{name}={value}" for name, value in env), *cmd]
    log_file = open(log_path, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,  # a background process group reading a terminal stops
            stdout=log_file,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=functools.partial(_prepare_child, nice),  # noqa: PLW1509
        )
    finally:
        log_file.close()


def _prepare_child(nice: int) -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if nice:
        os.nice(nice)
