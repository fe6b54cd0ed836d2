"""The v3 codec's protobuf plumbing, shared by its request and response halves: the frame
length prefix, enum values as ints, the header, parsing that raises ``ProtocolError``, and the
raw enum values proto2 keeps among the unknown fields when this codec does not know them.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.codes import AddFlag, OperationType, ProtocolVersion, ReadFlag, StatusCode
from bkeeper.wire.messages import AuthMessage, BytesLike
from bkeeper.wire.varint import encode_varint

__all__ = [
    "ADD_OP",
    "FENCE_FLAG",
    "FRAME_LENGTH",
    "KNOWN_OPS",
    "PIGGYBACK_FLAG",
    "READ_OP",
    "RECOVERY_FLAG",
    "STATUS_BY_CODE",
    "U64_MASK",
    "VERSION_3",
    "auth_message",
    "check_required",
    "fill_header",
    "known_status",
    "optional_field",
    "parse_message",
    "raw_enum",
    "raw_header",
    "raw_operation",
]


FRAME_LENGTH = struct.Struct(">i")
VERSION_3 = int(ProtocolVersion.VERSION_THREE)
FENCE_FLAG = int(ReadFlag.FENCE_LEDGER)
PIGGYBACK_FLAG = int(ReadFlag.ENTRY_PIGGYBACK)
RECOVERY_FLAG = int(AddFlag.RECOVERY_ADD)
ADD_OP = int(OperationType.ADD_ENTRY)
READ_OP = int(OperationType.READ_ENTRY)
STATUS_BY_CODE = {int(s): s for s in StatusCode}
KNOWN_OPS = {int(o) for o in OperationType}
U64_MASK = (1 << 64) - 1


def known_status(value: int) -> StatusCode:
    status = STATUS_BY_CODE.get(value)
    if status is None:
        raise ProtocolError(f"v3 status code {value} is not known")
    return status


def optional_field(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def fill_header(message: Any, operation: int, txn_id: int, priority: int = 0) -> None:
    h = message.header
    if operation not in KNOWN_OPS:
        h.MergeFromString(raw_header(operation, txn_id))
        if priority:
            h.priority = priority
        return
    h.version = VERSION_3
    h.operation = operation
    h.txnId = txn_id
    if priority:
        h.priority = priority


def parse_message(cls: Any, frame: BytesLike, what: str) -> Any:
    message = cls()
    try:
        message.ParseFromString(frame)
    except (DecodeError, ValueError, TypeError) as exc:
        raise ProtocolError(f"undecodable v3 {what}: {exc}") from exc
    return message


def check_required(message: Any, what: str) -> None:
    if not message.IsInitialized():
        fields = ", ".join(message.FindInitializationErrors())
        raise ProtocolError(f"v3 {what} lacks required fields: {fields}")


def auth_message(message: Any) -> AuthMessage:
    """The ``AuthMessage`` a request's or response's protobuf ``message`` holds;
    ``ProtocolError`` when its plugin name is not UTF-8 (protobuf's Python runtime hands
    such a proto2 string over as bytes; the v2 codec refuses it too)."""
    name = message.authPluginName
    if not isinstance(name, str):
        raise ProtocolError("AuthMessage plugin name is not UTF-8")
    return AuthMessage(name, message.payload)


def raw_enum(message: Any, number: int) -> int | None:
    """The value of enum field ``number`` of ``message`` if it is one this codec does not
    know (proto2 keeps those among the unknown fields), as the int32 the peer sent."""
    fields: Any = UnknownFieldSet(message)
    for field in fields:
        if field.field_number == number and isinstance(field.data, int):
            value = int(field.data) & U64_MASK
            return value - (1 << 64) if value >= 1 << 63 else value
    return None


def raw_operation(header: Any) -> int | None:
    """The operation number of a header whose enum value this codec does not know."""
    return raw_enum(header, 2)


def raw_header(operation: int, txn_id: int) -> bytes:
    """A ``BKPacketHeader`` naming an operation this codec has no enum value for."""
    return (
        b"\x08"
        + encode_varint(VERSION_3)
        + b"\x10"
        + encode_varint(operation)
        + b"\x18"
        + encode_varint(txn_id)
    )
