"""``bkeeper bench fuzz``: a million bad frames at a real bookie, which must keep serving.

Workers run side by side for ``duration_s`` against one bookie (frames from
:mod:`bkeeper.testing.fuzz_frames`, seeded):

- **streams** (half v2, half v3): long-lived connections pipelining answered frames in
  batches, at most ``window_frames`` unanswered, counting the response frames; each ends
  after a random number of frames, cleanly or with a fatal frame the bookie must answer by
  closing the connection. A stream the bookie closes early is a failure.
- **closers**: short connections of a few answered frames and then a fatal frame (the bookie
  must close), a truncated frame or random bytes (followed by the client's end of stream),
  or nothing at all.
- **partials**: ``partial_connections`` connections each holding most of a maximum-size
  frame, opened again as the bookie closes them (partial-frame budget, handshake timeout).
- **idlers**: ``idle_connections`` connections that never send a byte, reopened likewise.

Meanwhile the bookie's resident memory is sampled from ``/proc/PID/status`` when its pid is
known. Afterwards an add and a read round trip (v2 and v3) must succeed. The report fails
when the bookie died, stopped serving, kept a connection open after a fatal frame, closed a
well-behaved stream, or grew its RSS by more than ``rss_growth_bytes_max``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bkeeper.client.bookie_client import BookieClient
from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.common.tasks import within
from bkeeper.common.validate import check_non_negative_ints, check_positive_ints
from bkeeper.testing.fuzz_frames import FrameFactory, Pool
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

__all__ = [
    "FuzzConfig",
    "FuzzReport",
    "process_rss_bytes",
    "round_trip",
    "run_fuzz",
    "unread_bytes",
]

MIB = 1024 * 1024
_LEN = struct.Struct(">i")
#: Frames of each family generated up front; batches draw from them at random.
POOL_FRAMES = 20_000
#: How long the bookie may take to close a connection after a fatal frame.
CLOSE_TIMEOUT_S = 10.0
#: Fatal kinds that a bookie must close the connection for on its own (random bytes may
#: instead read as the start of a long frame, so the client ends those itself).
_CERTAIN_FATAL = frozenset(
    {
        "oversized length",
        "zero or negative length",
        "first byte neither v2 nor v3",
        "undecodable v3",
        "v2 packet too short",
    }
)


def process_rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` of ``/proc/PID/status``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise BKeeperError(f"process {pid} reports no VmRSS")


def unread_bytes(port: int) -> int:
    """Bytes received by TCP sockets on local ``port`` (IPv4) and not yet read by their
    process: the sum of ``rx_queue`` over them in ``/proc/net/tcp``."""
    total = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[1].rpartition(":")[2], 16) == port:
                total += int(fields[4].partition(":")[2], 16)
    return total


async def round_trip(host: str, port: int, protocol: Protocol, ledger_id: int) -> None:
    """Add an entry to ``ledger_id`` and read it back; :class:`BKeeperError` if either fails."""
    manager = DigestManager(ledger_id, DigestType.CRC32C, b"round-trip")
    payload = b"round trip %d" % ledger_id
    body = manager.encode_entry(0, -1, len(payload), payload)
    client = await BookieClient.connect(host, port, protocol, timeout_s=CLOSE_TIMEOUT_S)
    try:
        add = await within(
            client.send(AddRequest(ledger_id, 0, master_key(b"round-trip"), body)),
            CLOSE_TIMEOUT_S,
        )
        if add.status is not StatusCode.EOK:
            raise BKeeperError(f"add to ledger {ledger_id} answered {add.status.name}")
        read = await within(client.send(ReadRequest(ledger_id, 0)), CLOSE_TIMEOUT_S)
        if read.status is not StatusCode.EOK or read.body is None:
            raise BKeeperError(f"read of ledger {ledger_id} answered {read.status.name}")
        if manager.verify_entry(bytes(read.body), 0).payload != payload:
            raise BKeeperError(f"read of ledger {ledger_id} returned another entry")
    finally:
        await client.aclose()


@dataclass(frozen=True)
class FuzzConfig:
    host: str
    port: int
    duration_s: float
    seed: int = 0
    pid: int | None = None
    streams: int = 4
    batch_frames: int = 256
    window_frames: int = 1024
    stream_frames_max: int = 200_000
    closers: int = 64
    partial_connections: int = 32
    idle_connections: int = 200
    ledgers: int = 64
    rss_growth_bytes_max: int = 256 * MIB

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ConfigError(f"duration_s: must be positive, got {self.duration_s!r}")
        check_positive_ints(self, "batch_frames", "window_frames", "stream_frames_max", "ledgers")
        check_non_negative_ints(
            self, "streams", "closers", "partial_connections", "idle_connections"
        )
        check_positive_ints(self, "rss_growth_bytes_max")


@dataclass
class FuzzReport:
    frames: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    responses: int = 0
    connections: int = 0
    closed_after_fatal: int = 0
    partial_closed_by_bookie: int = 0
    idle_closed_by_bookie: int = 0
    seconds: float = 0.0
    rss_start: int | None = None
    rss_peak: int | None = None
    rss_end: int | None = None
    served_after: bool = False
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def rate(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0


class _Fuzzer:
    def __init__(self, config: FuzzConfig) -> None:
        self.config = config
        self.report = FuzzReport()
        first_ledger = 0x7A7A_0000 + (config.seed % 1000) * 1000
        self.factory = FrameFactory(config.seed, range(first_ledger, first_ledger + config.ledgers))
        self.pools: dict[str, Pool] = {
            family: self.factory.pool(family, POOL_FRAMES) for family in ("v2", "v3", "fatal")
        }
        self._partial_kind = self.factory.kind_id("incomplete large frame")
        self._truncated_kind = {
            family: self.factory.kind_id(f"truncated {family} frame") for family in ("v2", "v3")
        }
        self.counts = [0] * len(self.factory.kinds)
        self.rng = random.Random(config.seed + 1)
        self.deadline = 0.0

    def _count(self, kinds: list[int], chosen: list[int]) -> None:
        counts = self.counts
        for i in chosen:
            counts[kinds[i]] += 1
        self.report.frames += len(chosen)

    def _pick(self, family: str, k: int) -> tuple[bytes, list[int]]:
        frames, kinds = self.pools[family]
        chosen = self.rng.choices(range(len(frames)), k=k)
        self._count(kinds, chosen)
        return b"".join([frames[i] for i in chosen]), chosen

    def _failure(self, message: str) -> None:
        if len(self.report.failures) < 100:
            self.report.failures.append(message)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.report.connections += 1
        return await asyncio.open_connection(self.config.host, self.config.port)

    # -- workers -------------------------------------------------------------------------
    async def stream(self, family: str) -> None:
        config = self.config
        while time.monotonic() < self.deadline:
            reader, writer = await self._connect()
            sent = 0
            answered = [0]
            progress = asyncio.Event()
            counter = asyncio.create_task(self._count_responses(reader, answered, progress))
            limit = self.rng.randint(1, config.stream_frames_max)
            try:
                while sent < limit and time.monotonic() < self.deadline and not counter.done():
                    while sent - answered[0] > config.window_frames and not counter.done():
                        progress.clear()
                        with contextlib.suppress(TimeoutError):
                            await within(progress.wait(), CLOSE_TIMEOUT_S)
                        if sent - answered[0] > config.window_frames and not progress.is_set():
                            self._failure(f"{family} stream: no answer for {CLOSE_TIMEOUT_S} s")
                            return
                    data, chosen = self._pick(family, min(config.batch_frames, limit - sent))
                    writer.write(data)
                    await writer.drain()
                    sent += len(chosen)
                if counter.done():
                    self._failure(f"the bookie closed a {family} stream of answered frames")
                    continue
                if self.rng.random() < 0.5:
                    await self._end_with_fatal(writer, counter)
            except (ConnectionError, OSError) as exc:
                self._failure(f"{family} stream: {exc!r}")
            finally:
                writer.close()
                counter.cancel()
                with contextlib.suppress(BaseException):
                    await counter
                self.report.responses += answered[0]

    async def _count_responses(
        self, reader: asyncio.StreamReader, answered: list[int], progress: asyncio.Event
    ) -> None:
        buffer = b""
        while data := await reader.read(262_144):
            buffer += data
            offset, end, frames = 0, len(buffer), 0
            while end - offset >= 4:
                size = _LEN.unpack_from(buffer, offset)[0]
                if end - offset - 4 < size:
                    break
                offset += 4 + size
                frames += 1
            buffer = buffer[offset:]
            answered[0] += frames
            progress.set()

    async def _end_with_fatal(
        self, writer: asyncio.StreamWriter, counter: asyncio.Task[None]
    ) -> None:
        frames, kinds = self.pools["fatal"]
        while True:
            i = self.rng.randrange(len(frames))
            if self.factory.kinds[kinds[i]] in _CERTAIN_FATAL:
                break
        self._count(kinds, [i])
        writer.write(frames[i])
        await self._await_close(counter, self.factory.kinds[kinds[i]])

    async def _await_close(self, task: asyncio.Future[None], kind: str) -> None:
        try:
            await within(asyncio.shield(task), CLOSE_TIMEOUT_S)
        except TimeoutError:
            self._failure(f"the bookie kept a connection open {CLOSE_TIMEOUT_S} s after {kind!r}")
        except (ConnectionError, OSError):
            self.report.closed_after_fatal += 1  # reset rather than closed: fine
        else:
            self.report.closed_after_fatal += 1

    async def closer(self) -> None:
        rng = self.rng
        while time.monotonic() < self.deadline:
            family = rng.choice(("v2", "v3"))
            prefix, _ = self._pick(family, rng.randint(0, 8))
            roll = rng.random()
            reader, writer = await self._connect()
            drain = asyncio.ensure_future(self._drain(reader))
            try:
                if roll < 0.7:
                    frames, kinds = self.pools["fatal"]
                    i = rng.randrange(len(frames))
                    self._count(kinds, [i])
                    kind = self.factory.kinds[kinds[i]]
                    writer.write(prefix + frames[i])
                    if kind not in _CERTAIN_FATAL:
                        writer.write_eof()
                    await self._await_close(drain, kind)
                    continue
                if roll < 0.9:
                    frames, _ = self.pools[family]
                    self.counts[self._truncated_kind[family]] += 1
                    self.report.frames += 1
                    writer.write(prefix + self.factory.truncated(rng.choice(frames)))
                else:
                    writer.write(prefix)
                writer.write_eof()
                await self._await_close(drain, "the client's end of stream")
            except (ConnectionError, OSError):
                pass  # closed by the bookie while we still wrote: what a fatal frame asks for
            finally:
                writer.close()
                drain.cancel()

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(262_144):
            pass

    async def partials(self) -> None:
        open_: list[asyncio.Future[None]] = []
        writers: list[asyncio.StreamWriter] = []
        rng = self.rng
        try:
            while time.monotonic() < self.deadline:
                for task in [t for t in open_ if t.done()]:
                    open_.remove(task)
                    self.report.partial_closed_by_bookie += 1
                while len(open_) < self.config.partial_connections:
                    reader, writer = await self._connect()
                    first = rng.choice((b"\x02", b"\x0a"))
                    size = rng.randint(MAX_FRAME_BYTES_DEFAULT // 5, MAX_FRAME_BYTES_DEFAULT - 1)
                    writer.write(_LEN.pack(MAX_FRAME_BYTES_DEFAULT) + first + os.urandom(size))
                    self.report.frames += 1
                    self.counts[self._partial_kind] += 1
                    writers.append(writer)
                    open_.append(asyncio.ensure_future(self._drain(reader)))
                    await asyncio.sleep(0.01)  # a paced stream of them, not a burst
                await asyncio.sleep(0.05)
        finally:
            for writer in writers:
                writer.close()
            for task in open_:
                task.cancel()

    async def idlers(self) -> None:
        socks: list[socket.socket] = []
        loop = asyncio.get_running_loop()
        try:
            while time.monotonic() < self.deadline:
                for sock in [s for s in socks if _closed(s)]:
                    socks.remove(sock)
                    sock.close()
                    self.report.idle_closed_by_bookie += 1
                while len(socks) < self.config.idle_connections:
                    sock = socket.socket()
                    sock.setblocking(False)
                    await loop.sock_connect(sock, (self.config.host, self.config.port))
                    self.report.connections += 1
                    socks.append(sock)
                await asyncio.sleep(0.25)
        finally:
            for sock in socks:
                sock.close()

    async def sample_rss(self) -> None:
        pid = self.config.pid
        if pid is None:
            return
        while True:
            try:
                rss = process_rss_bytes(pid)
            except (OSError, BKeeperError):
                return  # gone: reported after the run
            report = self.report
            report.rss_peak = max(report.rss_peak or 0, rss)
            await asyncio.sleep(0.2)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def run_fuzz(
    config: FuzzConfig, progress: Callable[[FuzzReport], None] | None = None
) -> FuzzReport:
    """Fuzz the bookie at ``config.host:config.port`` for ``config.duration_s``."""
    fuzzer = _Fuzzer(config)
    report = fuzzer.report
    if config.pid is not None:
        report.rss_start = report.rss_peak = process_rss_bytes(config.pid)
    start = time.monotonic()
    fuzzer.deadline = start + config.duration_s
    sampler = asyncio.ensure_future(fuzzer.sample_rss())
    workers = [fuzzer.stream("v2" if i % 2 == 0 else "v3") for i in range(config.streams)]
    workers += [fuzzer.closer() for _ in range(config.closers)]
    if config.partial_connections:
        workers.append(fuzzer.partials())
    if config.idle_connections:
        workers.append(fuzzer.idlers())
    tasks = [asyncio.ensure_future(w) for w in workers]
    try:
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=1.0)
            if progress is not None:
                progress(report)
        for task in tasks:
            if task.exception() is not None:
                fuzzer._failure(f"fuzz worker failed: {task.exception()!r}")
    finally:
        for task in tasks:
            task.cancel()
    report.seconds = time.monotonic() - start
    report.kinds = dict(zip(fuzzer.factory.kinds, fuzzer.counts, strict=True))
    await _check_after(config, report)
    sampler.cancel()
    return report


async def _check_after(config: FuzzConfig, report: FuzzReport) -> None:
    if config.pid is not None and not os.path.exists(f"/proc/{config.pid}"):
        report.failures.append(f"the bookie (pid {config.pid}) died")
        return
    try:
        ledger = 0x7E57_0000 + config.seed % 100_000
        await round_trip(config.host, config.port, Protocol.V2, ledger)
        await round_trip(config.host, config.port, Protocol.V3, ledger + 1)
        report.served_after = True
    except (BKeeperError, OSError, TimeoutError) as exc:
        report.failures.append(f"the bookie stopped serving: {exc!r}")
    if config.pid is not None:
        report.rss_end = process_rss_bytes(config.pid)
        report.rss_peak = max(report.rss_peak or 0, report.rss_end)
        growth = report.rss_end - (report.rss_start or report.rss_end)
        if growth > config.rss_growth_bytes_max:
            report.failures.append(
                f"the bookie's RSS grew by {growth / MIB:.0f} MiB "
                f"(bound {config.rss_growth_bytes_max / MIB:.0f} MiB)"
            )
