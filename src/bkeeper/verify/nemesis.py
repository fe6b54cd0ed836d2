"""Faults on a real cluster's processes and disks (:class:`Nemesis`), healed on schedule.

* ``kill``: SIGKILL the bookie; heal: start it again with its data.
* ``pause``: SIGSTOP the bookie (past the ZooKeeper session timeout when held long); heal:
  SIGCONT.
* ``zk``: SIGKILL ZooKeeper; heal: start it again with its data.
* ``corrupt``: SIGKILL the bookie and flip one payload bit of recent entries in the last
  group of its newest journal; heal: start it again (its integrity check finds the damage).
* ``corrupt-entry-log``: SIGKILL the bookie and flip one payload bit of the last entry-log
  records of a recent ledger (entries the bookie's index, as checkpointed, places there;
  another ledger's when it holds no recent one);
  heal: start it again. Which entries were damaged is kept (:attr:`Nemesis.flipped`): the
  run checks at the end that each is whole again on that bookie, or no longer its to hold.
* ``disk-full``: fill the bookie's own filesystem (a tmpfs per bookie); heal: remove the
  filler.
* ``partition``: take the bookie's link to the others down (each bookie in a network
  namespace of its own: :mod:`bkeeper.verify.netns`); heal: bring it up.
* ``partition-zk`` / ``partition-clients``: cut the bookie from ZooKeeper only (it goes on
  serving clients while its session may expire) / from the clients only (it keeps its
  session and registration while no client reaches it); heal: join them again.
* ``slow-disk``: each fsync of the bookie waits the fault's ``sync_delay_ms`` first (the
  bookie runs with :data:`bkeeper.storage.slow_sync.ENV_VAR`); heal: no delay.
* ``client-kill``: SIGKILL the workload's client process (its ledgers stay open, entries in
  flight); heal: start a new one.
* ``zk-pause``: SIGSTOP ZooKeeper; heal: SIGCONT (held past the session timeout, every
  session expires at once: a storm of expiries and re-registrations).

Blocking steps (waiting for a process to be ready) run in a thread. A step that fails raises
:class:`~bkeeper.common.errors.BKeeperError`: the run reports it as a violation (a bookie
that cannot start again after a crash is one).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from bkeeper.common.errors import BKeeperError
from bkeeper.storage.slow_sync import set_sync_delay
from bkeeper.testing.entry_log_faults import FlippedEntries, flip_entry_log_records
from bkeeper.testing.journal_faults import apply_patches, journal_patches, newest_journal_file
from bkeeper.testing.sandbox import Sandbox
from bkeeper.testing.tmpfs import fill_disk
from bkeeper.verify.netns import Network
from bkeeper.verify.schedule import Fault

__all__ = ["FILLER_NAME", "RECENT_LEDGERS", "ClientProcesses", "Nemesis"]

log = logging.getLogger(__name__)

#: The file that fills a bookie's filesystem (``disk-full``), removed on heal.
FILLER_NAME = "verify-filler"

#: Ledgers the ``corrupt`` nemeses pick from (the newest that has entries where they look):
#: the journal's last group holds the newest; entry logs, those before the last checkpoint.
RECENT_LEDGERS = 256


class ClientProcesses(Protocol):
    """What ``client-kill`` needs of the workload."""

    async def kill_client_process(self) -> None: ...

    async def restart_client_process(self) -> None: ...


#: The partial partitions: what each one cuts a bookie off from (a :mod:`~bkeeper.verify.netns`
#: peer).
_CUTS = {"partition-zk": "zookeeper", "partition-clients": "clients"}

#: Seconds a killed process has to exit.
_EXIT_TIMEOUT_S = 10.0


class Nemesis:
    """Injects and heals :class:`~bkeeper.verify.schedule.Fault` s on ``sandbox`` (None: a
    cluster given with ``--metadata``, whose processes are not verify's: only
    ``client-kill``).

    ``disks``: bookie index -> its own filesystem (for ``disk-full``); ``recent_ledgers``:
    ledgers the workload wrote last (``corrupt`` flips entries of one of them)."""

    def __init__(
        self,
        sandbox: Sandbox | None,
        recent_ledgers: Callable[[], list[int]],
        disks: dict[int, Path] | None = None,
        network: Network | None = None,
        clients: ClientProcesses | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.recent_ledgers = recent_ledgers
        self.disks = disks or {}
        self.network = network
        self.clients = clients
        #: bookie index and entries damaged in its entry logs (``corrupt-entry-log``)
        self.flipped: list[tuple[int, FlippedEntries]] = []

    async def inject(self, fault: Fault) -> str:
        kind, target = fault.kind, fault.target
        if kind == "zk":
            await asyncio.to_thread(self._kill_zookeeper)
            return "ZooKeeper killed"
        if kind == "zk-pause":
            os.kill(self._zookeeper_pid(), signal.SIGSTOP)
            return "ZooKeeper stopped (SIGSTOP)"
        if kind == "client-kill":
            await self._clients().kill_client_process()
            return "client process killed"
        assert target is not None
        if kind == "kill":
            await asyncio.to_thread(self._kill_bookie, target)
            return f"bookie {target} killed"
        if kind == "pause":
            self._sandbox().kill_bookie(target, signal.SIGSTOP)
            return f"bookie {target} stopped (SIGSTOP)"
        if kind == "corrupt":
            await asyncio.to_thread(self._kill_bookie, target)
            return await asyncio.to_thread(self._corrupt, target)
        if kind == "corrupt-entry-log":
            await asyncio.to_thread(self._kill_bookie, target)
            return await asyncio.to_thread(self._corrupt_entry_log, target)
        if kind == "disk-full":
            disk = self.disks.get(target)
            if disk is None:
                raise BKeeperError(f"bookie {target} has no filesystem of its own to fill")
            await asyncio.to_thread(fill_disk, disk / FILLER_NAME, None)
            return f"bookie {target}'s filesystem filled"
        if kind == "partition":
            await asyncio.to_thread(self._network().isolate, target)
            return f"bookie {target} cut off from every other process"
        if kind in _CUTS:
            await asyncio.to_thread(self._network().cut, target, _CUTS[kind])
            return f"bookie {target} cut off from {_CUTS[kind]}"
        if kind == "slow-disk":
            set_sync_delay(self._sandbox().bookie_data_dir(target), fault.sync_delay_ms)
            return f"bookie {target}'s fsyncs each held up {fault.sync_delay_ms} ms"
        raise BKeeperError(f"unknown fault {kind!r}")

    async def heal(self, fault: Fault) -> str:
        kind, target = fault.kind, fault.target
        if kind == "zk":
            await asyncio.to_thread(self._sandbox().zookeeper.start)
            return "ZooKeeper started again"
        if kind == "zk-pause":
            os.kill(self._zookeeper_pid(), signal.SIGCONT)
            return "ZooKeeper continued (SIGCONT)"
        if kind == "client-kill":
            await self._clients().restart_client_process()
            return "a new client process started"
        assert target is not None
        if kind in ("kill", "corrupt", "corrupt-entry-log"):
            await asyncio.to_thread(self._sandbox().restart_bookie, target)
            return f"bookie {target} started again"
        if kind == "pause":
            self._sandbox().kill_bookie(target, signal.SIGCONT)
            return f"bookie {target} continued (SIGCONT)"
        if kind == "disk-full":
            (self.disks[target] / FILLER_NAME).unlink(missing_ok=True)
            return f"bookie {target}'s filler removed"
        if kind == "partition":
            await asyncio.to_thread(self._network().heal, target)
            return f"bookie {target} connected again"
        if kind in _CUTS:
            await asyncio.to_thread(self._network().uncut, target, _CUTS[kind])
            return f"bookie {target} joined to {_CUTS[kind]} again"
        if kind == "slow-disk":
            set_sync_delay(self._sandbox().bookie_data_dir(target), None)
            return f"bookie {target}'s fsyncs no longer held up"
        raise BKeeperError(f"unknown fault {kind!r}")

    def _sandbox(self) -> Sandbox:
        if self.sandbox is None:
            raise BKeeperError("the cluster is not verify's own (--metadata): no process to fault")
        return self.sandbox

    def _network(self) -> Network:
        if self.network is None:
            raise BKeeperError("the bookies are not in network namespaces: no partition")
        return self.network

    def _kill_bookie(self, index: int) -> None:
        self._sandbox().kill_bookie(index, signal.SIGKILL)
        try:
            self._sandbox().bookies[index].wait(_EXIT_TIMEOUT_S)
        except Exception as exc:
            raise BKeeperError(f"bookie {index} did not exit after SIGKILL: {exc}") from exc

    def _clients(self) -> ClientProcesses:
        if self.clients is None:
            raise BKeeperError("the workload runs no client process: no client-kill")
        return self.clients

    def _zookeeper_pid(self) -> int:
        pid = self._sandbox().zookeeper.pid
        if pid is None:
            raise BKeeperError("ZooKeeper is not running")
        return pid

    def _kill_zookeeper(self) -> None:
        server = self._sandbox().zookeeper
        os.kill(self._zookeeper_pid(), signal.SIGKILL)
        server.wait()
        server.stop()  # reaps it and forgets the process

    def _corrupt_entry_log(self, index: int) -> str:
        data_dir = self._sandbox().bookie_data_dir(index)
        # The recent ledgers first; any other in its entry logs when the bookie holds none
        # of them (placement left it out of their ensembles, or it was full, partitioned
        # or just restarted): CI saw a run flip nothing that way.
        flipped = flip_entry_log_records(data_dir, self.recent_ledgers(), any_ledger=True)
        if flipped is None:
            return f"bookie {index} killed (no entry in its entry logs yet)"
        self.flipped.append((index, flipped))
        ids = ", ".join(map(str, flipped.entry_ids))
        where = f"ledger {flipped.ledger_id} entries {ids}"
        return f"bookie {index} killed, {where} flipped in its entry log"

    def _corrupt(self, index: int) -> str:
        journal_dir = self._sandbox().bookie_data_dir(index) / "current" / "journal"
        try:
            path = newest_journal_file(journal_dir)
        except FileNotFoundError:
            return f"bookie {index} killed (no journal to corrupt)"
        data = Path(path).read_bytes()
        for ledger_id in reversed(self.recent_ledgers()):
            try:
                patches = journal_patches(data, ledger_id, None)
            except ValueError:
                continue
            apply_patches(path, patches)
            ids = ", ".join(map(str, patches.entry_ids[:5]))
            return f"bookie {index} killed, ledger {ledger_id} entries {ids} flipped in its journal"
        return f"bookie {index} killed (its last journal group holds no recent entry)"
