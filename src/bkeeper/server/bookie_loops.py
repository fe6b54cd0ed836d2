"""The bookie's background loops (:class:`bkeeper.server.bookie.Bookie` runs each as a task
of its own): checkpoints, the disk check, and keeping the registration's mode the bookie's.
Each ends by itself once ``stopping`` is set; :func:`unless_stopped` bounds a wait by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from bkeeper.common.clock import Clock
from bkeeper.common.tasks import TaskOwner, within
from bkeeper.server.registration import ClusterMembership
from bkeeper.storage import Storage

__all__ = [
    "CHECKPOINT_DUE_POLL_S",
    "CheckpointDue",
    "CHECKPOINT_JITTER",
    "REGISTRATION_RETRY_S",
    "keep_registration",
    "run_checkpoints",
    "unless_stopped",
    "watch_disk",
]

log = logging.getLogger("bkeeper.server.bookie")

#: Each wait between checkpoints is the interval times a random factor within 1 +- this.
CHECKPOINT_JITTER = 0.25
#: How often the checkpoint loop also looks whether the storage journaled enough for one
#: (groups that carry no token, a storage written to directly, tell it nothing).
CHECKPOINT_DUE_POLL_S = 1.0
#: A failed switch of the registration's mode is tried again after this long.
REGISTRATION_RETRY_S = 1.0


class CheckpointDue:
    """Tells the checkpoint loop, without it looking, that the storage has journaled
    ``checkpoint_journal_bytes`` since the last checkpoint: :meth:`journaled` is called from
    the journal's thread after each group (one attribute test while nothing is due, one
    wake-up of the loop once it is), :meth:`checkpointed` by the loop after a checkpoint."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()
        self._told = False

    def journaled(self, storage: Storage) -> None:
        if self._told or not storage.checkpoint_due:
            return
        self._told = True
        self._loop.call_soon_threadsafe(self.event.set)

    def wake(self) -> None:
        """Wake the loop now (the bookie stops: it looks at ``stopping`` and ends)."""
        self.event.set()

    def checkpointed(self) -> None:
        self.event.clear()
        self._told = False


async def run_checkpoints(
    storage: Storage,
    interval_s: float,
    clock: Clock,
    stopping: asyncio.Event,
    due: CheckpointDue,
) -> None:
    """A checkpoint every ``interval_s`` (``checkpoint_interval_ms``), or sooner once the
    storage has journaled ``checkpoint_journal_bytes`` since the last (a crash then replays
    at most about that much, whatever the write rate: 10 s at 76 MB/s was 760 MB, half a
    minute of replay), as ``due`` tells at once, and as the loop also looks every
    :data:`CHECKPOINT_DUE_POLL_S` (it looked every 0.1 s, and only so, before: 10 wake-ups a
    second of every idle bookie)."""
    while not stopping.is_set():
        # Jitter keeps bookies started together from checkpointing together: with an ack
        # quorum below the write quorum, one bookie's checkpoint then costs no add any
        # latency.
        wait = interval_s * random.uniform(1 - CHECKPOINT_JITTER, 1 + CHECKPOINT_JITTER)
        deadline = clock.monotonic() + wait
        while not stopping.is_set() and not due.event.is_set() and not storage.checkpoint_due:
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):  # the stop sets ``due.event`` too
                await within(due.event.wait(), min(left, CHECKPOINT_DUE_POLL_S))
        if stopping.is_set():
            return
        due.checkpointed()
        try:
            await asyncio.to_thread(storage.checkpoint)
        except Exception:
            log.exception("checkpoint failed")
        due.journaled(storage)  # journaled enough again while it ran


async def watch_disk(
    check_disk: Callable[[], object], interval_s: float, stopping: asyncio.Event, bookie_id: str
) -> None:
    """``check_disk()`` every ``interval_s`` (``disk_check_interval_ms``)."""
    while not stopping.is_set():
        try:
            check_disk()
        except Exception:
            log.exception("could not check the data disk of %s", bookie_id)
        with contextlib.suppress(TimeoutError):
            await within(stopping.wait(), interval_s)


async def keep_registration(
    membership: ClusterMembership,
    mode_changed: asyncio.Event,
    readonly: Callable[[], bool],
    stopping: asyncio.Event,
) -> None:
    """Keep the registration's mode equal to the bookie's (``readonly()``, looked at each
    time ``mode_changed`` is set): one switch at a time, each to the mode of the moment,
    retried every ``REGISTRATION_RETRY_S`` until it holds."""
    bookie_id = membership.bookie_id
    while True:
        await mode_changed.wait()
        mode_changed.clear()
        if stopping.is_set():
            return
        mode = readonly()
        try:
            await membership.set_read_only(mode)
        except Exception:
            log.exception("could not switch the registration of %s", bookie_id)
            with contextlib.suppress(TimeoutError):
                await within(stopping.wait(), REGISTRATION_RETRY_S)
            mode_changed.set()
            continue
        log.info("%s registered as %s", bookie_id, "read-only" if mode else "writable")


async def unless_stopped(
    tasks: TaskOwner, work: Coroutine[Any, Any, None], name: str, stopping: asyncio.Event
) -> bool:
    """Run ``work`` as a task of ``tasks`` until it ends (True; its error raised), or until
    ``stopping`` is set first (False; the work cancelled): a wait that may be long (a dead
    predecessor's registration to go) must not hold up a SIGTERM."""
    task = tasks.spawn(work, name)
    stop = tasks.spawn(stopping.wait(), f"stop while {name}")
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if task.done():
        task.result()  # its error, if it failed
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False
