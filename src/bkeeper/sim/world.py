"""The simulated cluster: real bookies on in-memory disks, the metadata service, the network.

Each bookie is the production :class:`~bkeeper.server.bookie.Bookie` (listener, handlers,
registration, checkpoints, garbage collection) over the production storage engine, given the
simulator's ports: a :class:`~bkeeper.storage.MemoryFileSystem` (crashable), the virtual
clock, green threads (:mod:`bkeeper.sim.green`) for its journal and flusher, and the
simulated network and metadata service through the loop. Each runs as a node named
``bookie-<i>`` (its host; its id is ``bookie-<i>:3181``).

A bookie that fails to start while faults are on (a metadata request lost on its way) is
started again every :data:`RESTART_DELAY_S`, as its service manager would (``deploy/``'s
systemd unit: ``Restart=on-failure``); once every fault is healed it must start at the first
try, or the run fails.

With ``autorecovery``, each bookie node also runs auto-recovery (an auditor candidate and a
replication worker, as ``bkeeper bookie`` runs it in the bookie's process), started with the
bookie, gone with its crash; a failed start (the metadata service away) is tried again
every :data:`RESTART_DELAY_S`.

A **crash** is a process death: the storage stops where it is without writing what is queued,
the disk loses what was not synced (the last unsynced write of a file may survive torn), the
node's connections reset, its metadata sessions end one session timeout later, and its tasks
are cancelled. A **restart** opens a new bookie on what the disk kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.scrubbing import maintain_storage
from bkeeper.autorecovery.service import AutoRecovery
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import (
    BKeeperError,
    DataUnknownError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.memory import drop_memory_tree, memory_tree
from bkeeper.server.bookie import Bookie
from bkeeper.server.config import BookieConfig
from bkeeper.sim.green import GreenThreads
from bkeeper.sim.loop import SimClock, SimLoop
from bkeeper.sim.metastore import SimStoreFaults
from bkeeper.sim.net import SimNetwork
from bkeeper.sim.trace import Trace
from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.journal_format import (
    GROUP_HEADER_BYTES,
    decode_group_header,
    journal_file_id,
)
from bkeeper.testing.journal_faults import journal_patches, last_group_ledgers

__all__ = ["BOOKIE_PORT", "SimBookie", "World"]

log = logging.getLogger(__name__)

T = TypeVar("T")

BOOKIE_PORT = 3181
#: A bookie that failed to start is started again this long after (systemd's RestartSec).
RESTART_DELAY_S = 1.0


@dataclass
class SimBookie:
    name: str
    fs: MemoryFileSystem = field(default_factory=MemoryFileSystem)
    bookie: Bookie | None = None
    threads: GreenThreads | None = None
    #: the bookie being started (its ``start`` not done yet), which a crash kills too
    starting: tuple[Bookie, GreenThreads] | None = None
    starts: int = 0
    autorecovery: asyncio.Task[None] | None = None
    #: the integrity check of ledgers in limbo (``maintain_storage``), as ``bkeeper bookie``
    maintenance: asyncio.Task[None] | None = None
    #: ledgers whose entries a ``corrupt`` fault damaged on this bookie (until it repaired them)
    damaged: set[int] = field(default_factory=set)
    #: ledger -> entries damaged in a whole journal group since the bookie last started: at
    #: its next start it must hold them or answer "unknown" for the ledger, never "absent"
    denied_never: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def bookie_id(self) -> str:
        return f"{self.name}:{BOOKIE_PORT}"

    @property
    def up(self) -> bool:
        return self.bookie is not None


class World:
    """``World(loop, name, rngs, trace, bookies)``; ``await world.start()``."""

    def __init__(
        self,
        loop: SimLoop,
        name: str,
        net_rng: random.Random,
        meta_rng: random.Random,
        disk_rng: random.Random,
        trace: Trace,
        bookies: int,
        bookie_options: dict[str, Any] | None = None,
        autorecovery: AutoRecoveryConfig | None = None,
    ) -> None:
        self.loop = loop
        self.name = name
        self.uri = f"memory://{name}/ledgers"
        self.trace = trace
        self.net = SimNetwork(loop, net_rng, trace)
        self.tree = memory_tree(name)
        self.meta = SimStoreFaults(loop, self.tree, meta_rng, trace)
        self.disk_rng = disk_rng
        self.bookies = [SimBookie(f"bookie-{i}") for i in range(bookies)]
        #: No scrub passes (the simulator damages journals, not entry logs, so far): only the
        #: integrity check of ledgers in limbo runs, as ``bkeeper bookie`` runs it.
        self.bookie_options = {"scrub_interval_ms": 0, **(bookie_options or {})}
        self.autorecovery = autorecovery
        self.clock = SimClock()
        #: What went wrong that is the simulator's finding, not a workload's (a bookie that
        #: could not start again on what its disk kept, a green thread that raised).
        self.failures: list[str] = []

    # -- running code as a node ----------------------------------------------------------
    def spawn(self, node: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` as a task of ``node``."""
        task: asyncio.Task[T] = self.loop.run_as(node, lambda: self.loop.create_task(coro))
        return task

    async def as_node(self, node: str, coro: Coroutine[Any, Any, T]) -> T:
        return await self.spawn(node, coro)

    # -- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.as_node("admin", self._format())
        for bookie in self.bookies:
            await self.start_bookie(bookie)

    async def _format(self) -> None:
        cluster = await ClusterMetadata.open(self.uri)
        try:
            await cluster.format()
        finally:
            await cluster.aclose()

    async def supervise(self, sim: SimBookie) -> None:
        """Start ``sim`` until it is up (module doc)."""
        while not sim.up:
            if await self.start_bookie(sim, must=False):
                return
            await asyncio.sleep(RESTART_DELAY_S)

    async def start_bookie(self, sim: SimBookie, *, must: bool = True) -> bool:
        """Start (or start again) ``sim`` on its disk; False if it cannot (a failure noted
        when it ``must``)."""
        self.net.revive(sim.name)
        config = BookieConfig(
            data_dir=f"/data/{sim.name}",
            host=sim.name,
            port=BOOKIE_PORT,
            metadata_uri=self.uri,
            metrics_enabled=False,
            **self.bookie_options,
        )
        threads = GreenThreads(self.loop)
        bookie = Bookie(config, fs=sim.fs, clock=self.clock, threads=threads)
        sim.starts += 1
        self.trace.event(sim.name, f"start #{sim.starts}")
        sim.starting = (bookie, threads)
        start = self.spawn(sim.name, bookie.start())
        try:
            await start
        except asyncio.CancelledError:
            if start.done() and not start.cancelled() and start.exception() is None:
                self._up(sim, bookie, threads)  # called off just as it was up: it is up
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # called off (by a new crash of the bookie, or the end of the faults)
            if sim.starting is None:
                return False  # crashed while it started (crash_bookie)
            raise
        except Exception as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # called off while the start was failing: the cancel went to the start, which
                # ended with its own error; this task still must end
                raise asyncio.CancelledError(f"start of {sim.name} called off") from exc
            if sim.starting is None:
                return False  # crashed while it started: its start failed for that
            sim.starting = None
            if must:
                self.failures.append(f"{sim.name} did not start (start #{sim.starts}): {exc!r}")
            self.trace.event(sim.name, f"start failed: {exc!r}")
            self.net.kill(sim.name)
            self.meta.node_died(sim.name)
            for task in self.loop.node_tasks(sim.name):
                task.cancel()
            return False
        self._up(sim, bookie, threads)
        return True

    def _up(self, sim: SimBookie, bookie: Bookie, threads: GreenThreads) -> None:
        """``bookie`` started: it serves, with its integrity check and auto-recovery."""
        sim.starting = None
        sim.bookie, sim.threads = bookie, threads
        self._check_damage_answers(sim, bookie)
        sim.maintenance = self.spawn(sim.name, maintain_storage(bookie, self.uri, True, self.clock))
        if self.autorecovery is not None:
            sim.autorecovery = self.spawn(sim.name, self._run_autorecovery(sim, self.autorecovery))

    async def _run_autorecovery(self, sim: SimBookie, config: AutoRecoveryConfig) -> None:
        """Auto-recovery in ``sim``'s node until cancelled (module doc)."""
        while True:
            try:
                async with (
                    BookKeeper(self.uri, clock=self.clock) as bk,
                    AutoRecovery(bk, sim.bookie_id, config, clock=self.clock),
                ):
                    await asyncio.Event().wait()
            except BKeeperError as exc:
                self.trace.event(sim.name, f"autorecovery failed: {exc!r}")
                await asyncio.sleep(RESTART_DELAY_S)

    def crash_bookie(self, sim: SimBookie) -> None:
        """Process death (module doc), also of a bookie still starting."""
        bookie, threads = sim.bookie, sim.threads
        if bookie is None and sim.starting is not None:
            (bookie, threads), sim.starting = sim.starting, None
            self.trace.event(sim.name, "crash while starting")
        if bookie is None:
            return
        self.trace.event(sim.name, "crash")
        sim.bookie = sim.threads = None
        sim.autorecovery = sim.maintenance = None  # their tasks are the node's: cancelled below
        if bookie.storage is not None:
            bookie.storage.abort()
        sim.fs = sim.fs.crash(torn=self.disk_rng)
        self.net.kill(sim.name)
        self.meta.node_died(sim.name)
        for task in self.loop.node_tasks(sim.name):
            task.cancel()
        if threads is not None:
            self._note_thread_errors(sim.name, threads)

    def corrupt_journal(self, sim: SimBookie) -> str:
        """Flip one payload bit of each entry of one ledger (the one with the most) in the last
        group of ``sim``'s newest journal file, durably: media damage to synced, perhaps
        acknowledged, data. Done to a crashed bookie (module doc); what it damaged."""
        journal_dir = f"/data/{sim.name}/current/journal"
        fs = sim.fs
        names = [n for n in fs.list_dir(journal_dir) if journal_file_id(n) is not None]
        if not names:
            return "no journal file"
        path = f"{journal_dir}/{max(names, key=lambda n: journal_file_id(n) or 0)}"
        data = fs.read_file(path)
        try:
            ledgers = last_group_ledgers(data)
        except ValueError as exc:
            return f"nothing damaged ({exc})"
        if not ledgers:
            return "no entry in the last journal group"
        # The fault model: media damage to one replica of acknowledged data, repaired from the
        # others. A ledger damaged on another bookie and not repaired there yet is left alone:
        # with its entries damaged on two replicas (the ack quorum), nothing could repair them.
        spared = [x for x in ledgers if not self._unrepaired(x, sim)]
        if not spared:
            return f"nothing damaged (ledgers {ledgers} are damaged on another bookie, unrepaired)"
        patches = journal_patches(data, spared[0], None)
        for offset, value in patches.patches:
            fs.corrupt(path, offset, value)
        sim.damaged.add(spared[0])
        header = decode_group_header(data, patches.group_offset)
        whole = not isinstance(header, str) and (
            patches.group_offset + GROUP_HEADER_BYTES + header.records_bytes <= len(data)
        )
        if whole:  # a torn group (bytes missing) is cut at replay: "absent" is right there
            sim.denied_never[spared[0]] = patches.entry_ids
        ids = ", ".join(map(str, patches.entry_ids[:5]))
        return f"ledger {spared[0]} entries {ids} damaged in {path}"

    def _check_damage_answers(self, sim: SimBookie, bookie: Bookie) -> None:
        """The entries damaged in whole journal groups while ``sim`` was down: right after its
        start (before its integrity check repairs anything) each is there, whole, or its
        ledger is in limbo ("unknown"). "Absent" would let a recovery end the ledger before
        entries that may have been acknowledged (the rule of a bookie unsure of its data)."""
        damaged, sim.denied_never = sim.denied_never, {}
        storage = bookie.storage
        if storage is None or storage.limbo:
            return
        limbo = set(storage.limbo_ledgers())
        for ledger_id, entry_ids in sorted(damaged.items()):
            if ledger_id in limbo:
                continue
            for entry_id in entry_ids:
                try:
                    storage.read_entry(ledger_id, entry_id)
                except (NoSuchEntryError, NoSuchLedgerError) as exc:
                    self.failures.append(
                        f"{sim.name} answers 'absent' for ledger {ledger_id} entry {entry_id}, "
                        f"damaged in a whole group of its journal ({exc}); it must answer "
                        "'unknown' until it is repaired"
                    )
                    return
                except DataUnknownError:
                    continue

    def _unrepaired(self, ledger_id: int, besides: SimBookie) -> bool:
        """Whether a bookie other than ``besides`` still has ``ledger_id`` damaged: it is
        down since the damage, or up with the ledger (or its whole storage) in limbo."""
        for other in self.bookies:
            if other is besides or ledger_id not in other.damaged:
                continue
            storage = other.bookie.storage if other.bookie is not None else None
            if storage is None or storage.limbo or ledger_id in storage.limbo_ledgers():
                return True
            other.damaged.discard(ledger_id)  # repaired by its integrity check
        return False

    def _note_thread_errors(self, name: str, threads: GreenThreads) -> None:
        for error in threads.errors:
            self.failures.append(f"{name}: a storage thread raised {error!r}")
        threads.errors.clear()

    async def stop(self) -> None:
        """Close every bookie that is up (gracefully), and forget the metadata tree."""
        for sim in self.bookies:
            bookie = sim.bookie
            if bookie is None:
                continue
            sim.bookie = None
            for task in (sim.autorecovery, sim.maintenance):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            sim.autorecovery = sim.maintenance = None
            try:
                await self.as_node(sim.name, bookie.aclose())
            except Exception as exc:
                self.failures.append(f"{sim.name} did not stop cleanly: {exc!r}")
            if sim.threads is not None:
                self._note_thread_errors(sim.name, sim.threads)
        drop_memory_tree(self.name)

    def bookie(self, name: str) -> SimBookie:
        for sim in self.bookies:
            if sim.name == name:
                return sim
        raise KeyError(name)
