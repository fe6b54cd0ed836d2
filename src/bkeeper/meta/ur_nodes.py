"""How the under-replication nodes are written (the layout is in
:mod:`bkeeper.meta.underreplication`): Apache BookKeeper's protobuf text for the layout, the
marks, the locks and the auditor votes; binary protobuf for the periodic checks' ctimes;
decimal text for the lost-bookie delay. Pure: bytes in and out, ``ProtocolError`` for a node
that cannot be read.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.wire._pb import data_formats_pb2 as pb

__all__ = [
    "CHECKS",
    "DELAY_S_MAX",
    "HEX_LEVELS",
    "LOST_BOOKIE_RECOVERY_DELAY",
    "UR_LAYOUT_TYPE",
    "UR_LAYOUT_VERSION",
    "check_node",
    "is_hex",
    "parse_delay",
    "parse_text",
    "text",
]

UR_LAYOUT_TYPE = "BASIC"
UR_LAYOUT_VERSION = 1

#: Levels of 16-bit hex directories above a mark.
HEX_LEVELS = 4

LOST_BOOKIE_RECOVERY_DELAY = "lostBookieRecoveryDelay"

#: Java's Integer.MAX_VALUE: the delay node holds a Java int.
DELAY_S_MAX = (1 << 31) - 1


#: Periodic check name -> (its ctime node, its message type, the message's only field).
CHECKS: dict[str, tuple[str, type[Message], str]] = {
    "checkallledgers": ("checkallledgersctime", pb.CheckAllLedgersFormat, "checkAllLedgersCTime"),
    "placementpolicycheck": (
        "placementpolicycheckctime",
        pb.PlacementPolicyCheckFormat,
        "placementPolicyCheckCTime",
    ),
    "replicascheck": ("replicascheckctime", pb.ReplicasCheckFormat, "replicasCheckCTime"),
}

_M = TypeVar("_M", bound=Message)


def text(message: Message) -> bytes:
    """``message`` as protobuf text, as Java's ``TextFormat`` writes it."""
    return text_format.MessageToString(message).encode()


def parse_text(data: bytes, message: _M) -> _M:
    try:
        return text_format.Parse(data.decode(), message)
    except (UnicodeDecodeError, text_format.ParseError) as exc:
        raise ProtocolError(f"under-replication node is unreadable: {exc}") from exc


def parse_delay(data: bytes) -> int:
    try:
        return int(data.decode().strip())
    except (UnicodeDecodeError, ValueError) as exc:
        name = LOST_BOOKIE_RECOVERY_DELAY
        raise ProtocolError(f"{name} holds {data[:40]!r}, not whole seconds") from exc


def check_node(check: str) -> tuple[str, type[Message], str]:
    """The node, message type and field of the periodic check ``check``; ``ConfigError``."""
    try:
        return CHECKS[check]
    except KeyError:
        raise ConfigError(f"check: must be one of {', '.join(CHECKS)}, got {check!r}") from None


def is_hex(name: str) -> bool:
    return all(c in "0123456789abcdef" for c in name)
