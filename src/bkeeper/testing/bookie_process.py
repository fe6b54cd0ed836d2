"""Start ``bkeeper bookie`` processes for tests and tools, on a port the bookie picks itself.

Picking a free port, releasing it and handing it to a child races with every other process
on the machine. A bookie started with ``--port 0`` binds a free port itself and prints
``bookie <id> ready on <host>:<port>`` once it listens and is registered; :func:`wait_ready`
reads that line from the bookie's log file and returns the port. A restart of the same bookie
must reuse that port (its cookie holds its id, ``host:port``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Protocol

from bkeeper.common.errors import BKeeperError

__all__ = ["READY_LINE", "BookieProcess", "wait_ready"]

#: What ``bkeeper bookie`` prints once it serves (and, with a metadata URI, is registered).
READY_LINE = re.compile(rb"bookie \S+ ready on [^\s]+:(\d+)")


class BookieProcess(Protocol):
    """What :func:`wait_ready` needs of a bookie's process: a ``subprocess.Popen``, or a
    fork server's child with the same methods (the tests' ``tests/forkserver.py``)."""

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def wait_ready(proc: BookieProcess, log_path: Path, offset: int, timeout_s: float = 60.0) -> int:
    """The port of the bookie ``proc`` once its ready line appears in ``log_path`` after
    byte ``offset``. A bookie that exits first, or is not ready within ``timeout_s``, raises
    ``BKeeperError`` naming its last log line; one still running then is killed and reaped,
    so a failed start leaves no process behind."""
    deadline = time.monotonic() + timeout_s
    output = b""
    while time.monotonic() < deadline:
        with log_path.open("rb") as log:
            log.seek(offset)
            output = log.read()
        found = READY_LINE.search(output)
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise BKeeperError(
                f"bookie exited with code {proc.poll()} before it was ready: "
                f"{_last_line(output)} (log: {log_path})"
            )
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise BKeeperError(
        f"bookie not ready within {timeout_s:g} s (killed): {_last_line(output)} (log: {log_path})"
    )


def _last_line(output: bytes) -> str:
    lines = output.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"
