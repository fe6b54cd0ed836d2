"""The v2 load generator of ``bkeeper bench bookie``: a raw asyncio protocol that
keeps ``in_flight`` adds outstanding against one bookie with as little client work per add as
possible, so that the benchmark measures the bookie, not the client.

Each add is a real one: a CRC-32C entry body (``ledgerId | entryId | LAC | length | digest |
payload``, as :class:`~bkeeper.wire.digest.DigestManager` makes it) in a v2 ADD frame; the
frames of every refill are built in one pass and written with one ``write``. Answers are
parsed in bulk (v2 ADD answers are 28 bytes each: ``struct.iter_unpack``), each checked for
EOK and its own entry id, and each add's latency is taken from its own send time to the
chunk that brought its answer. TLS, authentication and v3 use the generic client instead
(:func:`bkeeper.testing.benchmarks.bookie.bench_bookie_adds`).
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from array import array

from crc32c import crc32c

from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult
from bkeeper.wire import v2
from bkeeper.wire.codes import V2_TO_STATUS, V2OpCode
from bkeeper.wire.digest import master_key

__all__ = ["bench_bookie_adds_v2"]

_ENTRY_HEADER = struct.Struct(">qqqq")
_CRC = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">iI")
#: length | header | rc | ledger id | entry id: every v2 ADD answer.
_ANSWER = struct.Struct(">iiiqq")
_ADD_HEADER = v2.header(int(V2OpCode.ADD_ENTRY))


class _AddLoad(asyncio.Protocol):
    def __init__(self, ledger_id: int, entry_bytes: int, in_flight: int, rate: float | None):
        self.ledger_id = ledger_id
        self.key = master_key(b"bench")
        self.payload = os.urandom(entry_bytes)
        self.in_flight = in_flight
        self.rate = rate
        self.frame_head = _FRAME_HEAD.pack(4 + 20 + 36 + entry_bytes, _ADD_HEADER) + self.key
        self.transport: asyncio.Transport | None = None
        self.sent_at: array[float] = array("d")
        self.latencies: array[float] = array("d")
        self.outstanding = 0
        self.next_entry = 0
        self.answered = 0
        self.sending = True
        self.buffer = b""
        self.failure: str | None = None
        self.done = asyncio.get_running_loop().create_future()
        self.start = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.failure = self.failure or f"connection lost: {exc}"
            self.done.set_result(None)

    def send(self, count: int) -> None:
        """Build ``count`` adds in one pass and write them with one write."""
        if count <= 0 or self.transport is None:
            return
        ledger_id, payload, head = self.ledger_id, self.payload, self.frame_head
        pack_header, pack_crc = _ENTRY_HEADER.pack, _CRC.pack
        first = self.next_entry
        parts: list[bytes] = []
        append = parts.append
        for entry_id in range(first, first + count):
            header = pack_header(ledger_id, entry_id, entry_id - 1, 0)
            append(head)
            append(header)
            append(pack_crc(crc32c(payload, crc32c(header))))
            append(payload)
        self.next_entry = first + count
        self.outstanding += count
        now = time.perf_counter()
        self.sent_at.extend([now] * count)
        self.transport.write(b"".join(parts))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        whole = len(buffer) - len(buffer) % _ANSWER.size
        self.buffer = buffer[whole:]
        now = time.perf_counter()
        sent_at, latencies = self.sent_at, self.latencies
        count = 0
        for _, _, rc, ledger_id, entry_id in _ANSWER.iter_unpack(memoryview(buffer)[:whole]):
            if rc != 0 or ledger_id != self.ledger_id:
                status = V2_TO_STATUS.get(rc, rc)
                self.failure = self.failure or f"entry {entry_id}: {status!r}"
            latencies.append(now - sent_at[entry_id])
            count += 1
        self.outstanding -= count
        self.answered += count
        if self.failure is not None or (not self.sending and not self.outstanding):
            if not self.done.done():
                self.done.set_result(None)
            return
        if self.sending and self.rate is None:
            self.send(self.in_flight - self.outstanding)

    def pace(self, now: float) -> None:
        """Open loop: send what is due by ``now`` (capped by ``in_flight``)."""
        assert self.rate is not None
        due = int((now - self.start) * self.rate) - self.next_entry
        self.send(min(due, self.in_flight - self.outstanding))


async def bench_bookie_adds_v2(
    host: str,
    port: int,
    *,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
    ledger_id: int | None = None,
) -> BenchResult:
    """Add entries to one bookie over v2 for ``duration_s``: closed loop with ``in_flight``
    outstanding adds, or open loop at ``rate`` adds/s (still capped by ``in_flight``)."""
    ledger_id = ledger_id if ledger_id is not None else int(time.time() * 1000) % (1 << 40)
    loop = asyncio.get_running_loop()
    load = _AddLoad(ledger_id, entry_bytes, in_flight, rate)
    transport, _ = await loop.create_connection(lambda: load, host, port)
    try:
        load.start = start = time.perf_counter()
        deadline = start + duration_s
        if rate is None:
            load.send(in_flight)
            await asyncio.wait([load.done], timeout=duration_s)
        else:
            while not load.done.done() and time.perf_counter() < deadline:
                load.pace(time.perf_counter())
                await asyncio.sleep(PACING_SLEEP_S)
        load.sending = False
        if load.outstanding and not load.done.done():
            await within(load.done, 60)
        elapsed = time.perf_counter() - start
    finally:
        transport.close()
    if load.failure is not None:
        raise BKeeperError(f"adds failed, first: {load.failure}")
    label = f"bookie adds V2, {entry_bytes} B, in-flight {in_flight}"
    if rate is not None:
        label += f", open loop {rate:.0f}/s"
    count = len(load.latencies)
    return BenchResult(label, count, elapsed, count * entry_bytes, load.latencies)
