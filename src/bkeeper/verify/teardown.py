"""Ending a verification run's processes and resources, each counted in its
:class:`~bkeeper.verify.status.Cleanup` (what a stopped run says it cleaned up)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bkeeper.testing.sandbox import Sandbox
from bkeeper.verify.kv_workload import KvWorkload
from bkeeper.verify.log_workload import LogWorkload
from bkeeper.verify.netns import Network
from bkeeper.verify.status import Cleanup
from bkeeper.verify.workload import LedgerWorkload

__all__ = ["count_mounts", "counted_temp_dir", "kill_processes", "teardown_counted"]


def kill_processes(
    sandbox: Sandbox | None,
    workload: LedgerWorkload | LogWorkload | KvWorkload | None,
    cleanup: Cleanup,
) -> None:
    """SIGKILL every process of the run that still runs (a stop: :func:`stop.killing`; it
    only sends signals), counted in ``cleanup``: ZooKeeper, the bookies and what runs beside
    them, the kv members, the workload's client process. The unwinding then waits for none."""
    pids: list[int | None] = []
    if sandbox is not None:
        if sandbox.zookeeper.wait_nowait() is None:  # (not one the zk nemesis killed)
            pids.append(sandbox.zookeeper.pid)
        procs = [*sandbox.bookies, *sandbox.autorecoveries]
        procs += [] if sandbox.dashboard is None else [sandbox.dashboard]
        pids += [p.pid for p in procs if p.poll() is None]
    if isinstance(workload, KvWorkload):
        pids += [m.proc.pid for m in workload.members if m.proc and m.proc.poll() is None]
    if isinstance(workload, LedgerWorkload) and workload.client_process is not None:
        pids.append(workload.client_process.running_pid)
    for pid in pids:
        if pid is None or pid in cleanup.killed:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # already gone (or reaped)
        cleanup.killed.add(pid)
        cleanup.processes += 1


def teardown_counted(network: Network, cleanup: Cleanup) -> None:
    namespaces = network.bookies + network.members
    network.teardown()
    cleanup.namespaces += namespaces


def count_mounts(cleanup: Cleanup, disks: dict[int, Path]) -> None:
    cleanup.mounts += len(disks)


@contextlib.contextmanager
def counted_temp_dir(cleanup: Cleanup) -> Iterator[str]:
    try:
        with tempfile.TemporaryDirectory(prefix="bkeeper-verify-") as tmp:
            yield tmp
    finally:
        cleanup.temp_dirs += 1
