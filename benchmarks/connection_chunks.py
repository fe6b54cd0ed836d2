"""Measure a bookie connection's own cost per v2 ADD frame, without storage or sockets.

Usage: ``python benchmarks/connection_chunks.py``

Feeds ``BookieConnection.data_received`` chunks of 1 KiB v2 ADD frames (a transport that
drops what it is given; an ``add`` that answers at once) in three shapes: one whole frame
per chunk (one add at a time), one frame split over two chunks (an incomplete frame held
between them: the partial-frame budget's bookkeeping runs twice), and 64 frames per chunk
(a loaded connection); responses are flushed every 256 chunks. Prints nanoseconds per
frame, the best of 7 rounds, for comparing versions of ``server.connection`` side by side.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import ConnectionTable
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest


class _Transport:
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


def _answer(conn: BookieConnection, flags: int, ledger: int, entry: int, key: memoryview,
            body: memoryview, txn: int, size: int) -> None:  # fmt: skip
    conn.respond_add(StatusCode.EOK, ledger, entry, txn, size)


async def _measure(frames_per_chunk: int, split: bool) -> float:
    config = BookieConfig(data_dir="-")
    conn = BookieConnection(config, ConnectionTable(config), lambda *a: None, _answer)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    frame = v2.encode_request_frame(AddRequest(1, 0, bytes(20), bytes(1024)))
    data = frame * frames_per_chunk
    cut = len(data) - 100 if split else len(data)
    chunks = [data[:cut], data[cut:]] if split else [data]
    rounds = 20_000 // frames_per_chunk + 1
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for i in range(rounds):
            for chunk in chunks:
                conn.data_received(chunk)
            if i % 256 == 255:
                await asyncio.sleep(0)  # the responses' flush, as once per loop iteration
        best = min(best, (time.perf_counter() - start) / (rounds * frames_per_chunk))
    return best * 1e9


async def main() -> None:
    for label, frames, split in (
        ("1 frame per chunk", 1, False),
        ("1 frame over 2 chunks", 1, True),
        ("64 frames per chunk", 64, False),
    ):
        print(f"{label}: {await _measure(frames, split):,.0f} ns per frame")


if __name__ == "__main__":
    asyncio.run(main())
