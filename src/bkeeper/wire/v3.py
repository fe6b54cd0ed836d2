"""The v3 protobuf codec of the bookie protocol (``Request``/``Response``, proto2).

A frame holds one serialized ``Request`` or ``Response`` (see
``bkeeper/wire/proto/bookkeeper_protocol.proto``). Every message carries a ``BKPacketHeader``
(version 3, operation, txn id, priority); the txn id matches a response to its request.
Recovery adds and high-priority reads are sent with priority 1.

Decoding never trusts the peer: protobuf errors and missing required fields raise
:class:`ProtocolError`. A well-formed request for an operation bkeeper does not serve
(RANGE_READ_ENTRY, RANGE_ADD_ENTRY, BATCH_READ_ENTRY over v3, or an operation number unknown
to this codec) decodes to :class:`UnknownRequest` carrying the txn id, so the bookie can
answer EBADREQ and keep the connection; so does a request with an enum value unknown to this
codec (protocol version, operation, add or read flag: proto2 keeps such a value among the
unknown fields and leaves the field unset), without a protocol version, or with a header
that names its txn id and operation but a body that is missing or lacks required fields,
with ``reason`` saying which. Only a frame that is not a ``Request`` or whose header lacks
the txn id or operation raises. A response to an unknown operation echoes its number in the header.
``requestContext`` pairs are accepted and ignored.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from bkeeper.common.errors import ProtocolError
from bkeeper.wire._pb import bookkeeper_protocol_pb2 as pb
from bkeeper.wire.codes import AddFlag, OperationType, ProtocolVersion, ReadFlag, StatusCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthMessage,
    AuthRequest,
    AuthResponse,
    BytesLike,
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
    Response,
    StartTlsRequest,
    StartTlsResponse,
    UnknownRequest,
    WriteLacRequest,
    WriteLacResponse,
)
from bkeeper.wire.varint import decode_varint, encode_varint

__all__ = [
    "ADD_REQUEST_OVERHEAD_BYTES_MAX",
    "add_response_frame",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_request_frame",
    "encode_response",
    "encode_response_frame",
    "oversized_answer_frame",
]

#: Bytes of a v3 ADD request frame besides its entry body, at most: 82 with the largest ids,
#: txn id and flags and an empty body, and 4 more for each of the two lengths (the body's
#: and the AddRequest's) at 5-byte varints (``tests/wire`` checks it).
ADD_REQUEST_OVERHEAD_BYTES_MAX = 96

_LEN = struct.Struct(">i")
_V3 = int(ProtocolVersion.VERSION_THREE)
_FENCE = int(ReadFlag.FENCE_LEDGER)
_PIGGYBACK = int(ReadFlag.ENTRY_PIGGYBACK)
_RECOVERY = int(AddFlag.RECOVERY_ADD)
_ADD = int(OperationType.ADD_ENTRY)
_READ = int(OperationType.READ_ENTRY)
_STATUS = {int(s): s for s in StatusCode}
_OPS = {int(o) for o in OperationType}
_U64 = (1 << 64) - 1


def _status(value: int) -> StatusCode:
    status = _STATUS.get(value)
    if status is None:
        raise ProtocolError(f"v3 status code {value} is not known")
    return status


def _opt(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _header(message: Any, operation: int, txn_id: int, priority: int = 0) -> None:
    h = message.header
    if operation not in _OPS:
        h.MergeFromString(_raw_header(operation, txn_id))
        if priority:
            h.priority = priority
        return
    h.version = _V3
    h.operation = operation
    h.txnId = txn_id
    if priority:
        h.priority = priority


def _parse(cls: Any, frame: BytesLike, what: str) -> Any:
    message = cls()
    try:
        message.ParseFromString(frame)
    except (DecodeError, ValueError, TypeError) as exc:
        raise ProtocolError(f"undecodable v3 {what}: {exc}") from exc
    return message


def _missing(message: Any, what: str) -> None:
    if not message.IsInitialized():
        fields = ", ".join(message.FindInitializationErrors())
        raise ProtocolError(f"v3 {what} lacks required fields: {fields}")


def _raw_enum(message: Any, number: int) -> int | None:
    """The value of enum field ``number`` of ``message`` if it is one this codec does not
    know (proto2 keeps those among the unknown fields), as the int32 the peer sent."""
    fields: Any = UnknownFieldSet(message)
    for field in fields:
        if field.field_number == number and isinstance(field.data, int):
            value = int(field.data) & _U64
            return value - (1 << 64) if value >= 1 << 63 else value
    return None


def _raw_operation(header: Any) -> int | None:
    """The operation number of a header whose enum value this codec does not know."""
    return _raw_enum(header, 2)


def _raw_header(operation: int, txn_id: int) -> bytes:
    """A ``BKPacketHeader`` naming an operation this codec has no enum value for."""
    return (
        b"\x08"
        + encode_varint(_V3)
        + b"\x10"
        + encode_varint(operation)
        + b"\x18"
        + encode_varint(txn_id)
    )


# -- requests ---------------------------------------------------------------------------------
def _unknown_flag(message: Any, operation: int, txn: int, what: str) -> UnknownRequest | None:
    """An :class:`UnknownRequest` if ``message`` (with ``ledgerId`` and ``entryId``) carries
    a ``flag`` (field 100) value this codec does not know."""
    flag = _raw_enum(message, 100)
    if flag is None:
        return None
    return UnknownRequest(
        operation, txn, message.ledgerId, message.entryId, f"{what} flag {flag} is unknown"
    )


def _add_request(r: Any, txn: int, priority: int) -> Request:
    a = r.addRequest
    _missing(a, "AddRequest")
    if not a.HasField("flag") and (bad := _unknown_flag(a, _ADD, txn, "AddRequest")):
        return bad
    recovery = a.HasField("flag") and a.flag == _RECOVERY
    return AddRequest(
        a.ledgerId, a.entryId, a.masterKey, a.body, recovery, priority > 0, a.writeFlags, txn
    )


def _read_request(r: Any, txn: int, priority: int) -> Request:
    q = r.readRequest
    _missing(q, "ReadRequest")
    if not q.HasField("flag") and (bad := _unknown_flag(q, _READ, txn, "ReadRequest")):
        return bad
    flag = q.flag if q.HasField("flag") else 0
    return ReadRequest(
        q.ledgerId,
        q.entryId,
        fence=flag == _FENCE,
        master_key=_opt(q, "masterKey"),
        piggyback=flag == _PIGGYBACK,
        previous_lac=_opt(q, "previousLAC"),
        timeout_ms=_opt(q, "timeOut"),
        high_priority=priority > 0,
        txn_id=txn,
    )


def _write_lac_request(r: Any, txn: int, _: int) -> WriteLacRequest:
    w = r.writeLacRequest
    _missing(w, "WriteLacRequest")
    return WriteLacRequest(w.ledgerId, w.lac, w.masterKey, w.body, txn)


def _auth_request(r: Any, txn: int, _: int) -> AuthRequest:
    a = r.authRequest
    return AuthRequest(AuthMessage(a.authPluginName, a.payload), txn)


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
    r = _parse(pb.Request, frame, "Request")
    if not r.HasField("header"):
        raise ProtocolError("v3 Request lacks its header")
    h = r.header
    if not h.HasField("txnId"):
        raise ProtocolError("v3 Request header lacks txnId")
    txn = h.txnId
    operation = h.operation if h.HasField("operation") else _raw_operation(h)
    if operation is None:
        raise ProtocolError("v3 Request header lacks operation")
    if not h.HasField("version"):
        version = _raw_enum(h, 1)
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
        a.flag = _RECOVERY
    if m.write_flags:
        a.writeFlags = m.write_flags
    return OperationType.ADD_ENTRY


def _encode_read_request(m: ReadRequest, r: Any) -> int:
    q = r.readRequest
    q.ledgerId = m.ledger_id
    q.entryId = m.entry_id
    if m.fence:
        q.flag = _FENCE
    elif m.piggyback:
        q.flag = _PIGGYBACK
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
    _header(r, operation, request.txn_id, 1 if high else 0)
    data: bytes = r.SerializePartialToString()
    return data


def encode_request_frame(request: Request) -> bytes:
    data = encode_request(request)
    return _LEN.pack(len(data)) + data


# -- responses --------------------------------------------------------------------------------
def _fill_response(m: Any, r: Any) -> int:
    """Fill ``r`` from response ``m``; returns the operation type."""
    if isinstance(m, AddResponse):
        a = r.addResponse
        a.status, a.ledgerId, a.entryId = m.status, m.ledger_id, m.entry_id
        return OperationType.ADD_ENTRY
    if isinstance(m, ReadResponse):
        q = r.readResponse
        q.status, q.ledgerId, q.entryId = m.status, m.ledger_id, m.entry_id
        if m.body is not None:
            q.body = bytes(m.body)
        if m.max_lac is not None:
            q.maxLAC = m.max_lac
        if m.lac_update_timestamp is not None:
            q.lacUpdateTimestamp = m.lac_update_timestamp
        return OperationType.READ_ENTRY
    return _fill_other_response(m, r)


def _fill_other_response(m: Any, r: Any) -> int:
    if isinstance(m, AuthResponse):
        if m.auth is not None:
            r.authResponse.authPluginName = m.auth.plugin_name
            r.authResponse.payload = m.auth.payload
        return OperationType.AUTH
    if isinstance(m, WriteLacResponse):
        r.writeLacResponse.status, r.writeLacResponse.ledgerId = m.status, m.ledger_id
        return OperationType.WRITE_LAC
    if isinstance(m, ReadLacResponse):
        q = r.readLacResponse
        q.status, q.ledgerId = m.status, m.ledger_id
        if m.lac_body is not None:
            q.lacBody = bytes(m.lac_body)
        if m.last_entry_body is not None:
            q.lastEntryBody = bytes(m.last_entry_body)
        return OperationType.READ_LAC
    if isinstance(m, GetBookieInfoResponse):
        q = r.getBookieInfoResponse
        q.status = m.status
        if m.total_disk_capacity is not None:
            q.totalDiskCapacity = m.total_disk_capacity
        if m.free_disk_space is not None:
            q.freeDiskSpace = m.free_disk_space
        return OperationType.GET_BOOKIE_INFO
    if isinstance(m, StartTlsResponse):
        r.startTLSResponse.SetInParent()
        return OperationType.START_TLS
    if isinstance(m, ForceLedgerResponse):
        r.forceLedgerResponse.status, r.forceLedgerResponse.ledgerId = m.status, m.ledger_id
        return OperationType.FORCE_LEDGER
    if isinstance(m, GetListOfEntriesResponse):
        q = r.getListOfEntriesOfLedgerResponse
        q.status, q.ledgerId = m.status, m.ledger_id
        if m.availability is not None:
            q.availabilityOfEntriesOfLedger = bytes(m.availability)
        return OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER
    if isinstance(m, ErrorResponse):
        return m.operation
    raise ProtocolError(f"{type(m).__name__} is not available over v3")


def encode_response(response: Response) -> bytes:
    """Serialize a ``Response`` (without the length prefix)."""
    r = pb.Response()
    operation = _fill_response(response, r)
    _header(r, operation, response.txn_id)
    r.status = int(response.status)  # type: ignore[assignment]
    data: bytes = r.SerializePartialToString()
    return data


def encode_response_frame(response: Response) -> bytes:
    data = encode_response(response)
    return _LEN.pack(len(data)) + data


def add_response_frame(status: StatusCode, ledger_id: int, entry_id: int, txn_id: int) -> bytes:
    """An ADD response frame (length prefix included); as ``v2.add_response_frame``."""
    return encode_response_frame(AddResponse(status, ledger_id, entry_id, txn_id))


# -- oversized requests -------------------------------------------------------------------
_HEADER_KEY = 1 << 3 | 2
_ADD_REQUEST_KEY = 101 << 3 | 2


def oversized_answer_frame(head: bytes, status: StatusCode) -> bytes | None:
    """The answer (``status``, length prefix included) to a request of which only the first
    bytes, ``head``, are read (``framing.OversizedFrame``): its header names the operation
    and txn id; an ADD's ledger and entry ids follow (protobuf writes fields in number
    order). None when ``head`` does not hold a header with both."""
    try:
        found = _oversized_fields(head)
    except ProtocolError:
        return None
    if found is None:
        return None
    operation, txn, ids = found
    if ids is not None:
        return add_response_frame(status, ids[0], ids[1], txn)
    return encode_response_frame(ErrorResponse(operation, status, txn))


def _oversized_fields(head: bytes) -> tuple[int, int, tuple[int, int] | None] | None:
    """(operation, txn id, an ADD's (ledger id, entry id) if in ``head``) of a ``Request``."""
    key, pos = decode_varint(head, 0)
    if key != _HEADER_KEY:
        return None
    size, pos = decode_varint(head, pos)
    if pos + size > len(head):
        return None
    h = _parse(pb.BKPacketHeader, head[pos : pos + size], "BKPacketHeader")
    pos += size
    operation = h.operation if h.HasField("operation") else _raw_operation(h)
    if operation is None or not h.HasField("txnId"):
        return None
    if operation != _ADD or pos >= len(head):
        return operation, h.txnId, None
    key, pos = decode_varint(head, pos)
    if key != _ADD_REQUEST_KEY:
        return operation, h.txnId, None
    _, pos = decode_varint(head, pos)  # the AddRequest's length
    return operation, h.txnId, _leading_ids(head, pos)


def _leading_ids(data: bytes, pos: int) -> tuple[int, int] | None:
    """``ledgerId`` (1) and ``entryId`` (2) from the varint fields at the start of a message."""
    ids: dict[int, int] = {}
    while pos < len(data) and len(ids) < 2:
        key, pos = decode_varint(data, pos)
        if key & 7 != 0:
            break  # a field of another type before the ids: not found
        value, pos = decode_varint(data, pos)
        ids[key >> 3] = value - (1 << 64) if value >= 1 << 63 else value
    if 1 in ids and 2 in ids:
        return ids[1], ids[2]
    return None


def _decode_body(r: Any, operation: int, status: StatusCode, txn: int) -> Response:
    if operation == OperationType.ADD_ENTRY and r.HasField("addResponse"):
        a = r.addResponse
        return AddResponse(_status(a.status), a.ledgerId, a.entryId, txn)
    if operation == OperationType.READ_ENTRY and r.HasField("readResponse"):
        q = r.readResponse
        return ReadResponse(
            _status(q.status),
            q.ledgerId,
            q.entryId,
            _opt(q, "body"),
            _opt(q, "maxLAC"),
            _opt(q, "lacUpdateTimestamp"),
            txn,
        )
    return _decode_other_body(r, operation, status, txn)


def _decode_other_body(r: Any, operation: int, status: StatusCode, txn: int) -> Response:
    if operation == OperationType.AUTH:
        auth = None
        if r.HasField("authResponse"):
            auth = AuthMessage(r.authResponse.authPluginName, r.authResponse.payload)
        return AuthResponse(status, auth, txn)
    if operation == OperationType.WRITE_LAC and r.HasField("writeLacResponse"):
        w = r.writeLacResponse
        return WriteLacResponse(_status(w.status), w.ledgerId, txn)
    if operation == OperationType.READ_LAC and r.HasField("readLacResponse"):
        q = r.readLacResponse
        return ReadLacResponse(
            _status(q.status), q.ledgerId, _opt(q, "lacBody"), _opt(q, "lastEntryBody"), txn
        )
    if operation == OperationType.GET_BOOKIE_INFO:
        q = r.getBookieInfoResponse
        return GetBookieInfoResponse(
            status, _opt(q, "totalDiskCapacity"), _opt(q, "freeDiskSpace"), txn
        )
    if operation == OperationType.START_TLS:
        return StartTlsResponse(status, txn)
    if operation == OperationType.FORCE_LEDGER and r.HasField("forceLedgerResponse"):
        f = r.forceLedgerResponse
        return ForceLedgerResponse(_status(f.status), f.ledgerId, txn)
    if operation == OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER and r.HasField(
        "getListOfEntriesOfLedgerResponse"
    ):
        q = r.getListOfEntriesOfLedgerResponse
        return GetListOfEntriesResponse(
            _status(q.status), q.ledgerId, _opt(q, "availabilityOfEntriesOfLedger"), txn
        )
    return ErrorResponse(operation, status, txn)


def decode_response(frame: BytesLike) -> Response:
    """Decode a ``Response`` frame (without its length prefix).

    A response without its operation's body (a bookie answering only with a status)
    decodes to :class:`ErrorResponse`.
    """
    r = _parse(pb.Response, frame, "Response")
    if not r.HasField("header") or not r.HasField("status"):
        raise ProtocolError("v3 Response lacks its header or status")
    h = r.header
    operation = h.operation if h.HasField("operation") else _raw_operation(h)
    if operation is None or not h.HasField("txnId"):
        raise ProtocolError("v3 Response header lacks operation or txnId")
    return _decode_body(r, operation, _status(r.status), h.txnId)
