"""The client against real bookie processes: kill -9 and SIGSTOP during a stream of appends;
fencing across processes; a client whose own event loop stalls."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.common.errors import BKeeperError, LedgerFencedError

#: The library's timeouts (issue 41: 1.5 s add timeouts blamed bookies a loaded machine slowed).
WRITER = ClientConfig()


def payload(i: int) -> bytes:
    return b"entry-%06d-" % i + bytes([i % 251]) * 200


@pytest.mark.parametrize("real_cluster", [5], indirect=True)
async def test_kill_and_stop_bookies_while_appending(real_cluster) -> None:
    """Its own cluster: it kills one bookie and stops another."""
    acknowledged: dict[int, bytes] = {}
    async with BookKeeper(real_cluster.uri, WRITER) as writer:
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        first, second = (real_cluster.index_of(b) for b in wh.ensemble[:2])
        futures = []
        for i in range(3000):
            fut = await wh.append_async(payload(i))
            fut.add_done_callback(
                lambda f, i=i: (
                    acknowledged.__setitem__(f.result(), payload(i)) if not f.exception() else None
                )
            )
            futures.append(fut)
            if i == 1000:
                # Entries acknowledged before the kill: the replacement then starts a segment
                # of its own (on a loaded machine none may be yet, and a change before the
                # first acknowledgement rewrites segment 0 instead).
                await futures[0]
                real_cluster.signal(first, signal.SIGKILL)
            if i == 2000:
                real_cluster.signal(second, signal.SIGSTOP)
            if i % 200 == 0:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 60)
        # Qa = 2: the stopped bookie only slows nothing and stays; the killed one is replaced.
        assert len(acknowledged) == 3000, "every add completes through ensemble changes"
        assert real_cluster.bookie_id(first) not in wh.ensemble
        assert real_cluster.bookie_id(second) in wh.ensemble
        assert len(wh.metadata.segments) >= 2

        async with BookKeeper(real_cluster.uri, WRITER) as reader:
            rh = await reader.open_ledger(wh.ledger_id, b"pw")
            last = rh.metadata.last_entry_id
            assert last >= max(acknowledged)
            entries = {}
            async for e in rh.read():
                entries[e.entry_id] = e.data
            assert set(entries) == set(range(last + 1))
            for entry_id, data in acknowledged.items():
                assert entries[entry_id] == data
            with pytest.raises(BKeeperError):
                await rh.read_entry(last + 1)
        with pytest.raises(LedgerFencedError):
            await wh.append(b"after fencing")
    real_cluster.signal(second, signal.SIGCONT)


async def test_fencing_across_processes(shared_cluster) -> None:
    async with BookKeeper(shared_cluster.uri) as writer, BookKeeper(shared_cluster.uri) as reader:
        wh = await writer.create_ledger(3, 2, 2, password=b"pw", digest="crc32")
        for i in range(100):
            await wh.append(payload(i))
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        assert rh.metadata.last_entry_id == 99
        with pytest.raises(LedgerFencedError):
            await wh.append(b"fenced")
        assert [e.data async for e in rh.read()] == [payload(i) for i in range(100)]


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_a_stopped_bookie_is_kept_while_the_others_make_qa(real_cluster) -> None:
    """docs/client.md: a bookie that is only slow (here: stopped) is not replaced while the
    others make Qa, however long it stays silent; once resumed it has every entry. Its own
    cluster: it stops one bookie and kills two.

    The library's add timeout (a 500 ms one blamed the live bookies of a loaded machine): the
    test waits for the event that would blame the stopped bookie, the writer's timeout check
    running an add timeout after the last add was sent to it, not for a guess of wall time."""
    config = ClientConfig()
    async with BookKeeper(real_cluster.uri, config) as writer:
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        for i in range(10):
            assert await wh.append(payload(i)) == i
        stopped = real_cluster.index_of(ensemble[1])
        real_cluster.signal(stopped, signal.SIGSTOP)
        try:
            # The shared clusters' check sees it (once the kernel has stopped it).
            await asyncio.wait_for(_until_not_running(real_cluster, f"bookie {stopped} "), 30)
            for i in range(10, 20):
                assert await asyncio.wait_for(wh.append(payload(i)), 60) == i
            await asyncio.wait_for(_checked_after(wh, time.monotonic() + _timeout_s(wh)), 60)
            assert wh.ensemble == ensemble
            assert wh.metadata.segments == {0: ensemble}
        finally:
            real_cluster.signal(stopped, signal.SIGCONT)
        await asyncio.wait_for(wh.close(), 30)
        assert wh.metadata.last_entry_id == 19
    # The resumed bookie got every entry: read them with the two others gone.
    for bookie in (ensemble[0], ensemble[2]):
        real_cluster.signal(real_cluster.index_of(bookie), signal.SIGKILL)
        real_cluster.procs[real_cluster.index_of(bookie)].wait()
    with pytest.raises(AssertionError, match="exited with -9"):
        real_cluster.require_running("killed")
    async with BookKeeper(real_cluster.uri, WRITER) as reader:
        rh = await reader.open_ledger(wh.ledger_id, b"pw", recovery=False)
        entries = await asyncio.wait_for(_read_all(rh), 60)
        assert entries == [payload(i) for i in range(20)]


async def test_a_stalled_event_loop_is_not_a_bookie_failure(shared_cluster) -> None:
    """A client whose own event loop stalls does not blame its bookies (issue 11, item 1).

    Before the fix, an add queued just before the loop blocked for longer than the add
    timeout was "not acknowledged in time" by every bookie the moment the loop ran again: the
    writer replaced its whole ensemble, or failed every add when no bookie was left to replace
    one. The library's add timeout (issue 41: with a 500 ms one, bookies of a loaded machine
    answering late after the stall were blamed) and a stall a second longer."""
    config = ClientConfig()
    async with BookKeeper(shared_cluster.uri, config) as bk:
        # Ack quorum 3: "before" is acknowledged only once every ensemble bookie is connected.
        # With 2, the third connection could still be opening when the loop stalled, and the
        # stall (longer than the 5 s connect timeout) timed it out: "unreachable", and an
        # ensemble change (CI, stop 51). That is the connect's timeout, not the adds'.
        wh = await bk.create_ledger(3, 3, 3, password=b"pw")
        ensemble = wh.ensemble
        assert await wh.append(b"before") == 0
        future = await wh.append_async(b"queued, then the loop stalls")
        time.sleep(config.add_timeout_ms / 1000 + 1)  # blocks the loop, as sync stdin reads did
        assert await future == 1
        assert await wh.append(b"after") == 2
        assert wh.ensemble == ensemble
        assert len(wh.metadata.segments) == 1
        await wh.close()
        assert wh.metadata.last_entry_id == 2


async def _until_not_running(cluster, bookie: str) -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            cluster.require_running("now")
        except AssertionError as error:
            assert str(error).startswith(f"now: {bookie}"), error
            assert str(error).endswith(": stopped"), error
            return
        await asyncio.sleep(0.01)


def _timeout_s(handle) -> float:  # type: ignore[no-untyped-def]
    return handle._adds._timeout_s  # type: ignore[no-any-return]


async def _checked_after(handle, when: float) -> None:  # type: ignore[no-untyped-def]
    """Wait until the writer's timeout check has run at ``when`` (monotonic) or later (a
    tick at ``now`` sets the next one due at ``now`` plus its interval), or ``when`` has
    passed with the checks paused (nothing pending: nothing could time out). Observed only."""
    adds = handle._adds
    while adds._tick_due - adds._interval_s < when:
        if not handle._ticking and time.monotonic() >= when:
            return
        await asyncio.sleep(0.05)


async def _read_all(handle) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [e.data async for e in handle.read()]
