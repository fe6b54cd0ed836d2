"""Operation, status and flag codes of the BookKeeper wire protocol (v2 binary and v3 protobuf).

The protocol-neutral status is :class:`StatusCode` (the v3 numbering). v2 carries its own
integer error codes, :class:`V2ErrorCode`, named as the statuses: :data:`V2_TO_STATUS` and
:data:`STATUS_TO_V2` translate between them, both derived from the names.

The status registry, read both ways: :data:`STATUS_ERRORS` gives each non-OK status its class
in the exception tree (``bkeeper.common.errors``) and is the only table of the pairing.
:func:`error_for_status` turns a status a bookie answered into an exception (client side);
:func:`status_for_error` turns an exception raised while serving into the status to answer
(server side): the status of the nearest class in its MRO that the registry names, EIO for
anything else (so ``DiskFullError`` answers EREADONLY, a bug EIO).

A status a person may read (a log line, an error's message) is written with
:func:`status_text`: its name and what it means (``EFENCED (the ledger was fenced by a
recovering reader)``), never the bare number (``504``, what ``%s`` of an ``IntEnum`` gives).
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

from bkeeper.common import errors

__all__ = [
    "STATUS_ERRORS",
    "STATUS_MEANINGS",
    "STATUS_TO_V2",
    "V2_TO_STATUS",
    "AddFlag",
    "GetBookieInfoField",
    "OperationType",
    "Protocol",
    "ProtocolVersion",
    "ReadFlag",
    "StatusCode",
    "V2ErrorCode",
    "V2Flag",
    "V2OpCode",
    "WriteFlag",
    "error_for_status",
    "status_for_error",
    "status_text",
]


class Protocol(IntEnum):
    """Which protocol a connection speaks; the first frame decides (see ``detect``)."""

    V2 = 2
    V3 = 3


class V2OpCode(IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    AUTH = 3
    READ_LAC = 4
    WRITE_LAC = 5
    GET_BOOKIE_INFO = 6
    BATCH_READ_ENTRY = 7


class V2Flag(IntFlag):
    NONE = 0x0000
    DO_FENCING = 0x0001
    RECOVERY_ADD = 0x0002
    HIGH_PRIORITY = 0x0004


class V2ErrorCode(IntEnum):
    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107


class ProtocolVersion(IntEnum):
    VERSION_ONE = 1
    VERSION_TWO = 2
    VERSION_THREE = 3


class OperationType(IntEnum):
    READ_ENTRY = 1
    ADD_ENTRY = 2
    RANGE_READ_ENTRY = 3
    RANGE_ADD_ENTRY = 4
    AUTH = 5
    WRITE_LAC = 6
    READ_LAC = 7
    GET_BOOKIE_INFO = 8
    START_TLS = 9
    FORCE_LEDGER = 10
    GET_LIST_OF_ENTRIES_OF_LEDGER = 11
    BATCH_READ_ENTRY = 12


class StatusCode(IntEnum):
    EOK = 0
    ENOLEDGER = 402
    ENOENTRY = 403
    EBADREQ = 404
    EIO = 501
    EUA = 502
    EBADVERSION = 503
    EFENCED = 504
    EREADONLY = 505
    ETOOMANYREQUESTS = 506
    EUNKNOWNLEDGERSTATE = 507


class ReadFlag(IntEnum):
    """v3 ``ReadRequest.flag`` values."""

    FENCE_LEDGER = 1
    ENTRY_PIGGYBACK = 2


class AddFlag(IntEnum):
    """v3 ``AddRequest.flag`` values."""

    RECOVERY_ADD = 1


class WriteFlag(IntFlag):
    NONE = 0
    DEFERRED_SYNC = 0x1


class GetBookieInfoField(IntFlag):
    TOTAL_DISK_CAPACITY = 0x1
    FREE_DISK_SPACE = 0x2


#: What each status means, in the words of a log line.
STATUS_MEANINGS: dict[StatusCode, str] = {
    StatusCode.EOK: "done",
    StatusCode.ENOLEDGER: "the bookie has no such ledger",
    StatusCode.ENOENTRY: "the bookie has no such entry",
    StatusCode.EBADREQ: "the bookie found the request malformed",
    StatusCode.EIO: "the bookie failed to read or write its storage",
    StatusCode.EUA: "not authorized: wrong ledger password, or credentials missing",
    StatusCode.EBADVERSION: "the bookie does not speak this protocol version",
    StatusCode.EFENCED: "the ledger was fenced by a recovering reader",
    StatusCode.EREADONLY: "the bookie is read-only",
    StatusCode.ETOOMANYREQUESTS: "the bookie is overloaded: too many requests",
    StatusCode.EUNKNOWNLEDGERSTATE: "the bookie cannot tell whether it has the data",
}


def status_text(status: int) -> str:
    """``status`` as a person reads it: ``EFENCED (the ledger was fenced by a recovering
    reader)``; a number no status has: ``status 999 (unknown to this client)``."""
    try:
        known = StatusCode(status)
    except ValueError:
        return f"status {int(status)} (unknown to this client)"
    return f"{known.name} ({STATUS_MEANINGS[known]})"


V2_TO_STATUS: dict[int, StatusCode] = {code: StatusCode[code.name] for code in V2ErrorCode}
STATUS_TO_V2: dict[StatusCode, int] = {status: int(v2) for v2, status in V2_TO_STATUS.items()}

#: The status registry: every non-OK status and its exception class, one to one.
STATUS_ERRORS: dict[StatusCode, type[errors.BookieError]] = {
    StatusCode.ENOLEDGER: errors.NoSuchLedgerError,
    StatusCode.ENOENTRY: errors.NoSuchEntryError,
    StatusCode.EBADREQ: errors.BadRequestError,
    StatusCode.EIO: errors.BookieIOError,
    StatusCode.EUA: errors.UnauthorizedAccessError,
    StatusCode.EBADVERSION: errors.BadVersionError,
    StatusCode.EFENCED: errors.LedgerFencedError,
    StatusCode.EREADONLY: errors.ReadOnlyBookieError,
    StatusCode.ETOOMANYREQUESTS: errors.TooManyRequestsError,
    StatusCode.EUNKNOWNLEDGERSTATE: errors.DataUnknownError,
}
_ERROR_STATUS: dict[type[BaseException], StatusCode] = {
    cls: status for status, cls in STATUS_ERRORS.items()
}


def error_for_status(status: StatusCode, context: str) -> errors.BookieError:
    """The exception for a non-OK ``status``; ``context`` says which request it answered."""
    cls = STATUS_ERRORS.get(status, errors.BookieError)
    return cls(f"{context}: {status_text(status)}")


def status_for_error(exc: BaseException) -> StatusCode:
    """The status answering ``exc``: that of the nearest registered class in its MRO, else
    EIO (an error the registry does not name is the bookie's own failure)."""
    for cls in type(exc).__mro__:
        status = _ERROR_STATUS.get(cls)
        if status is not None:
            return status
    return StatusCode.EIO
