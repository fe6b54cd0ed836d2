"""A named log writer's end: why it can append no more, and the watch for its log's deletion.

Deletion (``NamedLogs.delete``, or the log's node deleted by anyone): the writer watches
the log's node and learns of the deletion as ZooKeeper reports it (well within a second);
it also finds out when its ledger is fenced or gone, or a roll finds no log. From then on it
fails with :class:`~bkeeper.common.errors.LogDeletedError`: every later append, and every
append not acknowledged by then (its ledgers' handles are aborted, and an acknowledgement
that arrives later is not reported). Appends acknowledged before stay acknowledged: the
delete took them away, as asked.

A fence (the writer's ledger fenced or gone under it) is explained once, by asking the log's
metadata: deleted (as above), or another writer took over (``LogFencedError``). While the
log still lists this writer's ledger last, whoever fenced it has yet to change the list (a
delete seals first): the writer waits up to ``FENCE_EXPLAIN_WAIT_S`` for that.

:class:`WriterEnd` belongs to one :class:`~bkeeper.namedlog.writer.LogWriter` and keeps the
writer's ``_error`` (the one attribute its appends check) up to date.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bkeeper.common.errors import (
    BKeeperError,
    LedgerDeletedError,
    LedgerFencedError,
    LedgerNotFoundError,
    LogDeletedError,
    LogError,
    LogFencedError,
    LogNotFoundError,
    MetadataClosedError,
)
from bkeeper.namedlog.batching import Batch
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import Position
from bkeeper.namedlog.core.rolling import overtaken

if TYPE_CHECKING:
    from bkeeper.namedlog.writer import LogWriter

__all__ = ["FENCE_EXPLAIN_WAIT_S", "LEDGER_TAKEN", "WriterEnd", "fail_batch", "fail_with"]

#: The writer's log lines, wherever their code lives, keep the writer module's logger name.
log = logging.getLogger("bkeeper.namedlog.writer")

#: How long a writer whose ledger was fenced while the log still lists it last waits for the
#: log's node to change before it says why: a delete (or a new writer, or a Spark commit)
#: seals the log's ledgers first and changes the list a moment later.
FENCE_EXPLAIN_WAIT_S = 5.0

#: Failures of the writer's ledger that mean it is gone or sealed under it; the log's
#: metadata says why (deleted, or another writer took over).
LEDGER_TAKEN = (LedgerFencedError, LedgerNotFoundError, LedgerDeletedError)


class WriterEnd:
    """Why one writer can append no more; sets its ``_error``. Owned by the writer."""

    def __init__(self, writer: LogWriter) -> None:
        self._writer = writer
        self._name = writer._log.name
        self._store = writer._context.store
        self._explained = False
        self._explaining: asyncio.Future[LogError] | None = None
        self._deleted = asyncio.Event()  # set once the writer learns the log was deleted

    async def wait_deleted(self) -> LogDeletedError:
        """Wait until the writer learns that its log was deleted."""
        await self._deleted.wait()
        error = self._writer._error
        assert isinstance(error, LogDeletedError)
        return error

    def fenced(self, cause: BaseException, unexplained: BaseException | None = None) -> LogError:
        """The error of appends that were in flight when the ledger was fenced: ``cause`` is
        the fence; ``unexplained``, why the metadata could not say who fenced it."""
        writer = self._writer
        if writer._error is None:
            which = (
                "" if unexplained is None else f"; the metadata could not say which: {unexplained}"
            )
            writer._error = LogFencedError(
                f"log {self._name!r}: this writer was fenced: another writer took over, "
                f"or the log was deleted ({cause}){which}"
            )
        return writer._error

    def fence_explained(self, cause: BaseException) -> asyncio.Future[LogError]:
        """Why this writer was fenced (the error of every append that failed for it), asked
        of the metadata once, in the background."""
        if self._explaining is None:
            tasks = self._writer._tasks
            if tasks.closed:  # the writer is closed: no asking any more
                done: asyncio.Future[LogError] = asyncio.get_running_loop().create_future()
                done.set_result(self.fenced(cause))
                return done
            self._explaining = tasks.spawn(self._explain(cause), "explain a fence")
        return self._explaining

    async def _explain(self, cause: BaseException) -> LogError:
        try:
            return await self.gone(cause)
        except BKeeperError as exc:  # the metadata cannot say: the fence is all we know
            return self.fenced(cause, unexplained=exc)

    async def gone(self, cause: BaseException) -> LogError:
        """Why this writer can append no more, its ledger fenced or gone: the log was
        deleted, or another writer took over (asked of the metadata once; module doc)."""
        writer = self._writer
        if writer._error is None or not self._explained:
            self._explained = True
            store, name = self._store, self._name
            try:
                meta, version = await store.read(name)
                if isinstance(cause, LedgerFencedError) and self.lists_last(meta):
                    await store.wait_change(name, version, FENCE_EXPLAIN_WAIT_S)
                    meta, version = await store.read(name)
            except LogNotFoundError:
                return await self.mark_deleted(str(cause))
            if isinstance(writer._error, LogDeletedError):
                return writer._error  # the watch learnt it meanwhile
            if self.lists_last(meta):
                writer._error = LogFencedError(
                    f"log {name!r}: this writer's ledger {writer._handle.ledger_id} was taken "
                    f"from it, and the log still lists it last ({cause})"
                )
            else:
                writer._error = LogFencedError(f"log {name!r}: another writer took over ({cause})")
        assert writer._error is not None
        return writer._error

    def lists_last(self, meta: LogMetadata) -> bool:
        """Whether ``meta`` still lists this writer's ledger last, under no newer term."""
        last = meta.ledgers[-1].ledger_id if meta.ledgers else None
        writer = self._writer
        return last == writer._handle.ledger_id and not overtaken(writer.term, meta.writer_term)

    async def mark_deleted(self, how: str) -> LogDeletedError:
        """The log was deleted: the writer fails for good with ``LogDeletedError``. Set
        before any wait, so that no acknowledgement reported from now on counts; then the
        records not sent yet and the ledgers' pending adds fail with it."""
        writer = self._writer
        error = writer._error
        if isinstance(error, LogDeletedError):
            return error
        error = LogDeletedError(
            f"log {self._name!r} was deleted while this writer was open ({how})"
        )
        writer._error = error
        self._explained = True
        self._deleted.set()
        log.debug("%s", error)  # the appenders get it
        if writer._batcher is not None:
            writer._batcher.abort(error)
        for handle in (writer._handle, *writer._roller.sealing):
            await handle.abort(error)
        return error

    async def watch_deleted(self) -> None:
        """Learn that the log was deleted from its node's watch, and fail the writer then."""
        try:
            await self._store.wait_deleted(self._name)
        except MetadataClosedError:
            return  # the client is closing
        except BKeeperError as exc:
            log.warning(
                "log %s: cannot watch its node (%s): a deletion is found at the next fence, "
                "roll or metadata error instead",
                self._name,
                exc,
            )
            return
        await self.mark_deleted("its node was deleted")


def fail_with(outer: asyncio.Future[Position], explained: asyncio.Future[LogError]) -> None:
    """Fail an append's future with the explained fence (unless it is done already)."""
    if outer.done():
        return
    if explained.cancelled():
        outer.cancel()
    else:
        outer.set_exception(explained.result())


def fail_batch(batch: Batch, explained: asyncio.Future[LogError]) -> None:
    """Fail a batch's waiters with the explained fence."""
    if explained.cancelled():
        batch.cancel()
    else:
        batch.fail(explained.result())
