"""GC never deletes a live ledger: four ``bkeeper bookie`` processes with real ZooKeeper, a
GC pass every 100 ms (compactions every few passes, small entry logs), and a client that
creates, writes, closes, leaves open and deletes ledgers while the passes run.

The race the claim is about: a ledger whose metadata is created after a pass's walk of the
ledger tree went by its place, and whose entries reach the bookie before the pass compares.
The client picks each ledger's id in one of :data:`DIRECTORIES` leaf directories of the
tree, at random, and writes its first entry at once: while a walk goes from directory to
directory, creations land both behind it and ahead of it (a scan that took the bookie's set
after the listing and deleted without the confirming read lost tens to hundreds of entries
of live ledgers in every trial run, or failed a deletion's recovery). The churn goes on
until every bookie has run :data:`PASSES_MIN` passes since it began (read from the admin
API), so the test cannot pass with GC idle. Each bookie then runs a major compaction in a pass of its own
(forced through the admin API), which starts once the passes under way have compared.

Then: every entry of every ledger kept (closed, or still open with its writer appending
until the end) is read back from each bookie of its write set directly (a bookie that lost
its copy cannot hide behind the quorum); each deleted ledger (closed, or open and fenced by
the deletion while its writer appends) is soon "no such ledger" on every bookie of its
ensembles; the passes' count of ledgers deleted covers them, and compactions moved live
entries (which read back whole above).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from bkeeper.client import BookKeeper
from bkeeper.client.bookie_client import BookieClient
from bkeeper.client.distribution import write_set
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import BookieError, LedgerClosedError
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import ReadRequest
from tests.client.conftest import RealCluster, real_cluster
from tests.server.admin_client import call

__all__ = ["real_cluster"]


BOOKIES = 4
SETTINGS = (
    "gc_wait_ms=100",
    "minor_compaction_interval_ms=600",
    "major_compaction_interval_ms=1500",
    "compaction_rate_bytes_per_s=0",
    "checkpoint_interval_ms=300",
    "entry_log_bytes_max=65536",
)
BOOKIE_ARGS = (
    "--http-port",
    "0",
    "--http-admin-writes",
    *(arg for s in SETTINGS for arg in ("-o", s)),
)
#: Leaf directories of the ledger tree the ledgers are spread over (ids 10000 apart).
DIRECTORIES = 40
#: Passes every bookie runs while the client churns (a few seconds at 100 ms).
PASSES_MIN = 12
LEDGERS_MIN = 100
WORKERS = 6
#: Ledgers left open at once, each with a writer appending until the end.
OPEN_MAX = 10
#: Ledgers read back at once.
READERS = 32
PASSWORD = b"pw"
GC = "/api/v1/bookie/gc"
COUNTERS = ("passes", "ledgers_deleted_total", "logs_compacted_total", "logs_removed_total")
#: Hang guards: a loaded machine may be slow; nothing here bounds the time.
CHURN_GUARD_S = 120.0
GONE_GUARD_S = 60.0


def payload(ledger_id: int, entry: int) -> bytes:
    return b"ledger %d entry %d " % (ledger_id, entry) + bytes([entry % 251]) * 700


@dataclass
class Churn:
    """What the client did: each ledger kept with its entries, each one deleted."""

    bk: BookKeeper
    rng: random.Random = field(default_factory=lambda: random.Random(41))
    serials: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    kept: dict[int, int] = field(default_factory=dict)  # ledger -> entries acknowledged
    open: dict[int, WriteHandle] = field(default_factory=dict)
    deleted: dict[int, LedgerMetadata] = field(default_factory=dict)
    deleting: set[int] = field(default_factory=set)
    writers: list[asyncio.Task[None]] = field(default_factory=list)

    def new_id(self) -> int:
        return self.rng.randrange(1, DIRECTORIES + 1) * 10_000 + next(self.serials)

    async def worker(self) -> None:
        while not self.stop.is_set():
            if len(self.open) > 2 and self.rng.random() < 0.1:
                await self.delete_open(self.rng.choice(sorted(self.open)))
                continue
            handle = await self.bk.create_ledger(
                3, 2, 2, password=PASSWORD, ledger_id=self.new_id()
            )
            ledger = handle.ledger_id
            entries = self.rng.randint(1, 6)
            for entry in range(entries):
                assert await handle.append(payload(ledger, entry)) == entry
            fate = self.rng.random()
            if fate < 0.15 and len(self.open) < OPEN_MAX:
                self.kept[ledger] = entries
                self.open[ledger] = handle
                self.writers.append(asyncio.ensure_future(self.keep_writing(handle)))
                continue
            await handle.close()
            if fate < 0.55:
                self.kept[ledger] = entries
            else:
                self.deleted[ledger] = handle.metadata
                await self.bk.delete_ledger(ledger)

    async def keep_writing(self, handle: WriteHandle) -> None:
        """Append to ``handle`` until the churn stops or the ledger is deleted."""
        ledger = handle.ledger_id
        while not self.stop.is_set() and ledger not in self.deleting:
            try:
                entry = await handle.append(payload(ledger, self.kept[ledger]))
            except (LedgerClosedError, BookieError):
                if ledger in self.deleting:  # fenced, or its metadata seen gone: expected
                    return
                raise
            if ledger in self.deleting:  # acknowledged, but the ledger is being deleted
                return
            assert entry == self.kept[ledger]
            self.kept[ledger] += 1
            await asyncio.sleep(self.rng.uniform(0.01, 0.05))

    async def delete_open(self, ledger: int) -> None:
        """Delete an open ledger while its writer appends (the deletion fences it)."""
        handle = self.open.pop(ledger)
        self.deleting.add(ledger)
        del self.kept[ledger]
        self.deleted[ledger] = handle.metadata
        await self.bk.delete_ledger(ledger)
        await handle.abort(LedgerClosedError(f"ledger {ledger} deleted by the test"))


async def gc_status(port: int) -> dict[str, int]:
    """The bookie's GC counters (admin API)."""
    answer = await call(port, "GET", GC)
    assert answer.status == 200, answer
    return {key: answer.json()[key] for key in COUNTERS}


@contextlib.asynccontextmanager
async def bookie_clients(cluster: RealCluster) -> AsyncIterator[dict[str, BookieClient]]:
    clients: dict[str, BookieClient] = {}
    try:
        for index, port in enumerate(cluster.ports):
            clients[cluster.bookie_id(index)] = await BookieClient.connect(
                "127.0.0.1", port, Protocol.V3
            )
        yield clients
    finally:
        for client in clients.values():
            await client.aclose()


def replicas(meta: LedgerMetadata, entry: int) -> list[str]:
    ensemble = meta.ensemble_for(entry)
    return [ensemble[i] for i in write_set(entry, meta.ensemble_size, meta.write_quorum)]


async def missing(bk: BookKeeper, limit: asyncio.Semaphore, ledger: int, entries: int) -> list[str]:
    """Each entry of ``ledger`` that a bookie of its write set does not give back whole
    (asked directly, no other replica): ``ledger/entry on bookie: why``."""
    async with limit:
        return await _missing(bk, ledger, entries)


async def _missing(bk: BookKeeper, ledger: int, entries: int) -> list[str]:
    reader = await bk.open_ledger(ledger, PASSWORD, recovery=False)
    meta = reader.metadata
    lost = []
    if reader.is_closed and meta.last_entry_id != entries - 1:
        lost.append(f"{ledger}: closed at {meta.last_entry_id}, {entries} entries acknowledged")
    try:
        for entry in range(entries):
            for bookie in replicas(meta, entry):
                try:
                    got = await reader.read_entry_from(bookie, entry)
                except BookieError as exc:
                    lost.append(f"{ledger}/{entry} on {bookie}: {type(exc).__name__}")
                    continue
                if got.data != payload(ledger, entry):
                    lost.append(f"{ledger}/{entry} on {bookie}: other data")
    finally:
        await reader.close()
    return lost


async def wait_gone(
    clients: dict[str, BookieClient], ledger: int, meta: LedgerMetadata, waiting: list[str]
) -> None:
    """Until every bookie of ``ledger``'s ensembles answers "no such ledger" (``waiting``
    names the last one waited for)."""
    bookies = {bookie for ensemble in meta.segments.values() for bookie in ensemble}
    for bookie in sorted(bookies):
        waiting.append(f"{ledger} still on {bookie}")
        while True:
            response = await clients[bookie].request(ReadRequest(ledger, 0))
            if response.status is StatusCode.ENOLEDGER:
                break
            assert response.status in (StatusCode.EOK, StatusCode.ENOENTRY), (ledger, response)
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("real_cluster", [(BOOKIES, BOOKIE_ARGS)], indirect=True)
async def test_gc_never_deletes_a_live_ledger(real_cluster: RealCluster) -> None:
    async with BookKeeper(real_cluster.uri) as bk:
        ports = []
        for index in range(BOOKIES):
            info = await bk.cluster.registry.service_info(real_cluster.bookie_id(index))
            endpoint = info.endpoint(HTTP_ENDPOINT_ID)
            assert endpoint is not None
            ports.append(endpoint.port)
        before = [await gc_status(port) for port in ports]

        churn = Churn(bk)
        workers = [asyncio.ensure_future(churn.worker()) for _ in range(WORKERS)]
        passes = [0] * BOOKIES
        try:
            async with asyncio.timeout(CHURN_GUARD_S):
                while (
                    min(passes) < PASSES_MIN or len(churn.kept) + len(churn.deleted) < LEDGERS_MIN
                ):
                    await asyncio.sleep(0.2)
                    for task in [*workers, *churn.writers]:
                        if task.done():
                            task.result()  # a failure, at once (a writer ends only at the stop)
                    now = [await gc_status(port) for port in ports]
                    passes = [n["passes"] - b["passes"] for n, b in zip(now, before, strict=True)]
        except TimeoutError:
            pytest.fail(f"GC passes per bookie after {CHURN_GUARD_S} s of churn: {passes}")
        finally:
            churn.stop.set()
            await asyncio.gather(*workers, *churn.writers)
        print(
            f"{len(churn.kept)} ledgers kept ({len(churn.open)} open), {len(churn.deleted)} "
            f"deleted ({len(churn.deleting)} while open); GC passes per bookie meanwhile: {passes}"
        )
        assert churn.open and churn.deleting

        # A major compaction on each bookie, in a pass of its own: the passes under way at
        # the last creations have compared and deleted before it starts.
        answers = await asyncio.gather(
            *(call(port, "PUT", GC, {"forceMajor": True}) for port in ports)
        )
        assert all(answer.status == 200 and answer.json()["major"] for answer in answers), answers

        # Every ledger kept is whole on every bookie that should hold it.
        limit = asyncio.Semaphore(READERS)
        kept = sorted(churn.kept.items())
        found = await asyncio.gather(*(missing(bk, limit, ledger, n) for ledger, n in kept))
        lost = [line for lines in found for line in lines]
        assert not lost, f"{len(lost)} entries of live ledgers lost: {lost[:20]}"

        # Every ledger deleted is soon gone from the storage of every bookie that had it.
        waiting: list[str] = []
        try:
            async with bookie_clients(real_cluster) as clients, asyncio.timeout(GONE_GUARD_S):
                for ledger, meta in sorted(churn.deleted.items()):
                    await wait_gone(clients, ledger, meta, waiting)
        except TimeoutError:
            pytest.fail(f"deleted ledger {waiting[-1]} after {GONE_GUARD_S} s")
        after = [await gc_status(port) for port in ports]
        done = {
            key: sum(a[key] - b[key] for a, b in zip(after, before, strict=True))
            for key in COUNTERS
        }
        print(f"GC in all: {done}")
        # Each deleted ledger had entries on two bookies at least.
        assert done["ledgers_deleted_total"] >= 2 * len(churn.deleted), (done, len(churn.deleted))
        assert done["logs_compacted_total"] > 0, done  # live entries moved: still whole
        for handle in churn.open.values():
            await handle.close()
