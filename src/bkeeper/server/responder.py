"""How the bookie's handlers answer: the :class:`Responder` they answer through, and the
typed tokens of writes that are answered once durable.

A write (add, fence, explicit LAC, force) hands the storage engine a :class:`Durable` token;
the engine gives the tokens of a journal group back once the group is durable (or failed), and
the handlers call :meth:`Durable.durable` on each with the group's status. An add's token is an
:class:`AddAnswer`, answered through :meth:`Responder.respond_add` without a response object
(the add path makes one per entry, so it is a slotted class with nothing more); the other
writes pass their answer as a :class:`WhenDurable` callback. A v2 connection hands the adds
of one chunk to the engine as one :class:`AddBatchAnswer` (no object per entry), answered
through :meth:`BatchResponder.respond_adds` in one write once every journal it went to has
made it durable. :meth:`Durable.durable` returns how many adds it answered (for metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, final

from bkeeper.storage import AddBatch
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import Response

__all__ = [
    "AddAnswer",
    "AddBatchAnswer",
    "BatchResponder",
    "Durable",
    "Responder",
    "WhenDurable",
]


class Responder(Protocol):
    """What handlers answer through: a bookie connection (``server.connection``), or the
    in-memory cluster's stand-in (``testing.cluster``). ``request_bytes`` is what the request
    counted against the connection's in-flight limits (< 0: it was never counted)."""

    peer: str

    def respond(self, response: Response, request_bytes: int) -> None:
        """Queue ``response`` for the client."""
        ...

    def respond_add(
        self, status: StatusCode, ledger_id: int, entry_id: int, txn_id: int, request_bytes: int
    ) -> None:
        """Queue the answer to an add, in the connection's protocol, without a message."""
        ...

    def log_client_error(self, message: str, *args: object) -> None:
        """One (rate-limited) line about a bad request that is answered."""
        ...

    def log_internal_error(self, message: str, *args: object) -> None:
        """The exception being handled, with its traceback: a bookie bug."""
        ...


class BatchResponder(Protocol):
    """What answers a batch of v2 adds: a bookie connection (``server.connection``)."""

    def respond_adds(
        self,
        status: StatusCode,
        ledger_ids: list[int],
        entry_ids: list[int],
        requests: int,
        request_bytes: int,
    ) -> None:
        """Queue the answers to adds (``status`` for all), in one write; ``requests`` and
        ``request_bytes`` are what they counted against the connection's limits."""
        ...


class Durable:
    """A write's token: the storage engine hands it back once the write's journal record is
    durable (or failed), and :meth:`RequestHandlers.on_durable` calls :meth:`durable` on it
    with the status of the whole group (EOK, or the failure's status) and the error; it
    returns how many adds it answered."""

    __slots__ = ()

    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        raise NotImplementedError


@final
class AddAnswer(Durable):
    """An add: answered with the group's status on the connection it came from."""

    __slots__ = ("conn", "entry_id", "ledger_id", "request_bytes", "txn_id")

    def __init__(
        self, conn: Responder, ledger_id: int, entry_id: int, txn_id: int, request_bytes: int
    ) -> None:
        self.conn = conn
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.txn_id = txn_id
        self.request_bytes = request_bytes

    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        self.conn.respond_add(
            status, self.ledger_id, self.entry_id, self.txn_id, self.request_bytes
        )
        return 1


@final
class AddBatchAnswer(AddBatch, Durable):
    """The v2 adds of one chunk read by a connection (``storage.AddBatch``: parallel lists,
    no object per entry), answered together once each of the ``parts`` journals they went
    to made its share durable; with the worst status if one failed. The owner sets
    ``requests``/``request_bytes`` (what the accepted adds counted against the connection's
    limits) and removes refused entries' fields before the engine hands the token back."""

    __slots__ = ("conn", "error_status", "request_bytes", "requests")

    def __init__(self, conn: BatchResponder) -> None:
        AddBatch.__init__(self)
        self.conn = conn
        self.requests = 0
        self.request_bytes = 0
        self.error_status = StatusCode.EOK

    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        if status is not StatusCode.EOK:
            self.error_status = status
        self.parts -= 1
        if self.parts > 0:
            return 0
        self.conn.respond_adds(
            self.error_status, self.ledger_ids, self.entry_ids, self.requests, self.request_bytes
        )
        return self.requests


@final
class WhenDurable(Durable):
    """Any other write (fence, explicit LAC, force): ``callback(error)`` answers it."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[BaseException | None], None]) -> None:
        self.callback = callback

    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        self.callback(error)
        return 0
