"""``bkeeper bench write`` and ``read``: one ledger client appending to one ledger (closed or
open loop), and reading a whole ledger back."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import time
from array import array

from bkeeper.common.errors import ConfigError
from bkeeper.common.tasks import within
from bkeeper.meta.uri import MetadataUri
from bkeeper.testing.benchmarks.proc_cpu import ServerCpu, is_local_host, split_host_port
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult
from bkeeper.wire.codes import Protocol

__all__ = [
    "CPU_COLUMN",
    "SERVER_CPU_COLUMN",
    "bench_client_reads",
    "bench_client_writes",
    "bench_idle_writers",
    "bench_ledger_tail",
    "delete_ledger",
]

#: The column of the client's own CPU time (all its threads) per entry while it wrote or read.
CPU_COLUMN = "client CPU µs/entry"
#: The column of the servers' CPU time per entry (all their threads, from ``/proc``): the
#: ledger's bookies together and ZooKeeper (:mod:`bkeeper.testing.benchmarks.proc_cpu`).
SERVER_CPU_COLUMN = "server CPU µs/entry"
_BOOKIES, _ZOOKEEPER = "bookies", "ZooKeeper"


def cpu_per_op(cpu_s: float, operations: int) -> str:
    """``cpu_s`` of CPU over ``operations``, in µs each, formatted for the table."""
    return f"{cpu_s / operations * 1e6:.1f}" if operations else "-"


def server_cpu(metadata_uri: str, ensemble: tuple[str, ...]) -> ServerCpu:
    """The CPU meter of the ledger's bookies and of ZooKeeper, those on this machine."""
    bookies = [a[1] for a in map(split_host_port, ensemble) if a and is_local_host(a[0])]
    zookeepers: list[int] = []
    with contextlib.suppress(ConfigError):  # memory:// (no ZooKeeper), or not a URI
        uri = MetadataUri.parse(metadata_uri)
        zookeepers = [a[1] for a in map(split_host_port, uri.hosts) if a and is_local_host(a[0])]
    meter = ServerCpu({_BOOKIES: bookies, _ZOOKEEPER: zookeepers})
    meter.start()
    return meter


def add_server_cpu(result: BenchResult, meter: ServerCpu) -> None:
    """The servers' CPU per acknowledged entry, into ``result``'s table: bookies and
    ZooKeeper together, ZooKeeper's share in brackets ("23.3 (ZK 3.3)"); "(bookies only)"
    without a local ZooKeeper; ", 2/3 bookies" when only some were measured (the others
    elsewhere, or gone during the run); "-" when no bookie ran on this machine."""
    entries = result.operations
    bookies = meter.per_op_us(_BOOKIES, entries)
    if bookies is None:
        result.extra[SERVER_CPU_COLUMN] = "-"
        return
    zookeeper = meter.per_op_us(_ZOOKEEPER, entries)
    total = bookies + (zookeeper or 0.0)
    share = "bookies only" if zookeeper is None else f"ZK {zookeeper:.1f}"
    measured, wanted = meter.coverage.get(_BOOKIES, (0, 0))
    if measured < wanted:
        share += f", {measured}/{wanted} bookies"
    result.extra[SERVER_CPU_COLUMN] = f"{total:.1f} ({share})"


async def bench_client_writes(
    metadata_uri: str,
    *,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
    protocol: Protocol = Protocol.V2,
    count: int | None = None,
    stop: asyncio.Event | None = None,
    batch: int = 1,
    gc_freeze: bool = False,
    callbacks: bool = False,
) -> tuple[BenchResult, int]:
    """Append to one ledger through the client for ``duration_s`` (or until ``count``
    entries, or until ``stop`` is set); returns the result and the ledger id. ``batch`` > 1:
    ``WriteHandle.append_many`` with up to that many entries a call (each entry's latency
    from its own due time to its batch's acknowledgement). ``callbacks``: one entry a call
    through ``WriteHandle.append_callback`` (no future per entry; as Java's
    ``BenchThroughputLatency`` appends) instead of ``append_async``."""
    if batch > 1:
        return await _bench_batched_writes(
            metadata_uri,
            ensemble=ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            entry_bytes=entry_bytes,
            duration_s=duration_s,
            in_flight=in_flight,
            rate=rate,
            protocol=protocol,
            count=count,
            batch=batch,
            gc_freeze=gc_freeze,
        )
    from bkeeper.client import BookKeeper, ClientConfig

    config = ClientConfig(protocol=protocol, pending_adds_max=max(in_flight, 1))
    payload = os.urandom(entry_bytes)
    latencies: array[float] = array("d")
    perf = time.perf_counter
    async with BookKeeper(metadata_uri, config) as bk:
        wh = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"bench")
        if gc_freeze:
            gc.freeze()

        failures: list[BaseException] = []

        def done(sent_at: float, future: asyncio.Future[int]) -> None:
            if _failed(future, failures):
                return
            latencies.append(perf() - sent_at)

        # append_callback: the entry's send time by entry id; the outcomes counted, and the
        # event set once the last one sent has its outcome
        sent_times: array[float] = array("d")
        outcomes = [0, -1]  # [outcomes so far, entries sent once the loop ended]
        all_done = asyncio.Event()

        def called_back(entry_id: int, error: BaseException | None) -> None:
            if error is None:
                latencies.append(perf() - sent_times[entry_id])
            elif not failures:
                failures.append(error)
            outcomes[0] += 1
            if outcomes[0] == outcomes[1]:
                all_done.set()

        meter = server_cpu(metadata_uri, wh.ensemble)
        cpu_start = time.process_time()
        start = perf()
        deadline = start + duration_s
        sent = 0
        last: asyncio.Future[int] | None = None
        while perf() < deadline and (count is None or sent < count) and not failures:
            if stop is not None and stop.is_set():
                break
            if rate is not None:
                due = int((perf() - start) * rate) - sent
                if due <= 0:
                    await asyncio.sleep(PACING_SLEEP_S)
                    continue
            if callbacks:  # a new ledger: entry ids 0, 1, ... in the order sent
                await wh.append_callback(payload, called_back)
                sent_times.append(perf() if rate is None else start + sent / rate)
                sent += 1
                continue
            last = await wh.append_async(payload)
            # Closed loop: from when the window took the entry (append_async waits for room:
            # that wait is the previous entries' latency, not this one's), as Java's
            # BenchThroughputLatency times an add once its throttle admits it. Open loop: from
            # when the entry was due, waits included.
            sent_at = perf() if rate is None else start + sent / rate
            last.add_done_callback(functools.partial(done, sent_at))
            sent += 1
        if last is not None:
            await asyncio.wait([last])  # its error, if any, is the first of failures
        outcomes[1] = sent
        if callbacks and outcomes[0] < sent:
            await all_done.wait()  # the pipeline calls every entry back, failed ones too
        if failures:
            raise failures[0]
        elapsed = perf() - start
        cpu_s = time.process_time() - cpu_start
        meter.stop()
        await wh.close()
        ledger_id = wh.ledger_id
    result = _write_result(
        ensemble,
        write_quorum,
        ack_quorum,
        protocol,
        entry_bytes,
        in_flight,
        rate,
        1,
        latencies,
        elapsed,
        cpu_s,
        callbacks,
    )
    add_server_cpu(result, meter)
    return result, ledger_id


def _failed(future: asyncio.Future[int], failures: list[BaseException]) -> bool:
    """Whether an append failed; its error is taken (asyncio logs every failed future
    nobody looked at: a failed ledger would log one per entry in flight), the first kept."""
    if future.cancelled():
        return True
    error = future.exception()
    if error is None:
        return False
    if not failures:
        failures.append(error)
    return True


def _write_result(
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    protocol: Protocol,
    entry_bytes: int,
    in_flight: int,
    rate: float | None,
    batch: int,
    latencies: array[float],
    elapsed: float,
    cpu_s: float,
    callbacks: bool = False,
) -> BenchResult:
    label = (
        f"client writes E{ensemble}/Qw{write_quorum}/Qa{ack_quorum} {protocol.name}, "
        f"{entry_bytes} B, in-flight {in_flight}"
    )
    if batch > 1:
        label += f", append_many {batch}"
    if callbacks:
        label += ", append_callback"
    if rate is not None:
        label += f", open loop {rate:.0f}/s"
    result = BenchResult(label, len(latencies), elapsed, len(latencies) * entry_bytes, latencies)
    result.extra[CPU_COLUMN] = cpu_per_op(cpu_s, len(latencies))
    return result


async def _bench_batched_writes(
    metadata_uri: str,
    *,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None,
    protocol: Protocol,
    count: int | None,
    batch: int,
    gc_freeze: bool,
) -> tuple[BenchResult, int]:
    """:func:`bench_client_writes` through ``append_many``, up to ``batch`` entries a call."""
    from bkeeper.client import BookKeeper, ClientConfig

    config = ClientConfig(protocol=protocol, pending_adds_max=max(in_flight, batch))
    payload = os.urandom(entry_bytes)
    latencies: array[float] = array("d")
    perf = time.perf_counter
    async with BookKeeper(metadata_uri, config) as bk:
        wh = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"bench")
        if gc_freeze:
            gc.freeze()

        failures: list[BaseException] = []

        def done(due: list[float], future: asyncio.Future[int]) -> None:
            if _failed(future, failures):
                return
            now = perf()
            latencies.extend([now - at for at in due])

        meter = server_cpu(metadata_uri, wh.ensemble)
        cpu_start = time.process_time()
        start = perf()
        deadline = start + duration_s
        sent = 0
        last: asyncio.Future[int] | None = None
        while perf() < deadline and (count is None or sent < count) and not failures:
            n = batch if count is None else min(batch, count - sent)
            if rate is not None:
                n = min(n, int((perf() - start) * rate) - sent)
                if n <= 0:
                    await asyncio.sleep(PACING_SLEEP_S)
                    continue
            last = await wh.append_many_async([payload] * n)
            # As for single appends: closed loop from when the window took the batch.
            due = [perf()] * n if rate is None else [start + (sent + i) / rate for i in range(n)]
            last.add_done_callback(functools.partial(done, due))
            sent += n
        if last is not None:
            await asyncio.wait([last])  # its error, if any, is the first of failures
        if failures:
            raise failures[0]
        elapsed = perf() - start
        cpu_s = time.process_time() - cpu_start
        meter.stop()
        await wh.close()
        ledger_id = wh.ledger_id
    result = _write_result(
        ensemble,
        write_quorum,
        ack_quorum,
        protocol,
        entry_bytes,
        in_flight,
        rate,
        batch,
        latencies,
        elapsed,
        cpu_s,
    )
    add_server_cpu(result, meter)
    return result, ledger_id


async def bench_idle_writers(
    metadata_uri: str, ledgers: int, duration_s: float, *, ensemble: int = 3
) -> float:
    """The CPU (this process's, all its threads; ms a second) of one client holding
    ``ledgers`` open ledgers it does not write to, one entry appended to each first, over
    ``duration_s``. The ledgers are deleted after."""
    from bkeeper.client import BookKeeper

    async with BookKeeper(metadata_uri) as bk:
        handles = []
        try:
            for _ in range(ledgers):
                handles.append(await bk.create_ledger(ensemble, ensemble, 2, password=b"bench"))
                await handles[-1].append(b"one entry")
            await asyncio.sleep(1.0)  # answers, ticks and timers of the appends settle
            started = time.process_time()
            await asyncio.sleep(duration_s)
            return (time.process_time() - started) * 1000.0 / duration_s
        finally:
            for handle in handles:
                await handle.close()
                await bk.delete_ledger(handle.ledger_id)


async def delete_ledger(metadata_uri: str, ledger_id: int) -> None:
    """Delete a ledger a benchmark wrote."""
    from bkeeper.client import BookKeeper

    async with BookKeeper(metadata_uri) as bk:
        await bk.delete_ledger(ledger_id)


async def bench_client_reads(
    metadata_uri: str, ledger_id: int, password: bytes = b"bench", *, gc_freeze: bool = False
) -> BenchResult:
    """Read a whole (closed) ledger through the client (``gc_freeze``: as for writes)."""
    from bkeeper.client import BookKeeper

    perf = time.perf_counter
    async with BookKeeper(metadata_uri) as bk:
        rh = await bk.open_ledger(ledger_id, password)
        if gc_freeze:
            gc.freeze()
        cpu_start = time.process_time()
        start = perf()
        count = size = 0
        async for entry in rh.read():
            count += 1
            size += len(entry.payload)
        elapsed = perf() - start
        cpu_s = time.process_time() - cpu_start
    result = BenchResult(f"client reads of ledger {ledger_id}", count, elapsed, size)
    result.extra[CPU_COLUMN] = cpu_per_op(cpu_s, count)
    return result


async def bench_ledger_tail(
    metadata_uri: str,
    *,
    rate: float,
    duration_s: float,
    entry_bytes: int,
    explicit_lac_interval_ms: int = 0,
) -> list[BenchResult]:
    """One client appends ``rate`` entries/s for ``duration_s`` (``rate * duration_s``
    entries, open loop, one at a time) to a ledger; another
    tails it (``wait_last_add_confirmed``, a long poll, then ``read`` up to the LAC). Two
    results: from each entry's due time to the reader having it, and from the writer's
    acknowledgement of it to the reader having it."""
    from bkeeper.client import BookKeeper, ClientConfig

    writer_config = ClientConfig(explicit_lac_interval_ms=explicit_lac_interval_ms)
    payload = os.urandom(entry_bytes)
    perf = time.perf_counter
    due_at: dict[int, float] = {}
    acked_at: dict[int, float] = {}
    from_due: array[float] = array("d")
    from_ack: array[float] = array("d")
    async with BookKeeper(metadata_uri, writer_config) as wbk, BookKeeper(metadata_uri) as rbk:
        wh = await wbk.create_ledger(3, 3, 2, password=b"bench")
        rh = await rbk.open_ledger(wh.ledger_id, b"bench", recovery=False)
        last = -1  # the last entry appended, once the writer is done
        done_writing = asyncio.Event()

        async def tail() -> None:
            next_id = 0
            while not (done_writing.is_set() and next_id > last):
                lac = await rh.wait_last_add_confirmed(next_id - 1, timeout_ms=1000)
                if lac < next_id:
                    if rh.is_closed:  # sealed and read to its end (the poll answers at once
                        break  # now: looping would never let the writer's close return)
                    continue
                async for entry in rh.read(next_id, lac):
                    now = perf()
                    from_due.append(now - due_at[entry.entry_id])
                    acked = acked_at.get(entry.entry_id)
                    if acked is not None:  # the writer's callback may not have run yet
                        from_ack.append(now - acked)
                next_id = lac + 1

        def on_ack(future: asyncio.Future[int]) -> None:
            if not future.cancelled() and future.exception() is None:
                acked_at[future.result()] = perf()

        reader = asyncio.ensure_future(tail())
        start = perf()
        sent = 0
        total = max(1, int(rate * duration_s))  # each at its due time, late ones at once
        while sent < total:
            due = start + sent / rate
            wait = due - perf()
            if wait > 0:
                await asyncio.sleep(wait)
            due_at[sent] = due
            future = await wh.append_async(payload)
            future.add_done_callback(on_ack)
            sent += 1
        last = sent - 1
        await wh.close()
        done_writing.set()
        await within(reader, 30)
        await rh.close()
        elapsed = perf() - start
        await wbk.delete_ledger(wh.ledger_id)
    label = f"ledger tail, {entry_bytes} B at {rate:.0f}/s"
    if explicit_lac_interval_ms:
        label += f", explicit LAC every {explicit_lac_interval_ms} ms"
    return [
        BenchResult(f"{label}: append due → read", len(from_due), elapsed, 0, from_due),
        BenchResult(f"{label}: acknowledged → read", len(from_ack), elapsed, 0, from_ack),
    ]
