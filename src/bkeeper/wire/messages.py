"""Protocol-neutral requests and responses of the bookie protocol.

Each message is a frozen dataclass; ``bkeeper.wire.v2`` and ``bkeeper.wire.v3`` encode and
decode them in the two wire protocols. A message carries ``txn_id``: v3 echoes it, v2 has no
such field and decodes it as 0 (v2 clients match responses on ledger, entry and operation).

Invariants:

* ``body`` fields hold a whole entry body as stored by a bookie: the 32-byte header
  (ledger id, entry id, LAC, cumulative length), the digest and the payload.
* Decoders may hand out ``memoryview`` slices of the frame they decoded (no copy); such a
  message is valid as long as the frame's buffer is.
* ``status`` is always a :class:`~bkeeper.wire.codes.StatusCode`; v2 error codes are
  translated by the v2 codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from bkeeper.wire.codes import StatusCode

__all__ = [
    "AUTH_DISABLED_PLUGIN",
    "AddRequest",
    "AddResponse",
    "AuthMessage",
    "AuthRequest",
    "AuthResponse",
    "BatchReadRequest",
    "BatchReadResponse",
    "BytesLike",
    "ErrorResponse",
    "ForceLedgerRequest",
    "ForceLedgerResponse",
    "GetBookieInfoRequest",
    "GetBookieInfoResponse",
    "GetListOfEntriesRequest",
    "GetListOfEntriesResponse",
    "ReadLacRequest",
    "ReadLacResponse",
    "ReadRequest",
    "ReadResponse",
    "Request",
    "Response",
    "StartTlsRequest",
    "StartTlsResponse",
    "UnknownRequest",
    "WriteLacRequest",
    "WriteLacResponse",
]

BytesLike = Union[bytes, bytearray, memoryview]

AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Store one entry. ``recovery`` allows the add on a fenced ledger (RECOVERY_ADD)."""

    ledger_id: int
    entry_id: int
    master_key: bytes
    body: BytesLike
    recovery: bool = False
    high_priority: bool = False
    write_flags: int = 0
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class AddResponse:
    status: StatusCode
    ledger_id: int
    entry_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read one entry; ``entry_id`` -1 asks for the last entry the bookie has.

    ``fence`` (with ``master_key``) fences the ledger. ``previous_lac`` and ``timeout_ms``
    make it a long-poll (v3 only); ``piggyback`` asks for the entry with the LAC.
    """

    ledger_id: int
    entry_id: int
    fence: bool = False
    master_key: bytes | None = None
    piggyback: bool = False
    previous_lac: int | None = None
    timeout_ms: int | None = None
    high_priority: bool = False
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ReadResponse:
    status: StatusCode
    ledger_id: int
    entry_id: int
    body: BytesLike | None = None
    max_lac: int | None = None
    lac_update_timestamp: int | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class BatchReadRequest:
    """Read up to ``max_count`` entries or ``max_size`` bytes from ``start_entry_id`` (v2 op 7)."""

    ledger_id: int
    start_entry_id: int
    max_count: int
    max_size: int
    request_id: int
    fence: bool = False
    master_key: bytes | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class BatchReadResponse:
    status: StatusCode
    ledger_id: int
    start_entry_id: int
    request_id: int
    bodies: tuple[BytesLike, ...] = ()
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class AuthMessage:
    plugin_name: str
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class AuthRequest:
    auth: AuthMessage
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class AuthResponse:
    status: StatusCode
    auth: AuthMessage | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """Explicit LAC; ``body`` is ledger id (8) + lac (8) + digest over those 16 bytes."""

    ledger_id: int
    lac: int
    master_key: bytes
    body: BytesLike
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    status: StatusCode
    ledger_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    ledger_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    """``lac_body`` is the last WRITE_LAC body, ``last_entry_body`` the last entry stored."""

    status: StatusCode
    ledger_id: int
    lac_body: BytesLike | None = None
    last_entry_body: BytesLike | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class GetBookieInfoRequest:
    """``requested`` is a mask of :class:`~bkeeper.wire.codes.GetBookieInfoField`."""

    requested: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class GetBookieInfoResponse:
    status: StatusCode
    total_disk_capacity: int | None = None
    free_disk_space: int | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class StartTlsRequest:
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class StartTlsResponse:
    status: StatusCode
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ForceLedgerRequest:
    ledger_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class ForceLedgerResponse:
    status: StatusCode
    ledger_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class GetListOfEntriesRequest:
    ledger_id: int
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class GetListOfEntriesResponse:
    """``availability`` is the compact encoding of the entry ids present (see ``entryset``)."""

    status: StatusCode
    ledger_id: int
    availability: BytesLike | None = None
    txn_id: int = 0


@dataclass(frozen=True, slots=True)
class UnknownRequest:
    """A well-framed request whose operation this codec does not serve, or (v3) whose enum
    field holds a value unknown to it (``reason`` says which).

    Decoded rather than raised so that a bookie can answer it with EBADREQ and keep the
    connection: ``operation`` is the v2 opcode or v3 ``OperationType`` value as received.
    """

    operation: int
    txn_id: int = 0
    ledger_id: int = 0
    entry_id: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """The answer to an :class:`UnknownRequest`: only a status, for the operation received.

    v2 encodes it as header (that opcode) | rc | ledger id | entry id; v3 as a ``Response``
    whose header names that operation, with the status and no body.
    """

    operation: int
    status: StatusCode
    txn_id: int = 0
    ledger_id: int = 0
    entry_id: int = 0


Request = Union[
    AddRequest,
    ReadRequest,
    BatchReadRequest,
    AuthRequest,
    WriteLacRequest,
    ReadLacRequest,
    GetBookieInfoRequest,
    StartTlsRequest,
    ForceLedgerRequest,
    GetListOfEntriesRequest,
    UnknownRequest,
]

Response = Union[
    AddResponse,
    ReadResponse,
    BatchReadResponse,
    AuthResponse,
    WriteLacResponse,
    ReadLacResponse,
    GetBookieInfoResponse,
    StartTlsResponse,
    ForceLedgerResponse,
    GetListOfEntriesResponse,
    ErrorResponse,
]
