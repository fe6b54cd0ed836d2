"""Request handlers of the bookie: one small method per request type.

Handlers run on the event loop. They validate, call the storage engine and answer through
the connection. Writes (add, fence, explicit LAC, force) are answered only once the storage
engine reports their journal records durable (``on_durable``, bridged from the journal
thread once per fsync group). Reads are answered at once, except long-poll reads, which wait
(bounded in number and time) until the bookie's LAC for the ledger passes ``previous_lac``.
They are woken as the LAC arrives (with an add or a WRITE_LAC), not once that add is durable
here: a LAC names entries the writer already has on an ack quorum, so this bookie's own
fsync adds nothing to what the reader may rely on, only latency.
Every add, v2 or v3, single or batched, goes through the one handler
:meth:`RequestHandlers.add` as an :class:`~bkeeper.server.responder.AddBatchAnswer`, which
hands it to the engine's one add body (``Storage.add_entries``): a v2 connection builds the
batch from the frames (``BookieConnection``), a v3 ADD request becomes a batch of one here.
Answers go through a :class:`~bkeeper.server.responder.Responder`, writes carry typed tokens
(same module).

Error mapping: master key mismatch -> EUA; fenced ledger and not a recovery add -> EFENCED;
read-only bookie and not a recovery/high-priority add (or one, but the disk has no room left
for it) -> EREADONLY; a write that failed or was refused for lack of disk space -> EREADONLY;
any other failed write -> EIO; unknown ledger -> ENOLEDGER; missing entry -> ENOENTRY;
"cannot tell" -> EUNKNOWNLEDGERSTATE; anything the bookie does not serve -> EBADREQ.

Metrics (``metrics``, optional; :mod:`bkeeper.server.request_metrics`): adds are counted once
per journal group in :meth:`RequestHandlers.on_durable` (and each refusal as it happens);
every other request is answered through a ``TimedResponder`` that counts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from bkeeper.common import errors
from bkeeper.server.request_metrics import RequestMetrics, TimedResponder
from bkeeper.server.responder import AddBatchAnswer, Durable, Responder, WhenDurable
from bkeeper.storage import GroupTokens, Storage, entry_lac
from bkeeper.wire import entryset
from bkeeper.wire.codes import GetBookieInfoField, StatusCode, V2Flag, status_for_error
from bkeeper.wire.messages import (
    AUTH_DISABLED_PLUGIN,
    AddRequest,
    AddResponse,
    AuthMessage,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    ErrorResponse,
    ForceLedgerRequest,
    ForceLedgerResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    GetListOfEntriesRequest,
    GetListOfEntriesResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    StartTlsRequest,
    StartTlsResponse,
    UnknownRequest,
    WriteLacRequest,
    WriteLacResponse,
)

if TYPE_CHECKING:
    from bkeeper.server.config import BookieConfig

__all__ = ["BookieState", "RequestHandlers", "error_response"]

log = logging.getLogger(__name__)

#: An exception raised while serving, as the status answering it (the wire registry).
status_of = status_for_error

_RECOVERY = int(V2Flag.RECOVERY_ADD)
_HIGH_PRIORITY = int(V2Flag.HIGH_PRIORITY)


@dataclass(slots=True)
class _LacWaiter:
    conn: Responder
    request: ReadRequest
    size: int
    timer: asyncio.TimerHandle | None = None
    done: bool = False


@dataclass
class BookieState:
    """Mutable state shared by handlers and the bookie: read-only mode and counters."""

    readonly: bool = False
    adds: int = 0
    reads: int = 0
    lac_waiters: dict[int, list[_LacWaiter]] = field(default_factory=dict)
    lac_waiter_count: int = 0


class RequestHandlers:
    """Dispatches decoded requests to per-type handlers."""

    def __init__(
        self,
        config: BookieConfig,
        storage: Storage,
        state: BookieState,
        metrics: RequestMetrics | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._storage = storage
        self.state = state
        self._loop = asyncio.get_running_loop()
        self._table: dict[type[Any], Callable[[Responder, Any, int], None]] = {
            AddRequest: self._add_request,
            ReadRequest: self.read,
            BatchReadRequest: self.batch_read,
            AuthRequest: self.auth,
            WriteLacRequest: self.write_lac,
            ReadLacRequest: self.read_lac,
            GetBookieInfoRequest: self.bookie_info,
            StartTlsRequest: self.start_tls,
            ForceLedgerRequest: self.force_ledger,
            GetListOfEntriesRequest: self.list_entries,
            UnknownRequest: self.unknown,
        }

    # -- dispatch ----------------------------------------------------------------------
    def dispatch(self, conn: Responder, request: Request, size: int) -> None:
        metrics = self._metrics
        if metrics is not None and type(request) is not AddRequest:
            conn = TimedResponder(conn, metrics, metrics.op_of(request))
        if size < 0:
            conn.respond(error_response(request, StatusCode.ETOOMANYREQUESTS), size)
            return
        handler = self._table[type(request)]
        try:
            handler(conn, request, size)
        except errors.BKeeperError as exc:
            conn.respond(error_response(request, status_of(exc)), size)
        except Exception:
            conn.log_internal_error("handler for %s failed", type(request).__name__)
            conn.respond(error_response(request, StatusCode.EIO), size)

    def on_durable_threadsafe(self, tokens: GroupTokens, error: BaseException | None) -> None:
        """Storage callback, called on the journal thread: hop to the loop once per group."""
        self._loop.call_soon_threadsafe(self.on_durable, tokens, error)

    def on_durable(self, tokens: GroupTokens, error: BaseException | None) -> None:
        """Answer every write of a journal group (each token is a :class:`Durable`)."""
        if error is not None and not isinstance(error, errors.DiskFullError):
            log.error("journal write failed: %s", error)  # (no room: the journal said so)
        status = StatusCode.EOK if error is None else status_of(error)
        adds = 0
        for token in cast(list[Durable], tokens):
            try:
                adds += token.durable(status, error)
            except Exception:  # a bookie bug: the group's other writes are answered still
                log.exception("answering a write of a journal group failed")
        self.state.adds += adds
        metrics = self._metrics
        if metrics is not None and adds:
            metrics.adds_answered(adds, tokens.started_at, failed=error is not None)

    # -- writes ------------------------------------------------------------------------
    def add(self, conn: Responder, batch: AddBatchAnswer) -> None:
        """The one add handler, for both protocols, single adds and batches alike: the engine
        adds ``batch`` (``Storage.add_entries``) and hands it back as a token once durable;
        the adds it refused are answered at once and taken out of the batch. Refused whole:
        over the connection's limits (``batch.request_bytes`` < 0), or a read-only bookie
        and not recovery/high-priority adds with room left for them."""
        try:
            if batch.request_bytes < 0:
                raise errors.TooManyRequestsError("too many requests in flight")
            if self.state.readonly and not (
                (batch.recovery or batch.high_priority) and self._storage.room_for_high_priority
            ):
                raise errors.ReadOnlyBookieError("bookie is read-only")
            self._storage.add_entries(batch)
        except errors.BKeeperError as exc:
            self._refuse(conn, batch, status_of(exc))
            return
        except Exception:  # a bookie bug: nothing of the batch is answered otherwise
            ledger_id, entry_id = batch.ledger_ids[0], batch.entry_ids[0]
            conn.log_internal_error(
                "add of %d entries (ledger %d entry %d first) failed",
                len(batch.entry_ids), ledger_id, entry_id,
            )  # fmt: skip
            self._refuse(conn, batch, StatusCode.EIO)
            return
        if batch.refused:
            self._answer_refused(conn, batch)
        if self.state.lac_waiters:
            ledger_ids = batch.ledger_ids
            if len(ledger_ids) == 1:  # a single add: no set to build
                self._wake_lac_waiters(ledger_ids[0])
            else:
                for ledger_id in set(ledger_ids):
                    self._wake_lac_waiters(ledger_id)

    def _refuse(self, conn: Responder, batch: AddBatchAnswer, status: StatusCode) -> None:
        """Answer every add of ``batch`` with ``status`` (none reached the journal)."""
        for index in range(len(batch.entry_ids)):
            size = batch.request_bytes_of(index)
            txn_id = batch.txn_id_of(index)
            conn.respond_add(status, batch.ledger_ids[index], batch.entry_ids[index], txn_id, size)
            if self._metrics is not None:
                self._metrics.add_refused()

    def _answer_refused(self, conn: Responder, batch: AddBatchAnswer) -> None:
        """Answer the adds the engine refused and take them out of the batch (which the
        journal thread hands back through the loop, so not before this returns)."""
        refused = dict(batch.refused)
        ledger_ids, entry_ids = batch.ledger_ids, batch.entry_ids
        for index, error in batch.refused:
            size = batch.request_bytes_of(index)
            txn_id = batch.txn_id_of(index)
            conn.respond_add(status_of(error), ledger_ids[index], entry_ids[index], txn_id, size)
            batch.requests -= 1
            batch.request_bytes -= size
            if self._metrics is not None:
                self._metrics.add_refused()
        batch.keep([i for i in range(len(entry_ids)) if i not in refused])
        batch.refused = []

    def _add_request(self, conn: Responder, request: AddRequest, size: int) -> None:
        """A v3 ADD (or a decoded v2 one): a batch of one for :meth:`add`."""
        flags = (_RECOVERY if request.recovery else 0) | (
            _HIGH_PRIORITY if request.high_priority else 0
        )
        ledger_id, entry_id, txn_id = request.ledger_id, request.entry_id, request.txn_id
        try:
            lac = entry_lac(ledger_id, entry_id, request.body)  # the ids beside the body
        except errors.BadRequestError:
            conn.respond_add(StatusCode.EBADREQ, ledger_id, entry_id, txn_id, size)
            if self._metrics is not None:
                self._metrics.add_refused()
            return
        batch = AddBatchAnswer.single(
            conn, flags, ledger_id, entry_id, request.master_key, request.body, txn_id, size, lac
        )
        self.add(conn, batch)

    def write_lac(self, conn: Responder, request: WriteLacRequest, size: int) -> None:
        def done(error: BaseException | None) -> None:
            status = StatusCode.EOK if error is None else status_of(error)
            conn.respond(WriteLacResponse(status, request.ledger_id, request.txn_id), size)

        token = self._when_durable(done)
        self._storage.set_explicit_lac(
            request.ledger_id, request.master_key, bytes(request.body), token=token
        )
        self._wake_lac_waiters(request.ledger_id)

    def force_ledger(self, conn: Responder, request: ForceLedgerRequest, size: int) -> None:
        def done(error: BaseException | None) -> None:
            status = StatusCode.EOK if error is None else status_of(error)
            conn.respond(ForceLedgerResponse(status, request.ledger_id, request.txn_id), size)

        self._storage.force_ledger(request.ledger_id, token=self._when_durable(done))

    def _when_durable(self, done: Callable[[BaseException | None], None]) -> WhenDurable:
        """The token of a write other than an add."""
        return WhenDurable(done)

    # -- reads -------------------------------------------------------------------------
    def read(self, conn: Responder, request: ReadRequest, size: int) -> None:
        self.state.reads += 1
        if request.fence:
            self._fence_then_read(conn, request, size)
        elif request.previous_lac is not None and request.timeout_ms is not None:
            self._long_poll(conn, request, size)
        else:
            conn.respond(self._read_response(request), size)

    def _fence_then_read(self, conn: Responder, request: ReadRequest, size: int) -> None:
        if request.master_key is None:
            raise errors.BadRequestError("fencing read without master key")

        def done(error: BaseException | None) -> None:
            if error is not None:
                conn.respond(error_response(request, StatusCode.EIO), size)
            else:
                conn.respond(self._read_response(request), size)

        self._storage.fence(request.ledger_id, request.master_key, token=self._when_durable(done))

    def _read_response(self, request: ReadRequest) -> ReadResponse:
        storage = self._storage
        try:
            body = storage.read_entry(request.ledger_id, request.entry_id)
        except errors.BKeeperError as exc:
            return ReadResponse(
                status_of(exc), request.ledger_id, request.entry_id, txn_id=request.txn_id
            )
        # The header echoes the requested entry id (also -1 for "last entry"), as Apache
        # BookKeeper does: clients match responses on it; the body names the real entry.
        return ReadResponse(
            StatusCode.EOK,
            request.ledger_id,
            request.entry_id,
            body,
            max_lac=storage.last_add_confirmed(request.ledger_id),
            txn_id=request.txn_id,
        )

    def _long_poll(self, conn: Responder, request: ReadRequest, size: int) -> None:
        assert request.previous_lac is not None and request.timeout_ms is not None
        self._storage.require_ledger(request.ledger_id)
        if self._storage.last_add_confirmed(request.ledger_id) > request.previous_lac:
            conn.respond(self._long_poll_response(request), size)
            return
        if self.state.lac_waiter_count >= self._config.long_poll_waiters_max:
            raise errors.TooManyRequestsError("too many long-poll reads waiting")
        waiter = _LacWaiter(conn, request, size)
        timeout_s = min(request.timeout_ms, self._config.long_poll_timeout_ms_max) / 1000.0
        waiter.timer = self._loop.call_later(timeout_s, self._finish_waiter, waiter)
        self.state.lac_waiters.setdefault(request.ledger_id, []).append(waiter)
        self.state.lac_waiter_count += 1

    def _long_poll_response(self, request: ReadRequest) -> ReadResponse:
        """The LAC, and with ``piggyback`` the entry after ``previous_lac`` once the LAC
        covers it. Apache BookKeeper's clients ask for it as entry -1 (its bookies refuse
        any other id with piggyback); bkeeper's bookies also take the entry's own id. The
        header echoes the requested id, as Apache BookKeeper's does."""
        storage = self._storage
        lac = storage.last_add_confirmed(request.ledger_id)
        body = None
        previous = request.previous_lac if request.previous_lac is not None else -1
        if request.piggyback and lac > previous:
            wanted = request.entry_id if request.entry_id >= 0 else previous + 1
            if wanted <= lac:
                try:
                    body = storage.read_entry(request.ledger_id, wanted)
                except errors.BKeeperError:
                    body = None
        return ReadResponse(
            StatusCode.EOK,
            request.ledger_id,
            request.entry_id,
            body,
            max_lac=lac,
            txn_id=request.txn_id,
        )

    def _wake_lac_waiters(self, ledger_id: int) -> None:
        waiters = self.state.lac_waiters.get(ledger_id)
        if not waiters:
            return
        lac = self._storage.last_add_confirmed(ledger_id)
        for waiter in list(waiters):
            assert waiter.request.previous_lac is not None
            if lac > waiter.request.previous_lac:
                self._finish_waiter(waiter)

    def _finish_waiter(self, waiter: _LacWaiter) -> None:
        if waiter.done:
            return
        waiter.done = True
        if waiter.timer is not None:
            waiter.timer.cancel()
        waiters = self.state.lac_waiters.get(waiter.request.ledger_id, [])
        if waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self.state.lac_waiters[waiter.request.ledger_id]
        self.state.lac_waiter_count -= 1
        waiter.conn.respond(self._long_poll_response(waiter.request), waiter.size)

    def batch_read(self, conn: Responder, request: BatchReadRequest, size: int) -> None:
        def answer() -> None:
            bodies = self._storage.read_entries(
                request.ledger_id,
                request.start_entry_id,
                min(request.max_count, self._config.batch_read_entries_max),
                min(request.max_size, self._config.batch_read_bytes_max),
            )
            conn.respond(
                BatchReadResponse(
                    StatusCode.EOK,
                    request.ledger_id,
                    request.start_entry_id,
                    request.request_id,
                    tuple(bodies),
                    request.txn_id,
                ),
                size,
            )

        if request.fence:
            if request.master_key is None:
                raise errors.BadRequestError("fencing batch read without master key")

            def fenced(error: BaseException | None) -> None:
                if error is not None:
                    conn.respond(error_response(request, StatusCode.EIO), size)
                    return
                try:
                    answer()
                except errors.BKeeperError as exc:
                    conn.respond(error_response(request, status_of(exc)), size)

            token = self._when_durable(fenced)
            self._storage.fence(request.ledger_id, request.master_key, token=token)
        else:
            answer()

    def read_lac(self, conn: Responder, request: ReadLacRequest, size: int) -> None:
        storage = self._storage
        storage.require_ledger(request.ledger_id)
        lac_body = storage.explicit_lac(request.ledger_id)
        try:
            last = storage.read_entry(request.ledger_id, -1)
        except errors.DataUnknownError:
            raise  # in limbo: its last entry may not be the last one written
        except errors.BKeeperError:
            last = None
        conn.respond(
            ReadLacResponse(StatusCode.EOK, request.ledger_id, lac_body, last, request.txn_id),
            size,
        )

    def list_entries(self, conn: Responder, request: GetListOfEntriesRequest, size: int) -> None:
        ids = self._storage.list_entries(request.ledger_id)
        conn.respond(
            GetListOfEntriesResponse(
                StatusCode.EOK,
                request.ledger_id,
                entryset.encode_entry_ids(ids),
                request.txn_id,
            ),
            size,
        )

    # -- control -----------------------------------------------------------------------
    def auth(self, conn: Responder, request: AuthRequest, size: int) -> None:
        # Authentication is disabled: every channel counts as authenticated at once, and an
        # AUTH exchange gets the AuthDisabledPlugin answer.
        reply = AuthMessage(AUTH_DISABLED_PLUGIN, b"")
        conn.respond(AuthResponse(StatusCode.EOK, reply, request.txn_id), size)

    def bookie_info(self, conn: Responder, request: GetBookieInfoRequest, size: int) -> None:
        total_bytes, free_bytes = self._storage.disk_usage()
        fields = request.requested
        total = total_bytes if fields & GetBookieInfoField.TOTAL_DISK_CAPACITY else None
        free = free_bytes if fields & GetBookieInfoField.FREE_DISK_SPACE else None
        conn.respond(GetBookieInfoResponse(StatusCode.EOK, total, free, request.txn_id), size)

    def start_tls(self, conn: Responder, request: StartTlsRequest, size: int) -> None:
        # TLS is not configured on this bookie; the Java bookie answers EBADREQ likewise.
        conn.respond(StartTlsResponse(StatusCode.EBADREQ, request.txn_id), size)

    def unknown(self, conn: Responder, request: UnknownRequest, size: int) -> None:
        conn.log_client_error(
            "EBADREQ to %s: %s",
            conn.peer,
            request.reason or f"operation {request.operation} is not served",
        )
        conn.respond(error_response(request, StatusCode.EBADREQ), size)


def error_response(request: Request, status: StatusCode) -> Any:
    """The response to ``request`` carrying only ``status``."""
    txn = request.txn_id
    if isinstance(request, AddRequest):
        return AddResponse(status, request.ledger_id, request.entry_id, txn)
    if isinstance(request, ReadRequest):
        return ReadResponse(status, request.ledger_id, request.entry_id, txn_id=txn)
    if isinstance(request, BatchReadRequest):
        return BatchReadResponse(
            status, request.ledger_id, request.start_entry_id, request.request_id, txn_id=txn
        )
    if isinstance(request, WriteLacRequest):
        return WriteLacResponse(status, request.ledger_id, txn)
    if isinstance(request, ReadLacRequest):
        return ReadLacResponse(status, request.ledger_id, txn_id=txn)
    if isinstance(request, ForceLedgerRequest):
        return ForceLedgerResponse(status, request.ledger_id, txn)
    if isinstance(request, GetListOfEntriesRequest):
        return GetListOfEntriesResponse(status, request.ledger_id, txn_id=txn)
    if isinstance(request, GetBookieInfoRequest):
        return GetBookieInfoResponse(status, txn_id=txn)
    if isinstance(request, AuthRequest):
        return AuthResponse(status, txn_id=txn)
    if isinstance(request, StartTlsRequest):
        return StartTlsResponse(status, txn)
    return ErrorResponse(request.operation, status, txn, request.ledger_id, request.entry_id)
