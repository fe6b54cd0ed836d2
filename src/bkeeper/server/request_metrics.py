"""The bookie's request metrics: counts, errors and latency per operation.

Adds are counted per journal group, never per add: :meth:`RequestMetrics.adds_answered`
takes a whole group once it is durable, with the time its oldest record could have arrived
(``GroupTokens.started_at``), so every add of a group is counted with the group's latency
(an upper bound for each: from the group's start to the answers being queued). Adds refused
at once (read-only, fenced, over the limits) are counted as requests and errors, without a
latency. Every other request is timed from its dispatch to its response being queued by a
:class:`TimedResponder` that stands between the handler and the connection, and counts an
error for each response whose status is not EOK.
"""

from __future__ import annotations

from bkeeper.common.clock import Clock
from bkeeper.common.metrics import MetricSet
from bkeeper.server.responder import Responder
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import (
    BatchReadRequest,
    BatchReadResponse,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    ReadLacRequest,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
)

__all__ = ["OPS", "OpMetrics", "RequestMetrics", "TimedResponder"]

#: The values of the ``op`` label.
OPS = (
    "add",
    "read",
    "long_poll",
    "batch_read",
    "read_lac",
    "write_lac",
    "force",
    "get_bookie_info",
    "other",
)
_OP_OF_TYPE: dict[type[Request], str] = {
    BatchReadRequest: "batch_read",
    ReadLacRequest: "read_lac",
    WriteLacRequest: "write_lac",
    ForceLedgerRequest: "force",
    GetBookieInfoRequest: "get_bookie_info",
}
_EOK = StatusCode.EOK


class OpMetrics:
    """One operation's series."""

    __slots__ = ("errors", "latency", "requests")

    def __init__(self, metrics: MetricSet, op: str) -> None:
        self.requests = metrics.counter(
            "bkeeper_bookie_requests_total",
            "Requests, by operation (adds counted when answered, the others on arrival).",
            op=op,
        )
        self.errors = metrics.counter(
            "bkeeper_bookie_request_errors_total",
            "Requests answered with a status other than EOK, by operation.",
            op=op,
        )
        self.latency = metrics.histogram(
            "bkeeper_bookie_request_latency_seconds",
            "From a request's arrival to its response being queued, by operation.",
            op=op,
        )


class RequestMetrics:
    """The request series of one bookie."""

    def __init__(self, metrics: MetricSet, clock: Clock) -> None:
        self.clock = clock
        self.ops = {op: OpMetrics(metrics, op) for op in OPS}
        self.add = self.ops["add"]
        self.read_bytes = metrics.counter(
            "bkeeper_bookie_read_bytes_total", "Bytes of entry bodies answered to reads."
        )

    def op_of(self, request: Request) -> OpMetrics:
        if type(request) is ReadRequest:
            long_poll = request.previous_lac is not None and request.timeout_ms is not None
            return self.ops["long_poll" if long_poll and not request.fence else "read"]
        return self.ops[_OP_OF_TYPE.get(type(request), "other")]

    def adds_answered(self, count: int, started_at: float, failed: bool) -> None:
        """A journal group's ``count`` adds were answered (all failed, or none)."""
        add = self.add
        add.requests.value += count
        if failed:
            add.errors.value += count
        add.latency.observe_many(self.clock.monotonic() - started_at, count)

    def add_refused(self) -> None:
        self.add.requests.value += 1
        self.add.errors.value += 1


class TimedResponder:
    """A :class:`Responder` for one request (not an add): forwards to the connection and
    counts the response (latency, error, bytes read) as it is queued."""

    __slots__ = ("_conn", "_metrics", "_op", "_started", "peer")

    def __init__(self, conn: Responder, metrics: RequestMetrics, op: OpMetrics) -> None:
        self._conn = conn
        self._metrics = metrics
        self._op = op
        self._started = metrics.clock.monotonic()
        self.peer = conn.peer
        op.requests.value += 1

    def respond(self, response: Response, request_bytes: int) -> None:
        op = self._op
        op.latency.observe(self._metrics.clock.monotonic() - self._started)
        if response.status != _EOK:
            op.errors.value += 1
        elif type(response) is ReadResponse:
            if response.body is not None:
                self._metrics.read_bytes.value += len(response.body)
        elif type(response) is BatchReadResponse:
            self._metrics.read_bytes.value += sum(map(len, response.bodies))
        self._conn.respond(response, request_bytes)

    def respond_add(
        self, status: StatusCode, ledger_id: int, entry_id: int, txn_id: int, request_bytes: int
    ) -> None:
        self._conn.respond_add(status, ledger_id, entry_id, txn_id, request_bytes)

    def log_client_error(self, message: str, *args: object) -> None:
        self._conn.log_client_error(message, *args)

    def log_internal_error(self, message: str, *args: object) -> None:
        self._conn.log_internal_error(message, *args)
