"""The v3 codec's requests: :func:`decode_request` (a request bkeeper does not serve, or with
values this codec does not know, decodes to ``UnknownRequest`` with its txn id: the bookie
answers EBADREQ and keeps the connection) and :func:`encode_request`. :mod:`bkeeper.wire.v3`
is the codec's face; its module doc has the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bkeeper.common.errors import ProtocolError
from bkeeper.wire._pb import bookkeeper_protocol_pb2 as pb
from bkeeper.wire.codes import OperationType
from bkeeper.wire.messages import (
    AddRequest,
    AuthRequest,
    BytesLike,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    GetListOfEntriesRequest,
    ReadLacRequest,
    ReadRequest,
    Request,
    StartTlsRequest,
    UnknownRequest,
    WriteLacRequest,
)
from bkeeper.wire.v3_fields import (
    ADD_OP,
    FENCE_FLAG,
    FRAME_LENGTH,
    PIGGYBACK_FLAG,
    READ_OP,
    RECOVERY_FLAG,
    auth_message,
    check_required,
    fill_header,
    optional_field,
    parse_message,
    raw_enum,
    raw_operation,
)

__all__ = ["decode_request", "encode_request", "encode_request_frame"]


def _unknown_flag(message: Any, operation: int, txn: int, what: str) -> UnknownRequest | None:
    """An :class:`UnknownRequest` if ``message`` (with ``ledgerId`` and ``entryId``) carries
    a ``flag`` (field 100) value this codec does not know."""
    flag = raw_enum(message, 100)
    if flag is None:
        return None
    return UnknownRequest(
        operation, txn, message.ledgerId, message.entryId, f"{what} flag {flag} is unknown"
    )


def _add_request(r: Any, txn: int, priority: int) -> Request:
    a = r.addRequest
    check_required(a, "AddRequest")
    if not a.HasField("flag") and (bad := _unknown_flag(a, ADD_OP, txn, "AddRequest")):
        return bad
    recovery = a.HasField("flag") and a.flag == RECOVERY_FLAG
    return AddRequest(
        a.ledgerId, a.entryId, a.masterKey, a.body, recovery, priority > 0, a.writeFlags, txn
    )


def _read_request(r: Any, txn: int, priority: int) -> Request:
    q = r.readRequest
    check_required(q, "ReadRequest")
    if not q.HasField("flag") and (bad := _unknown_flag(q, READ_OP, txn, "ReadRequest")):
        return bad
    flag = q.flag if q.HasField("flag") else 0
    return ReadRequest(
        q.ledgerId,
        q.entryId,
        fence=flag == FENCE_FLAG,
        master_key=optional_field(q, "masterKey"),
        piggyback=flag == PIGGYBACK_FLAG,
        previous_lac=optional_field(q, "previousLAC"),
        timeout_ms=optional_field(q, "timeOut"),
        high_priority=priority > 0,
        txn_id=txn,
    )


def _write_lac_request(r: Any, txn: int, _: int) -> WriteLacRequest:
    w = r.writeLacRequest
    check_required(w, "WriteLacRequest")
    return WriteLacRequest(w.ledgerId, w.lac, w.masterKey, w.body, txn)


def _auth_request(r: Any, txn: int, _: int) -> AuthRequest:
    return AuthRequest(auth_message(r.authRequest), txn)


_REQUEST_DECODERS: dict[int, tuple[str, Callable[[Any, int, int], Request]]] = {
    OperationType.ADD_ENTRY: ("addRequest", _add_request),
    OperationType.READ_ENTRY: ("readRequest", _read_request),
    OperationType.AUTH: ("authRequest", _auth_request),
    OperationType.WRITE_LAC: ("writeLacRequest", _write_lac_request),
    OperationType.READ_LAC: (
        "readLacRequest",
        lambda r, txn, _: ReadLacRequest(r.readLacRequest.ledgerId, txn),
    ),
    OperationType.GET_BOOKIE_INFO: (
        "getBookieInfoRequest",
        lambda r, txn, _: GetBookieInfoRequest(r.getBookieInfoRequest.requested, txn),
    ),
    OperationType.START_TLS: ("startTLSRequest", lambda r, txn, _: StartTlsRequest(txn)),
    OperationType.FORCE_LEDGER: (
        "forceLedgerRequest",
        lambda r, txn, _: ForceLedgerRequest(r.forceLedgerRequest.ledgerId, txn),
    ),
    OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER: (
        "getListOfEntriesOfLedgerRequest",
        lambda r, txn, _: GetListOfEntriesRequest(r.getListOfEntriesOfLedgerRequest.ledgerId, txn),
    ),
}


def decode_request(frame: BytesLike) -> Request:
    """Decode a ``Request`` frame (without its length prefix)."""
    r = parse_message(pb.Request, frame, "Request")
    if not r.HasField("header"):
        raise ProtocolError("v3 Request lacks its header")
    h = r.header
    if not h.HasField("txnId"):
        raise ProtocolError("v3 Request header lacks txnId")
    txn = h.txnId
    operation = h.operation if h.HasField("operation") else raw_operation(h)
    if operation is None:
        raise ProtocolError("v3 Request header lacks operation")
    if not h.HasField("version"):
        version = raw_enum(h, 1)
        reason = "the header lacks its protocol version"
        if version is not None:
            reason = f"protocol version {version} is unknown"
        return UnknownRequest(operation, txn, reason=reason)
    decoder = _REQUEST_DECODERS.get(operation)
    if decoder is None:
        return UnknownRequest(operation, txn)
    # From here on the txn id is known: a bad body is answered EBADREQ, the connection kept.
    field, decode = decoder
    name = OperationType(operation).name
    if not r.HasField(field):
        return UnknownRequest(operation, txn, reason=f"v3 {name} request lacks {field}")
    try:
        return decode(r, txn, h.priority)
    except ProtocolError as exc:
        return UnknownRequest(operation, txn, reason=str(exc))
    except (ValueError, TypeError) as exc:
        return UnknownRequest(operation, txn, reason=f"invalid v3 {name} request: {exc}")


def _encode_add_request(m: AddRequest, r: Any) -> int:
    a = r.addRequest
    a.ledgerId = m.ledger_id
    a.entryId = m.entry_id
    a.masterKey = m.master_key
    a.body = bytes(m.body)
    if m.recovery:
        a.flag = RECOVERY_FLAG
    if m.write_flags:
        a.writeFlags = m.write_flags
    return OperationType.ADD_ENTRY


def _encode_read_request(m: ReadRequest, r: Any) -> int:
    q = r.readRequest
    q.ledgerId = m.ledger_id
    q.entryId = m.entry_id
    if m.fence:
        q.flag = FENCE_FLAG
    elif m.piggyback:
        q.flag = PIGGYBACK_FLAG
    if m.master_key is not None:
        q.masterKey = m.master_key
    if m.previous_lac is not None:
        q.previousLAC = m.previous_lac
    if m.timeout_ms is not None:
        q.timeOut = m.timeout_ms
    return OperationType.READ_ENTRY


def _encode_write_lac(m: WriteLacRequest, r: Any) -> int:
    w = r.writeLacRequest
    w.ledgerId, w.lac, w.masterKey, w.body = m.ledger_id, m.lac, m.master_key, bytes(m.body)
    return OperationType.WRITE_LAC


def _encode_auth(m: AuthRequest, r: Any) -> int:
    r.authRequest.authPluginName = m.auth.plugin_name
    r.authRequest.payload = m.auth.payload
    return OperationType.AUTH


def _encode_simple(field: str, operation: int, attr: str | None) -> Callable[[Any, Any], int]:
    def encode(m: Any, r: Any) -> int:
        sub = getattr(r, field)
        if attr is None:
            sub.SetInParent()
        else:
            setattr(sub, "requested" if attr == "requested" else "ledgerId", getattr(m, attr))
        return operation

    return encode


_REQUEST_ENCODERS: dict[type[Any], Callable[[Any, Any], int]] = {
    AddRequest: _encode_add_request,
    ReadRequest: _encode_read_request,
    WriteLacRequest: _encode_write_lac,
    AuthRequest: _encode_auth,
    ReadLacRequest: _encode_simple("readLacRequest", OperationType.READ_LAC, "ledger_id"),
    GetBookieInfoRequest: _encode_simple(
        "getBookieInfoRequest", OperationType.GET_BOOKIE_INFO, "requested"
    ),
    StartTlsRequest: _encode_simple("startTLSRequest", OperationType.START_TLS, None),
    ForceLedgerRequest: _encode_simple(
        "forceLedgerRequest", OperationType.FORCE_LEDGER, "ledger_id"
    ),
    GetListOfEntriesRequest: _encode_simple(
        "getListOfEntriesOfLedgerRequest",
        OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER,
        "ledger_id",
    ),
}


def encode_request(request: Request) -> bytes:
    """Serialize a ``Request`` (without the length prefix)."""
    r = pb.Request()
    if isinstance(request, UnknownRequest):
        operation = request.operation
    else:
        encoder = _REQUEST_ENCODERS.get(type(request))
        if encoder is None:
            raise ProtocolError(f"{type(request).__name__} is not available over v3")
        operation = encoder(request, r)
    high = getattr(request, "high_priority", False) or getattr(request, "recovery", False)
    fill_header(r, operation, request.txn_id, 1 if high else 0)
    data: bytes = r.SerializePartialToString()
    return data


def encode_request_frame(request: Request) -> bytes:
    data = encode_request(request)
    return FRAME_LENGTH.pack(len(data)) + data
