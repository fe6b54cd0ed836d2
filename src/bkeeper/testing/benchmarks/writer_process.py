"""An open-loop writer in a process of its own, for benchmarks that measure what other work
costs an application's appends.

Run in the benchmark's own event loop, the writer's latency would also count the
benchmark's monitoring (``bench recovery`` reads hundreds of ledgers' metadata every half
second while it waits for the repair); an application appends from its own process. The
child starts, connects, says it is ready, writes at the rate until ``stop()`` (or its
duration), and sends back its :class:`~bkeeper.testing.benchmarks.results.BenchResult`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bkeeper.common.errors import BKeeperError
from bkeeper.common.loop import run_event_loop
from bkeeper.testing.benchmarks.results import BenchResult

__all__ = ["WriterSpec", "WriterProcess"]

#: How long the child may take to start (a fresh interpreter imports bkeeper) and connect.
START_TIMEOUT_S = 60.0
#: How often the child looks at the go and stop flags.
STOP_POLL_S = 0.02
_READY = "ready"


@dataclass(frozen=True)
class WriterSpec:
    metadata_uri: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    entry_bytes: int
    rate: float
    duration_s: float
    in_flight: int = 10_000


class WriterProcess:
    """``await start()`` (the child is up), ``go()`` (it starts writing), then ``await
    stop()`` (now) or ``await result()`` (at the end of its duration) for the result;
    ``close()`` abandons it."""

    def __init__(self, spec: WriterSpec) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._go = context.Event()
        self._parent, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_child,
            args=(child, spec, self._go, self._stop),
            name="bench-writer",
            daemon=True,
        )
        self._child = child

    async def start(self) -> None:
        self._process.start()
        self._child.close()
        message = await asyncio.to_thread(self._receive, START_TIMEOUT_S)
        if message != _READY:
            self.close()
            raise BKeeperError(f"benchmark writer did not start: {message}")

    def go(self) -> None:
        self._go.set()

    async def stop(self) -> BenchResult:
        self._go.set()
        self._stop.set()
        return await self.result()

    async def result(self) -> BenchResult:
        message = await asyncio.to_thread(self._receive, None)
        await asyncio.to_thread(self._process.join)
        if not isinstance(message, BenchResult):
            raise BKeeperError(f"benchmark writer failed: {message}")
        return message

    def close(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _receive(self, timeout_s: float | None) -> Any:
        if not self._parent.poll(timeout_s):
            return f"no answer within {timeout_s:g} s"
        try:
            return self._parent.recv()
        except EOFError:
            return f"the writer process exited with code {self._process.exitcode}"


def _child(conn: Connection, spec: WriterSpec, go_flag: Any, stop_flag: Any) -> None:
    try:
        result: Any = run_event_loop(_write(conn, spec, go_flag, stop_flag))
    except BaseException as exc:  # reported to the parent, which raises it
        result = f"{type(exc).__name__}: {exc}"
    conn.send(result)
    conn.close()


async def _write(conn: Connection, spec: WriterSpec, go_flag: Any, stop_flag: Any) -> BenchResult:
    from bkeeper.testing.benchmarks.client import bench_client_writes

    stop = asyncio.Event()

    async def follow_stop() -> None:
        while not stop_flag.is_set():
            await asyncio.sleep(STOP_POLL_S)
        stop.set()

    conn.send(_READY)
    while not go_flag.is_set():
        await asyncio.sleep(STOP_POLL_S)
    watcher = asyncio.create_task(follow_stop())
    try:
        result, _ledger_id = await bench_client_writes(
            spec.metadata_uri,
            ensemble=spec.ensemble,
            write_quorum=spec.write_quorum,
            ack_quorum=spec.ack_quorum,
            entry_bytes=spec.entry_bytes,
            duration_s=spec.duration_s,
            in_flight=spec.in_flight,
            rate=spec.rate,
            stop=stop,
        )
    finally:
        watcher.cancel()
    return result
