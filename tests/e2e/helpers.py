"""Running ``bkeeper`` as a user does, for the end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.cli.runner import run_cli_async
from tests.forkserver import fork_server


def bkeeper(uri: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS --metadata URI`` as a process of its own, its output captured
    as text; forked by this test process's fork server (tests/forkserver.py: no Python
    start-up and import for each)."""
    return fork_server().run([*args, "--metadata", uri], input=stdin, timeout=120)


async def run_in_process(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS --metadata URI`` in this process (``tests/cli/runner.py``; in a thread:
    a command runs its own loop)."""
    return await run_cli_async(*args, "--metadata", uri)


async def run_process(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS --metadata URI``: a real process, from a coroutine."""
    return await asyncio.to_thread(bkeeper, uri, *args)


def one_error_line(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The one ``error:`` line a command that failed with ``code`` printed."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def processes_mentioning(text: str) -> list[int]:
    """The pids of processes (not this one) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def append_process(uri: str, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """``bkeeper log append NAME`` reading a pipe; killed if the test fails before it ends
    (one left waiting on its standard input would keep reconnecting to a ZooKeeper port
    long gone, which another process may have taken since)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "log", "append", name, "--metadata", uri],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
