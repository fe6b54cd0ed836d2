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

This module is the codec's face (its names are the codec) and holds the responses; the
requests are :mod:`bkeeper.wire.v3_requests`, the protobuf plumbing both share is
:mod:`bkeeper.wire.v3_fields`.
"""

from __future__ import annotations

from typing import Any

from bkeeper.common.errors import ProtocolError
from bkeeper.wire._pb import bookkeeper_protocol_pb2 as pb
from bkeeper.wire.codes import OperationType, StatusCode
from bkeeper.wire.messages import (
    AddResponse,
    AuthResponse,
    BytesLike,
    ErrorResponse,
    ForceLedgerResponse,
    GetBookieInfoResponse,
    GetListOfEntriesResponse,
    ReadLacResponse,
    ReadResponse,
    Response,
    StartTlsResponse,
    WriteLacResponse,
)
from bkeeper.wire.v3_fields import (
    ADD_OP,
    FRAME_LENGTH,
    auth_message,
    fill_header,
    known_status,
    optional_field,
    parse_message,
    raw_operation,
)
from bkeeper.wire.v3_requests import decode_request, encode_request, encode_request_frame
from bkeeper.wire.varint import decode_varint

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
    fill_header(r, operation, response.txn_id)
    r.status = int(response.status)  # type: ignore[assignment]
    data: bytes = r.SerializePartialToString()
    return data


def encode_response_frame(response: Response) -> bytes:
    data = encode_response(response)
    return FRAME_LENGTH.pack(len(data)) + data


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
    h = parse_message(pb.BKPacketHeader, head[pos : pos + size], "BKPacketHeader")
    pos += size
    operation = h.operation if h.HasField("operation") else raw_operation(h)
    if operation is None or not h.HasField("txnId"):
        return None
    if operation != ADD_OP or pos >= len(head):
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
        return AddResponse(known_status(a.status), a.ledgerId, a.entryId, txn)
    if operation == OperationType.READ_ENTRY and r.HasField("readResponse"):
        q = r.readResponse
        return ReadResponse(
            known_status(q.status),
            q.ledgerId,
            q.entryId,
            optional_field(q, "body"),
            optional_field(q, "maxLAC"),
            optional_field(q, "lacUpdateTimestamp"),
            txn,
        )
    return _decode_other_body(r, operation, status, txn)


def _decode_other_body(r: Any, operation: int, status: StatusCode, txn: int) -> Response:
    if operation == OperationType.AUTH:
        auth = None
        if r.HasField("authResponse"):
            auth = auth_message(r.authResponse)
        return AuthResponse(status, auth, txn)
    if operation == OperationType.WRITE_LAC and r.HasField("writeLacResponse"):
        w = r.writeLacResponse
        return WriteLacResponse(known_status(w.status), w.ledgerId, txn)
    if operation == OperationType.READ_LAC and r.HasField("readLacResponse"):
        q = r.readLacResponse
        return ReadLacResponse(
            known_status(q.status),
            q.ledgerId,
            optional_field(q, "lacBody"),
            optional_field(q, "lastEntryBody"),
            txn,
        )
    if operation == OperationType.GET_BOOKIE_INFO:
        q = r.getBookieInfoResponse
        return GetBookieInfoResponse(
            status, optional_field(q, "totalDiskCapacity"), optional_field(q, "freeDiskSpace"), txn
        )
    if operation == OperationType.START_TLS:
        return StartTlsResponse(status, txn)
    if operation == OperationType.FORCE_LEDGER and r.HasField("forceLedgerResponse"):
        f = r.forceLedgerResponse
        return ForceLedgerResponse(known_status(f.status), f.ledgerId, txn)
    if operation == OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER and r.HasField(
        "getListOfEntriesOfLedgerResponse"
    ):
        q = r.getListOfEntriesOfLedgerResponse
        return GetListOfEntriesResponse(
            known_status(q.status),
            q.ledgerId,
            optional_field(q, "availabilityOfEntriesOfLedger"),
            txn,
        )
    return ErrorResponse(operation, status, txn)


def decode_response(frame: BytesLike) -> Response:
    """Decode a ``Response`` frame (without its length prefix).

    A response without its operation's body (a bookie answering only with a status)
    decodes to :class:`ErrorResponse`.
    """
    r = parse_message(pb.Response, frame, "Response")
    if not r.HasField("header") or not r.HasField("status"):
        raise ProtocolError("v3 Response lacks its header or status")
    h = r.header
    operation = h.operation if h.HasField("operation") else raw_operation(h)
    if operation is None or not h.HasField("txnId"):
        raise ProtocolError("v3 Response header lacks operation or txnId")
    return _decode_body(r, operation, known_status(r.status), h.txnId)
