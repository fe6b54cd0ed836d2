"""``bkeeper bench connection``: a bookie connection's own cost per v2 ADD frame, without
storage or sockets.

Feeds ``BookieConnection.data_received`` chunks of 1 KiB v2 ADD frames (a transport that
drops what it is given; an ``add`` that answers every batch at once) in three
shapes: one whole frame per chunk (one add at a time), one frame split over two chunks (an
incomplete frame held between them: the partial-frame budget's bookkeeping runs twice), and
64 frames per chunk (a loaded connection); responses are flushed every 256 chunks. The
figure is nanoseconds of CPU time (``time.process_time``: a shared machine's load does not
count) per frame, the best of ``rounds`` rounds, for comparing versions of
``server.connection`` side by side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import ConnectionTable
from bkeeper.server.responder import AddBatchAnswer
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest

__all__ = ["SHAPES", "ChunkShape", "ConnectionResult", "bench_connection_chunks"]

#: Chunks between two flushes of the responses (one event-loop iteration).
FLUSH_EVERY_CHUNKS = 256
ENTRY_BYTES = 1024


@dataclass(frozen=True)
class ChunkShape:
    label: str
    frames_per_chunk: int
    split: bool


SHAPES = (
    ChunkShape("1 frame per chunk", 1, False),
    ChunkShape("1 frame over 2 chunks", 1, True),
    ChunkShape("64 frames per chunk", 64, False),
)


@dataclass(frozen=True)
class ConnectionResult:
    shape: ChunkShape
    frames: int
    rounds: int
    best_ns_per_frame: float

    @property
    def frames_per_s(self) -> float:
        return 1e9 / self.best_ns_per_frame if self.best_ns_per_frame > 0 else 0.0


class _Transport:
    """Drops what it is given."""

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1)

    def write(self, data: bytes) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def _answer_batch(conn: BookieConnection, batch: AddBatchAnswer) -> None:
    """The batch lane's handler, answering at once."""
    conn.respond_adds(
        StatusCode.EOK, batch.ledger_ids, batch.entry_ids, batch.requests, batch.request_bytes
    )


async def _measure(shape: ChunkShape, frames: int, rounds: int) -> ConnectionResult:
    config = BookieConfig(data_dir="-")
    table = ConnectionTable(config)
    conn = BookieConnection(config, table, lambda *a: None, _answer_batch)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    frame = v2.encode_request_frame(AddRequest(0, 0, bytes(20), bytes(ENTRY_BYTES)))
    data = frame * shape.frames_per_chunk
    cut = len(data) - 100 if shape.split else len(data)
    chunks = [data[:cut], data[cut:]] if shape.split else [data]
    repeats = frames // shape.frames_per_chunk + 1
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for i in range(repeats):
            for chunk in chunks:
                conn.data_received(chunk)
            if i % FLUSH_EVERY_CHUNKS == FLUSH_EVERY_CHUNKS - 1:
                await asyncio.sleep(0)  # the responses' flush, as once per loop iteration
        best = min(best, (time.process_time() - start) / (repeats * shape.frames_per_chunk))
    conn.connection_lost(None)
    return ConnectionResult(shape, repeats * shape.frames_per_chunk, rounds, best * 1e9)


async def bench_connection_chunks(
    frames: int = 20_000,
    rounds: int = 7,
    progress: Callable[[ChunkShape], None] | None = None,
) -> list[ConnectionResult]:
    """Each of :data:`SHAPES`, ``rounds`` rounds of about ``frames`` frames; ``progress`` is
    told each shape as it is done."""
    results = []
    for shape in SHAPES:
        results.append(await _measure(shape, frames, rounds))
        if progress is not None:
            progress(shape)
    return results
