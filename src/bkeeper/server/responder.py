"""How the bookie's handlers answer: the :class:`Responder` they answer through, and the
typed tokens of writes that are answered once durable.

A write (add, fence, explicit LAC, force) hands the storage engine a :class:`Durable` token;
the engine gives the tokens of a journal group back once the group is durable (or failed), and
the handlers call :meth:`Durable.durable` on each with the group's status. Every add reaches
the handlers as an :class:`AddBatchAnswer`, which is its own token: the plain v2 adds of one
chunk (parallel lists, no object per entry), the v3 adds of one chunk, or one add (a v2 add
with flags, a v3 request not gathered). It is answered once every journal it went to made
its share durable: one add, or each v3 add, through :meth:`Responder.respond_add`, many v2
adds through :meth:`BatchResponder.respond_adds` in one write.
The other writes pass their answer as a :class:`WhenDurable` callback.
:meth:`Durable.durable` returns how many adds it answered (for metrics).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol, cast, final

from bkeeper.common.limits import MASTER_KEY_BYTES
from bkeeper.storage import AddBatch
from bkeeper.wire.codes import StatusCode, V2Flag
from bkeeper.wire.messages import Response

__all__ = [
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


_LAC = struct.Struct(">q")
_LAC_AT = 16
_RECOVERY = int(V2Flag.RECOVERY_ADD)
_HIGH_PRIORITY = int(V2Flag.HIGH_PRIORITY)
#: A v2 ADD frame's bytes (as the connection counts them: without the length prefix) besides
#: the entry body: the header and the master key.
_V2_ADD_FRAME_BYTES = 4 + MASTER_KEY_BYTES


@final
class AddBatchAnswer(AddBatch, Durable):
    """Adds read by a connection, handed to the handlers together (``storage.AddBatch``:
    parallel lists, no object per entry): the plain v2 adds of one chunk, or one add (see
    :meth:`single`). It is its own token, answered once each of the ``parts`` journals its
    adds went to made its share durable, with the worst status if one failed.

    ``requests`` and ``request_bytes`` are what the adds counted against the connection's
    limits (``request_bytes`` < 0: over them, never counted); the handlers take refused
    entries out before the engine hands the token back. ``high_priority``: taken by a
    read-only bookie while its disk has room (as recovery adds are); ``txn_id``: a single
    add's v3 request's. The v3 adds of one chunk (:meth:`gathering`) keep each add's txn id
    and counted bytes in ``txn_ids`` and ``sizes`` (None otherwise), and are answered one
    response each (v3 has no batched answer)."""

    __slots__ = (
        "conn",
        "error_status",
        "high_priority",
        "request_bytes",
        "requests",
        "sizes",
        "txn_id",
        "txn_ids",
    )

    def __init__(self, conn: Responder) -> None:
        AddBatch.__init__(self)
        self.conn = conn
        self.high_priority = False
        self.txn_id = 0
        self.txn_ids: list[int] | None = None
        self.sizes: list[int] | None = None
        self.requests = 0
        self.request_bytes = 0
        self.error_status = StatusCode.EOK

    @classmethod
    def gathering(cls, conn: Responder, recovery: bool, high_priority: bool) -> AddBatchAnswer:
        """An empty batch for v3 adds of these flags, which :meth:`gather` fills."""
        batch = cls(conn)
        batch.recovery = recovery
        batch.high_priority = high_priority
        batch.txn_ids = []
        batch.sizes = []
        return batch

    def gather(
        self,
        ledger_id: int,
        entry_id: int,
        lac: int,
        master_key: bytes,
        body: bytes,
        txn_id: int,
        request_bytes: int,
    ) -> None:
        """One more v3 add (``lac`` as its body names it, ``request_bytes`` counted)."""
        assert self.txn_ids is not None and self.sizes is not None
        self.ledger_ids.append(ledger_id)
        self.entry_ids.append(entry_id)
        self.lacs.append(lac)
        self.master_keys.append(master_key)
        self.bodies.append(body)
        self.txn_ids.append(txn_id)
        self.sizes.append(request_bytes)
        self.requests += 1
        self.request_bytes += request_bytes

    @classmethod
    def single(
        cls,
        conn: Responder,
        flags: int,
        ledger_id: int,
        entry_id: int,
        master_key: bytes | bytearray | memoryview,
        body: bytes | bytearray | memoryview,
        txn_id: int,
        request_bytes: int,
        lac: int | None = None,
    ) -> AddBatchAnswer:
        """One add: ``flags`` are :class:`V2Flag` bits. ``lac``: the one the body names, when
        the caller read it already; else it is read from the body when that is long enough
        (the engine refuses a shorter one)."""
        body = bytes(body)
        if lac is None:
            lac = _LAC.unpack_from(body, _LAC_AT)[0] if len(body) >= _LAC_AT + 8 else -1
        key = bytes(master_key)
        batch = cls.of_one(ledger_id, entry_id, lac, key, body, flags & _RECOVERY != 0)
        batch.conn = conn
        batch.high_priority = flags & _HIGH_PRIORITY != 0
        batch.txn_id = txn_id
        batch.txn_ids = batch.sizes = None
        batch.requests = 1
        batch.request_bytes = request_bytes
        batch.error_status = StatusCode.EOK
        return batch

    @classmethod
    def taking(
        cls, conn: Responder, collected: AddBatch, requests: int, request_bytes: int
    ) -> AddBatchAnswer:
        """The plain adds ``collected`` (which gets the new batch's empty lists in exchange),
        which counted ``requests`` and ``request_bytes`` against the connection's limits."""
        batch = cls(conn)
        batch.ledger_ids, collected.ledger_ids = collected.ledger_ids, batch.ledger_ids
        batch.entry_ids, collected.entry_ids = collected.entry_ids, batch.entry_ids
        batch.lacs, collected.lacs = collected.lacs, batch.lacs
        batch.master_keys, collected.master_keys = collected.master_keys, batch.master_keys
        batch.bodies, collected.bodies = collected.bodies, batch.bodies
        batch.requests = requests
        batch.request_bytes = request_bytes
        return batch

    def request_bytes_of(self, index: int) -> int:
        """What the add at ``index`` counted against the connection's limits: a batch of
        many plain v2 adds holds their frames, which are their header, master key and body."""
        if self.sizes is not None:
            return self.sizes[index]
        if len(self.bodies) == 1:
            return self.request_bytes
        return _V2_ADD_FRAME_BYTES + len(self.bodies[index])

    def txn_id_of(self, index: int) -> int:
        """The txn id to answer the add at ``index`` with (0 for v2 adds)."""
        return self.txn_id if self.txn_ids is None else self.txn_ids[index]

    def keep(self, indexes: list[int]) -> None:
        """Keep only the adds at ``indexes`` (those the engine took), for their answers."""
        self.ledger_ids = [self.ledger_ids[i] for i in indexes]
        self.entry_ids = [self.entry_ids[i] for i in indexes]
        self.bodies = [self.bodies[i] for i in indexes]
        if self.txn_ids is not None and self.sizes is not None:
            self.txn_ids = [self.txn_ids[i] for i in indexes]
            self.sizes = [self.sizes[i] for i in indexes]

    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        if status is not StatusCode.EOK:
            self.error_status = status
        self.parts -= 1
        if self.parts > 0:
            return 0
        txn_ids = self.txn_ids
        if txn_ids is not None:  # v3 adds of a chunk: one answer each
            assert self.sizes is not None
            respond_add, status, sizes = self.conn.respond_add, self.error_status, self.sizes
            for ledger_id, entry_id, txn_id, size in zip(
                self.ledger_ids, self.entry_ids, txn_ids, sizes, strict=True
            ):
                respond_add(status, ledger_id, entry_id, txn_id, size)
            return len(txn_ids)
        if len(self.entry_ids) == 1:
            self.conn.respond_add(
                self.error_status,
                self.ledger_ids[0],
                self.entry_ids[0],
                self.txn_id,
                self.request_bytes,
            )
            return 1
        # Batches of many are made by a bookie connection only (plain v2 adds).
        cast(BatchResponder, self.conn).respond_adds(
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
