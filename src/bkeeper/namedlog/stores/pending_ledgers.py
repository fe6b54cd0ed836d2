"""Ledgers written for a log but not yet appended to it, by job (pure bookkeeping on the
metadata store, so that a failed or killed job's ledgers can be found and deleted).

A job that writes ledgers to append later in one compare-and-set (a Spark write: each task
writes its own ledgers, the driver appends them all) registers each ledger as it makes it:
``<parent of the ledgers root>/bkeeper/pending/<job key>/<ledger id>``, holding the log's
name. Appending them to the log and then unregistering them is the happy path; when the job
fails, :meth:`PendingLedgers.clean` deletes every registered ledger that is not in its log's
list, and unregisters those that are (a crash between the append and the unregistering).
The job key is a hash of the job id, so any string can be a job id.

A one-off job (a batch write) that ends is marked (the job node's data) aborted or committed
before its ledgers are cleaned, and the mark stays: a straggling task that registered a
ledger after the clean (of a failed job, or a speculative or failed attempt still running
when the job committed without it) sees the mark when it finishes and deletes its own
ledgers. A mark holds the time it was made (``b"committed 1796312787000"``; a mark written
before that holds none, and is kept); every new mark removes, of at most
``ENDED_MARKS_SWEPT_MAX`` other jobs' nodes picked at random, those marked longer than
``ENDED_MARK_KEPT_MS`` ago, so marks do not pile up however many writes a cluster takes (about
one stale mark per 64 live ones stays). A straggler that outlives its job's mark by that long
leaves its ledgers registered, and a later clean of its job id deletes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Awaitable, Callable

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    LedgerNotFoundError,
    LogNotFoundError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from bkeeper.meta.store import NodeStore, join_path
from bkeeper.namedlog.stores.log_nodes import LogStore

__all__ = ["PendingLedgers"]

_ABORTED = b"aborted"
_COMMITTED = b"committed"
#: How long an ended one-off job's mark is kept: far longer than a Spark task attempt lives
#: after its job ended (a speculative copy Spark kills, a retry that lost).
ENDED_MARK_KEPT_MS = 3_600_000
#: Other jobs' nodes a new mark looks at for stale marks to remove.
ENDED_MARKS_SWEPT_MAX = 64


class PendingLedgers:
    """The registry of one job's pending ledgers."""

    def __init__(
        self, store: NodeStore, logs: LogStore, job_id: str, clock: Clock | None = None
    ) -> None:
        self._store = store
        self._logs = logs
        self._clock = clock or default_clock()
        self._key = hashlib.sha256(job_id.encode()).hexdigest()[:32]
        self._root = join_path(logs.root.rpartition("/")[0], "pending")
        self.path = join_path(self._root, self._key)

    async def add(self, log: str, ledger_id: int) -> None:
        await self._store.create(
            join_path(self.path, str(ledger_id)), log.encode(), make_parents=True
        )

    async def remove(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            with contextlib.suppress(NoNodeError):
                await self._store.delete(join_path(self.path, str(ledger_id)))
        if not await self.ended():
            with contextlib.suppress(NoNodeError, NotEmptyError):
                await self._store.delete(self.path)

    async def mark_aborted(self) -> None:
        await self._mark(_ABORTED)

    async def mark_committed(self) -> None:
        await self._mark(_COMMITTED)

    async def _mark(self, kind: bytes) -> None:
        now_ms = self._clock.wall_ms()
        mark = b"%s %d" % (kind, now_ms)
        try:
            await self._store.set(self.path, mark)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                await self._store.create(self.path, mark, make_parents=True)
            await self._store.set(self.path, mark)
        await self._sweep(now_ms)

    async def _sweep(self, now_ms: int) -> None:
        """Remove stale marks of other jobs (see the module docstring)."""
        others = [name for name in await self._store.children(self._root) if name != self._key]
        for name in random.sample(others, min(len(others), ENDED_MARKS_SWEPT_MAX)):
            path = join_path(self._root, name)
            with contextlib.suppress(NoNodeError, NotEmptyError):
                data, _ = await self._store.get(path)
                _kind, marked_ms = _parse_mark(data)
                if marked_ms is not None and now_ms - marked_ms > ENDED_MARK_KEPT_MS:
                    await self._store.delete(path)

    async def aborted(self) -> bool:
        return await self._kind() == _ABORTED

    async def ended(self) -> bool:
        """Whether the job is marked aborted or committed."""
        return await self._kind() in (_ABORTED, _COMMITTED)

    async def _kind(self) -> bytes | None:
        try:
            data, _ = await self._store.get(self.path)
        except NoNodeError:
            return None
        return _parse_mark(data)[0]

    async def registered(self) -> dict[int, str]:
        """Ledger id -> log name of every registered ledger."""
        try:
            names = await self._store.children(self.path)
        except NoNodeError:
            return {}
        found = {}
        for name in names:
            with contextlib.suppress(NoNodeError):
                data, _ = await self._store.get(join_path(self.path, name))
                found[int(name)] = data.decode()
        return found

    async def clean(self, delete_ledger: Callable[[int], Awaitable[None]]) -> list[int]:
        """Delete the registered ledgers that are in no log (``delete_ledger`` is an async
        function of a ledger id); unregister every one. The ids deleted."""
        registered = await self.registered()
        deleted = []
        lists: dict[str, set[int]] = {}
        for ledger_id, log in sorted(registered.items()):
            if log not in lists:
                try:
                    meta, _ = await self._logs.read(log)
                    lists[log] = {x.ledger_id for x in meta.ledgers}
                except LogNotFoundError:
                    lists[log] = set()
            if ledger_id not in lists[log]:
                with contextlib.suppress(LedgerNotFoundError):
                    await delete_ledger(ledger_id)
                deleted.append(ledger_id)
        await self.remove(list(registered))
        return deleted


def _parse_mark(data: bytes) -> tuple[bytes | None, int | None]:
    """A job node's mark: its kind and when it was made (``None``: not marked, or a mark
    written before marks held their time)."""
    kind, _, when = data.partition(b" ")
    if kind not in (_ABORTED, _COMMITTED):
        return None, None
    return kind, int(when) if when.isdigit() else None
