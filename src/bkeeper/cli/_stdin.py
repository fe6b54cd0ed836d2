"""Lines of standard input for async commands, read without blocking the event loop.

A blocking read on the event loop's thread stops the loop: nothing is sent, no answer is
read and every timer fires late, so a writer fed by a slow producer (``tail -f``) would see
its bookies "time out". A daemon thread reads the file descriptor in chunks (whatever a pipe
or terminal has ready, up to ``CHUNK_BYTES``) and hands them to the loop through a bounded
queue (``CHUNKS_QUEUED_MAX``), which gives back-pressure when the consumer is slower. A
daemon thread, because a thread blocked in ``read`` on a terminal must not keep the process
alive after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncGenerator

__all__ = ["CHUNKS_QUEUED_MAX", "CHUNK_BYTES", "read_lines"]

CHUNK_BYTES = 64 * 1024
CHUNKS_QUEUED_MAX = 16

_EOF = b""


async def read_lines(fd: int) -> AsyncGenerator[bytes, None]:
    """Each line of ``fd`` without its line ending (``\\n`` or ``\\r\\n``); a last line
    without a newline counts too. Raises the ``OSError`` the read raised."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | OSError] = asyncio.Queue(CHUNKS_QUEUED_MAX)
    stop = threading.Event()

    def put(item: bytes | OSError) -> bool:
        future = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        try:
            future.result()
        except (RuntimeError, asyncio.CancelledError):
            return False  # the loop is gone or the consumer stopped
        return not stop.is_set()

    def pump() -> None:
        while not stop.is_set():
            try:
                chunk = os.read(fd, CHUNK_BYTES)
            except OSError as exc:
                put(exc)
                return
            if not put(chunk) or not chunk:
                return

    threading.Thread(target=pump, name="bkeeper-stdin", daemon=True).start()
    rest = b""
    try:
        while True:
            item = await queue.get()
            if isinstance(item, OSError):
                raise item
            if item == _EOF:
                break
            lines = (rest + item).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line[:-1] if line.endswith(b"\r") else line
        if rest:
            yield rest[:-1] if rest.endswith(b"\r") else rest
    finally:
        stop.set()
        while not queue.empty():  # unblock a pump waiting on a full queue
            queue.get_nowait()
