"""The v2 ("pre-v3") binary codec of the bookie protocol.

Every v2 packet starts with the header int ``(version << 24) | (opcode << 16) | flags``
(version 2; a legacy version-0 header holds only the opcode). Layouts after the header, all
integers big-endian:

=================  ==================================================================
ADD request        master key (20) | entry body (ledger id and entry id are its first 16 bytes)
ADD response       rc (4) | ledger id (8) | entry id (8)
READ request       ledger id (8) | entry id (8) | master key (20) only with DO_FENCING
READ response      rc (4) | ledger id (8) | entry id (8) | entry body only when rc == EOK
BATCH_READ req.    ledger id | start entry id | request id (8) | max count (4) | max size (8)
                   | master key (20) only with DO_FENCING
BATCH_READ resp.   rc | ledger id | start entry id | request id | repeated (length (4), body)
AUTH req./resp.    a serialized protobuf ``AuthMessage {1: plugin name, 2: payload}``
=================  ==================================================================

Flags: DO_FENCING 0x1, RECOVERY_ADD 0x2, HIGH_PRIORITY 0x4. v2 error codes translate to the
protocol-neutral :class:`StatusCode`. A request for an operation v2 does not serve (READ_LAC,
WRITE_LAC, GET_BOOKIE_INFO or an unknown opcode) decodes to :class:`UnknownRequest`, so the
bookie can answer EBADREQ; malformed packets raise :class:`ProtocolError`.

Functions taking a ``frame`` expect the payload without the 4-byte length; ``*_frame``
encoders return bytes with the length prefix.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from bkeeper.common.errors import ProtocolError
from bkeeper.common.limits import MASTER_KEY_BYTES
from bkeeper.wire.codes import STATUS_TO_V2, V2_TO_STATUS, StatusCode, V2Flag, V2OpCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthMessage,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    BytesLike,
    ErrorResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    UnknownRequest,
)
from bkeeper.wire.varint import decode_varint, encode_varint

__all__ = [
    "ADD_FRAME_PREFIX_BYTES",
    "CURRENT_VERSION",
    "PeekedAdd",
    "add_frame_prefix",
    "add_request_frame",
    "add_response_frame",
    "oversized_answer_frame",
    "peek_add_request",
    "status_from_rc",
    "decode_auth_message",
    "decode_request",
    "decode_response",
    "encode_auth_message",
    "encode_request",
    "encode_request_frame",
    "encode_response",
    "encode_response_frame",
    "header",
]

CURRENT_VERSION = 2

_I = struct.Struct(">i")
_QQ = struct.Struct(">qq")
_IQQ = struct.Struct(">iqq")
_LEN_HEADER = struct.Struct(">ii")
_ADD_RESPONSE_FRAME = struct.Struct(">iiiqq")
_READ_RESPONSE_FRAME = struct.Struct(">iiiqq")
_READ_REQUEST = struct.Struct(">iqq")
_BATCH_REQUEST = struct.Struct(">iqqqiq")
_BATCH_RESPONSE = struct.Struct(">iiqqq")
_LEN_BATCH_RESPONSE = struct.Struct(">iiiqqq")

_OP_ADD = int(V2OpCode.ADD_ENTRY)
_OP_READ = int(V2OpCode.READ_ENTRY)
_OP_AUTH = int(V2OpCode.AUTH)
_OP_BATCH = int(V2OpCode.BATCH_READ_ENTRY)
_FENCE = int(V2Flag.DO_FENCING)
_RECOVERY = int(V2Flag.RECOVERY_ADD)
_HIGH = int(V2Flag.HIGH_PRIORITY)
_EOK = StatusCode.EOK


def header(opcode: int, flags: int = 0, version: int = CURRENT_VERSION) -> int:
    """The packet header int."""
    return (version << 24) | (opcode << 16) | (flags & 0xFFFF)


def _split_header(value: int) -> tuple[int, int, int]:
    version = (value >> 24) & 0xFF
    opcode = (value >> 16) & 0xFF
    if version == 0 and opcode == 0:  # legacy: the int is the opcode alone
        return 0, value & 0xFFFF, 0
    if version > CURRENT_VERSION:
        raise ProtocolError(f"v2 packet version {version} is newer than {CURRENT_VERSION}")
    return version, opcode, value & 0xFFFF


def _need(frame: BytesLike, size: int, what: str) -> None:
    if len(frame) < size:
        raise ProtocolError(f"v2 {what} of {len(frame)} bytes is shorter than {size}")


def status_from_rc(rc: int) -> StatusCode:
    """The status a v2 error code ``rc`` stands for; ``ProtocolError`` for an unknown one."""
    status = V2_TO_STATUS.get(rc)
    if status is None:
        raise ProtocolError(f"v2 error code {rc} is not known")
    return status


# -- AuthMessage (two protobuf fields, encoded by hand) ---------------------------------------
def encode_auth_message(message: AuthMessage) -> bytes:
    name = message.plugin_name.encode()
    return b"".join(
        (
            b"\x0a",
            encode_varint(len(name)),
            name,
            b"\x12",
            encode_varint(len(message.payload)),
            message.payload,
        )
    )


def decode_auth_message(data: BytesLike) -> AuthMessage:
    fields: dict[int, bytes] = {}
    pos = 0
    while pos < len(data):
        key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = decode_varint(data, pos)
        elif wire_type == 2:
            size, pos = decode_varint(data, pos)
            if pos + size > len(data):
                raise ProtocolError("truncated field in AuthMessage")
            fields[number] = bytes(data[pos : pos + size])
            pos += size
        else:
            raise ProtocolError(f"unexpected wire type {wire_type} in AuthMessage")
    if 1 not in fields:
        raise ProtocolError("AuthMessage without authPluginName")
    try:
        name = fields[1].decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError("AuthMessage plugin name is not UTF-8") from exc
    return AuthMessage(name, fields.get(2, b""))


# -- requests ---------------------------------------------------------------------------------
#: Where the master key and the entry body start in an ADD request (after the header); the
#: body opens with its ledger id and entry id.
_ADD_KEY_AT = 4
_ADD_BODY_AT = _ADD_KEY_AT + MASTER_KEY_BYTES
_ADD_MIN_BYTES = _ADD_BODY_AT + 16


def _decode_add(frame: memoryview, flags: int) -> AddRequest:
    _need(frame, _ADD_MIN_BYTES, "ADD request")
    ledger_id, entry_id = _QQ.unpack_from(frame, _ADD_BODY_AT)
    return AddRequest(
        ledger_id,
        entry_id,
        bytes(frame[_ADD_KEY_AT:_ADD_BODY_AT]),
        frame[_ADD_BODY_AT:],
        bool(flags & _RECOVERY),
        bool(flags & _HIGH),
    )


def _decode_read(frame: memoryview, flags: int) -> ReadRequest:
    fence = bool(flags & _FENCE)
    _need(frame, 20 + (MASTER_KEY_BYTES if fence else 0), "READ request")
    ledger_id, entry_id = _QQ.unpack_from(frame, 4)
    key = bytes(frame[20 : 20 + MASTER_KEY_BYTES]) if fence else None
    return ReadRequest(ledger_id, entry_id, fence, key, high_priority=bool(flags & _HIGH))


def _decode_batch(frame: memoryview, flags: int) -> BatchReadRequest:
    fence = bool(flags & _FENCE)
    size = _BATCH_REQUEST.size
    _need(frame, size + (MASTER_KEY_BYTES if fence else 0), "BATCH_READ request")
    _, ledger_id, start, request_id, max_count, max_size = _BATCH_REQUEST.unpack_from(frame)
    key = bytes(frame[size : size + MASTER_KEY_BYTES]) if fence else None
    return BatchReadRequest(ledger_id, start, max_count, max_size, request_id, fence, key)


def decode_request(frame: BytesLike) -> Request:
    """Decode a request frame (without its length prefix)."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    _need(view, 4, "packet")
    _, opcode, flags = _split_header(_I.unpack_from(view)[0])
    if opcode == _OP_ADD:
        return _decode_add(view, flags)
    if opcode == _OP_READ:
        return _decode_read(view, flags)
    if opcode == _OP_BATCH:
        return _decode_batch(view, flags)
    if opcode == _OP_AUTH:
        return AuthRequest(decode_auth_message(view[4:]))
    ledger_id, entry_id = _QQ.unpack_from(view, 4) if len(view) >= 20 else (0, 0)
    return UnknownRequest(opcode, 0, ledger_id, entry_id)


def encode_request(request: Request) -> bytes:
    """Encode a request (without the length prefix)."""
    return encode_request_frame(request)[4:]


def _add_request_frame(r: AddRequest) -> bytes:
    flags = (_RECOVERY if r.recovery else 0) | (_HIGH if r.high_priority or r.recovery else 0)
    if len(r.master_key) != MASTER_KEY_BYTES:
        raise ProtocolError(f"master key must be {MASTER_KEY_BYTES} bytes")
    if r.write_flags:
        raise ProtocolError("write flags (DEFERRED_SYNC) are not available over v2")
    prefix = _LEN_HEADER.pack(4 + MASTER_KEY_BYTES + len(r.body), header(_OP_ADD, flags))
    return b"".join((prefix, r.master_key, r.body))


#: Bytes before the entry body in an ADD request frame: length, header, master key.
ADD_FRAME_PREFIX_BYTES = 4 + _ADD_BODY_AT


def add_request_frame(
    master_key: bytes, parts: tuple[BytesLike, ...], body_bytes: int, flags: int = 0
) -> bytes:
    """An ADD request frame from the entry body in ``parts`` (``body_bytes`` in all), built
    with one copy; the same bytes serve every bookie of a write set. The body follows the
    first :data:`ADD_FRAME_PREFIX_BYTES` bytes."""
    if len(master_key) != MASTER_KEY_BYTES:
        raise ProtocolError(f"master key must be {MASTER_KEY_BYTES} bytes")
    prefix = _LEN_HEADER.pack(4 + MASTER_KEY_BYTES + body_bytes, header(_OP_ADD, flags))
    return b"".join((prefix, master_key, *parts))


def add_frame_prefix(master_key: bytes, body_bytes: int, flags: int = 0) -> bytes:
    """The first :data:`ADD_FRAME_PREFIX_BYTES` bytes of an ADD request frame whose entry
    body has ``body_bytes``: length, header, master key (the body follows)."""
    if len(master_key) != MASTER_KEY_BYTES:
        raise ProtocolError(f"master key must be {MASTER_KEY_BYTES} bytes")
    return _LEN_HEADER.pack(4 + MASTER_KEY_BYTES + body_bytes, header(_OP_ADD, flags)) + master_key


#: A v2 ADD request as :func:`peek_add_request` sees it: flags (:class:`V2Flag` bits), ledger
#: id, entry id, master key and entry body, the last two views of the frame (not copies).
PeekedAdd = tuple[int, int, int, memoryview, memoryview]


def peek_add_request(frame: memoryview) -> PeekedAdd | None:
    """The fields of ``frame`` (without its length) when it is a well-formed v2 ADD request,
    without a request object: the bookie's fast lane. None otherwise, and
    :func:`decode_request` tells what it is (or what is wrong with it)."""
    if len(frame) < _ADD_MIN_BYTES:
        return None
    head = _I.unpack_from(frame)[0]
    if (head >> 16) & 0xFF != _OP_ADD or not 0 < (head >> 24) <= CURRENT_VERSION:
        return None
    ledger_id, entry_id = _QQ.unpack_from(frame, _ADD_BODY_AT)
    return (
        head & 0xFFFF,
        ledger_id,
        entry_id,
        frame[_ADD_KEY_AT:_ADD_BODY_AT],
        frame[_ADD_BODY_AT:],
    )


def oversized_answer_frame(head: bytes, status: StatusCode) -> bytes | None:
    """The answer (``status``, length prefix included) to a v2 request of which only the
    first bytes, ``head``, are read (``framing.OversizedFrame``): an ADD names its ledger and
    entry ids there. None for any other request (v2 answers are matched by those ids)."""
    if len(head) < _ADD_MIN_BYTES:
        return None
    value = _I.unpack_from(head)[0]
    if (value >> 16) & 0xFF != _OP_ADD or not 0 < (value >> 24) <= CURRENT_VERSION:
        return None
    ledger_id, entry_id = _QQ.unpack_from(head, _ADD_BODY_AT)
    return add_response_frame(status, ledger_id, entry_id)


_ADD_HEADER = (CURRENT_VERSION << 24) | (_OP_ADD << 16)


def add_response_frame(status: StatusCode, ledger_id: int, entry_id: int, txn_id: int = 0) -> bytes:
    """An ADD response frame (length prefix included), without a response object. v2 has no
    txn id: ``txn_id`` is ignored, for the signature of ``v3.add_response_frame``."""
    return _ADD_RESPONSE_FRAME.pack(24, _ADD_HEADER, STATUS_TO_V2[status], ledger_id, entry_id)


def _read_request_frame(r: ReadRequest) -> bytes:
    if r.previous_lac is not None or r.timeout_ms is not None or r.piggyback:
        raise ProtocolError("long-poll and piggyback reads are not available over v2")
    flags = (_FENCE if r.fence else 0) | (_HIGH if r.high_priority else 0)
    body = _READ_REQUEST.pack(header(_OP_READ, flags), r.ledger_id, r.entry_id)
    if r.fence:
        if r.master_key is None or len(r.master_key) != MASTER_KEY_BYTES:
            raise ProtocolError("a fencing read needs a 20-byte master key")
        body += r.master_key
    return _I.pack(len(body)) + body


def _batch_request_frame(r: BatchReadRequest) -> bytes:
    flags = _FENCE if r.fence else 0
    body = _BATCH_REQUEST.pack(
        header(_OP_BATCH, flags),
        r.ledger_id,
        r.start_entry_id,
        r.request_id,
        r.max_count,
        r.max_size,
    )
    if r.fence:
        if r.master_key is None or len(r.master_key) != MASTER_KEY_BYTES:
            raise ProtocolError("a fencing batch read needs a 20-byte master key")
        body += r.master_key
    return _I.pack(len(body)) + body


def _auth_request_frame(r: AuthRequest) -> bytes:
    body = _I.pack(header(_OP_AUTH)) + encode_auth_message(r.auth)
    return _I.pack(len(body)) + body


def _unknown_request_frame(r: UnknownRequest) -> bytes:
    body = _READ_REQUEST.pack(header(r.operation), r.ledger_id, r.entry_id)
    return _I.pack(len(body)) + body


_REQUEST_ENCODERS: dict[type[Any], Callable[[Any], bytes]] = {
    AddRequest: _add_request_frame,
    ReadRequest: _read_request_frame,
    BatchReadRequest: _batch_request_frame,
    AuthRequest: _auth_request_frame,
    UnknownRequest: _unknown_request_frame,
}


def encode_request_frame(request: Request) -> bytes:
    """Encode a request with its 4-byte length prefix."""
    encoder = _REQUEST_ENCODERS.get(type(request))
    if encoder is None:
        raise ProtocolError(f"{type(request).__name__} is not available over v2")
    return encoder(request)


# -- responses --------------------------------------------------------------------------------
def _rc(status: StatusCode) -> int:
    return STATUS_TO_V2[status]


def _add_response_frame(r: AddResponse) -> bytes:
    return _ADD_RESPONSE_FRAME.pack(24, header(_OP_ADD), _rc(r.status), r.ledger_id, r.entry_id)


def _read_response_frame(r: ReadResponse) -> bytes:
    body = r.body if r.status is _EOK and r.body is not None else b""
    prefix = _READ_RESPONSE_FRAME.pack(
        24 + len(body), header(_OP_READ), _rc(r.status), r.ledger_id, r.entry_id
    )
    return prefix + body if body else prefix


def _batch_response_frame(r: BatchReadResponse) -> bytes:
    """One join over the header and the bodies (no copy of a body before it)."""
    bodies = r.bodies if r.status is _EOK else ()
    count = len(bodies)
    parts: list[BytesLike] = [b""] * (1 + 2 * count)
    pack = _I.pack
    parts[1::2] = [pack(len(body)) for body in bodies]
    parts[2::2] = bodies
    payload_bytes = _BATCH_RESPONSE.size + 4 * count + sum(map(len, bodies))
    parts[0] = _LEN_BATCH_RESPONSE.pack(
        payload_bytes,
        header(_OP_BATCH),
        _rc(r.status),
        r.ledger_id,
        r.start_entry_id,
        r.request_id,
    )
    return b"".join(parts)


def _auth_response_frame(r: AuthResponse) -> bytes:
    auth = r.auth or AuthMessage("AuthDisabledPlugin")
    body = _I.pack(header(_OP_AUTH)) + encode_auth_message(auth)
    return _I.pack(len(body)) + body


def _error_response_frame(r: ErrorResponse) -> bytes:
    return _ADD_RESPONSE_FRAME.pack(
        24, header(r.operation & 0xFF), _rc(r.status), r.ledger_id, r.entry_id
    )


_RESPONSE_ENCODERS: dict[type[Any], Callable[[Any], bytes]] = {
    AddResponse: _add_response_frame,
    ReadResponse: _read_response_frame,
    BatchReadResponse: _batch_response_frame,
    AuthResponse: _auth_response_frame,
    ErrorResponse: _error_response_frame,
}


def encode_response_frame(response: Response) -> bytes:
    """Encode a response with its 4-byte length prefix."""
    encoder = _RESPONSE_ENCODERS.get(type(response))
    if encoder is None:
        raise ProtocolError(f"{type(response).__name__} is not available over v2")
    return encoder(response)


def encode_response(response: Response) -> bytes:
    """Encode a response (without the length prefix)."""
    return encode_response_frame(response)[4:]


def _decode_batch_response(view: memoryview) -> BatchReadResponse:
    _need(view, _BATCH_RESPONSE.size, "BATCH_READ response")
    _, rc, ledger_id, start, request_id = _BATCH_RESPONSE.unpack_from(view)
    status = status_from_rc(rc)
    if status is not _EOK:
        # An error answer carries no entries (none is sent with one, as Java's bookie): what
        # follows its header is not read as entries (the fuzzer found bodies kept on an
        # ENOLEDGER answer, which no encoder writes back)
        return BatchReadResponse(status, ledger_id, start, request_id, ())
    bodies: list[memoryview] = []
    append = bodies.append
    unpack_length = _I.unpack_from
    pos = _BATCH_RESPONSE.size
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise ProtocolError(f"v2 BATCH_READ response entry length cut at byte {pos}")
        (size,) = unpack_length(view, pos)
        pos += 4
        stop = pos + size
        if size < 0 or stop > end:
            raise ProtocolError(f"BATCH_READ response entry of {size} bytes overruns the frame")
        append(view[pos:stop])
        pos = stop
    return BatchReadResponse(status, ledger_id, start, request_id, tuple(bodies))


def decode_response(frame: BytesLike) -> Response:
    """Decode a response frame (without its length prefix)."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    _need(view, 4, "packet")
    _, opcode, _ = _split_header(_I.unpack_from(view)[0])
    if opcode == _OP_AUTH:
        return AuthResponse(_EOK, decode_auth_message(view[4:]))
    if opcode == _OP_BATCH:
        return _decode_batch_response(view)
    _need(view, 24, "response")
    rc, ledger_id, entry_id = _IQQ.unpack_from(view, 4)
    status = status_from_rc(rc)
    if opcode == _OP_ADD:
        if len(view) != 24:
            raise ProtocolError(f"v2 ADD response of {len(view)} bytes, expected 24")
        return AddResponse(status, ledger_id, entry_id)
    if opcode == _OP_READ:
        body = view[24:] if status is _EOK else None
        return ReadResponse(status, ledger_id, entry_id, body)
    return ErrorResponse(opcode, status, 0, ledger_id, entry_id)
