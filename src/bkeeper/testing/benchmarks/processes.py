"""Free local ports and a ``bkeeper bookie`` child process, for benchmarks and tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from bkeeper.common.errors import BKeeperError
from bkeeper.testing import zookeeper

__all__ = ["free_port", "free_port_range", "local_bookie", "local_bookie_process"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (:func:`bkeeper.testing.zookeeper.
    free_port`: outside the ephemeral range, so no other process's bind to port 0 takes it)."""
    return zookeeper.free_port("127.0.0.1")


def free_port_range(count: int, attempts: int = 50) -> int:
    """A base port ``p`` with ``p .. p + count - 1`` all free right now."""
    for _ in range(attempts):
        base = free_port()
        if base + count >= 65536:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise BKeeperError(f"found no {count} consecutive free ports")


@contextlib.contextmanager
def local_bookie(
    data_dir: str | None = None, port: int | None = None, extra_args: tuple[str, ...] = ()
) -> Iterator[tuple[str, int]]:
    """Start ``bkeeper bookie`` as a child process; stop it with SIGTERM on exit."""
    with local_bookie_process(data_dir, port, extra_args) as (host, bound_port, _):
        yield host, bound_port


@contextlib.contextmanager
def local_bookie_process(
    data_dir: str | None = None,
    port: int | None = None,
    extra_args: tuple[str, ...] = (),
    log_path: str | None = None,
) -> Iterator[tuple[str, int, subprocess.Popen[bytes]]]:
    """:func:`local_bookie` that also yields the process; its output goes to ``log_path``
    (appended) when given."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bkeeper-bench-"))
        port = port or free_port()
        cmd = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", data_dir]
        log = stack.enter_context(open(log_path, "ab")) if log_path else None
        proc = subprocess.Popen(
            [*cmd, "--port", str(port), *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
        )
        try:
            _wait_port("127.0.0.1", port, proc, 30.0)
            yield "127.0.0.1", port, proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the bookie ``proc`` listens on ``host:port``. One that does not in time is
    killed and reaped before the error, so a failed start leaves no process behind."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BKeeperError(f"bookie exited with code {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise BKeeperError(f"bookie did not listen on {host}:{port} within {timeout_s} s (killed)")
