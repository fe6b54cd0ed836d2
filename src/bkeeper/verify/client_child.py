"""The child side of a :class:`~bkeeper.verify.client_process.ClientProcess`: the ledger
workload's writers, each operation a JSON line on standard output, until standard input closes.

Apart from :mod:`~bkeeper.verify.client_process` because the workload starts client
processes (it imports that module) and the child runs the workload (it imports this one).
"""

from __future__ import annotations

import asyncio
import sys

from bkeeper.verify.client_process import READY, StreamHistory
from bkeeper.verify.workload import LedgerWorkload, WorkloadConfig

__all__ = ["run_client_process"]


async def run_client_process(uri: str, seed: int, name: str) -> None:
    """The child's work: the writers, each operation a line on standard output, until
    standard input closes."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def until_stdin_closes() -> None:
        await reader.read()  # the harness closes it (or exits): time to stop
        stop.set()

    watcher = asyncio.create_task(until_stdin_closes())
    config = WorkloadConfig(writers=2, readers=0)
    workload = LedgerWorkload(uri, StreamHistory(sys.stdout), seed, config)

    def started() -> None:
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()

    try:
        await workload.run_writers(stop, started)
    finally:
        watcher.cancel()
