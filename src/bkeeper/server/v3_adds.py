"""The v3 adds of one chunk, gathered into one :class:`~bkeeper.server.responder.AddBatchAnswer`
so that the engine takes them with one hold of its lock (``Storage.add_entries``), as the v2
batch lane does with plain v2 adds. A v3 add carries its own txn id, which the batch keeps
per add for its answer (``AddBatchAnswer.gathering``).

The connection hands the batch over at the chunk's end and before any other request (a read
or a fence after an add sees it); adds of other flags (recovery, high priority) start a new
batch. An add whose body does not name its ledger and entry is not gathered: it goes alone
through the handlers, which refuse it.
"""

from __future__ import annotations

from bkeeper.common.errors import BadRequestError
from bkeeper.server.responder import AddBatchAnswer, Responder
from bkeeper.storage import entry_lac
from bkeeper.wire.messages import AddRequest

__all__ = ["V3AddGatherer"]


class V3AddGatherer:
    """The batch a connection gathers its v3 adds in (no reference to the connection is
    kept between chunks: the batch is handed over at each chunk's end)."""

    __slots__ = ("_batch",)

    def __init__(self) -> None:
        self._batch: AddBatchAnswer | None = None

    def takes(self, request: AddRequest) -> bool:
        """Whether ``request`` joins the batch as it is (same flags, or no batch yet);
        otherwise the batch is to be handed over (:meth:`take`) first."""
        batch = self._batch
        return batch is None or (
            batch.recovery is request.recovery and batch.high_priority is request.high_priority
        )

    def gather(self, conn: Responder, request: AddRequest, request_bytes: int) -> bool:
        """Add ``request`` (``request_bytes`` counted against ``conn``'s limits) to the batch,
        whose flags it has (:meth:`takes`); False: not gathered (its body does not name its
        ledger and entry)."""
        try:
            lac = entry_lac(request.ledger_id, request.entry_id, request.body)
        except BadRequestError:
            return False
        batch = self._batch
        if batch is None:
            batch = self._batch = AddBatchAnswer.gathering(
                conn, request.recovery, request.high_priority
            )
        body, key = request.body, request.master_key
        batch.gather(
            request.ledger_id,
            request.entry_id,
            lac,
            key if type(key) is bytes else bytes(key),
            body if type(body) is bytes else bytes(body),
            request.txn_id,
            request_bytes,
        )
        return True

    def take(self) -> AddBatchAnswer | None:
        """What was gathered, for the handlers (the gatherer starts empty again)."""
        batch, self._batch = self._batch, None
        return batch
