"""What a replicated state machine is made of: the :class:`StateMachine` protocol a user
implements, the member's :class:`RsmConfig`, the election's place, and the record formats the
framework writes (read barriers, batches of commands).

The framework that runs it is :mod:`bkeeper.statemachine.machine`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from bkeeper.common.errors import ConfigError, StateMachineError
from bkeeper.meta.store import join_path
from bkeeper.namedlog import Position
from bkeeper.namedlog import logs_root as _logs_root
from bkeeper.statemachine.core import LEASE_DRIFT, Role

__all__ = [
    "BATCH_BYTES_MAX",
    "BATCH_COMMANDS_MAX",
    "BATCH_PROPERTIES",
    "LEASE_DRIFT",
    "READ_LEASE_S_MAX",
    "ITEM_HEAD",
    "NOOP_PROPERTIES",
    "Role",
    "RsmConfig",
    "StateMachine",
    "decode_batch",
    "election_path",
    "encode_batch",
]

#: The properties of a framework record (a read barrier), never applied.
NOOP_PROPERTIES = {"bkeeper.rsm": b"noop"}
#: The properties of a record carrying several commands (see :func:`encode_batch`).
BATCH_PROPERTIES = {"bkeeper.rsm": b"batch"}
#: Commands (and their bytes) one record carries at most (group commit).
BATCH_COMMANDS_MAX = 1_000
BATCH_BYTES_MAX = 1024 * 1024
#: The longest read lease (a new leader waits this long after fencing before it leads).
READ_LEASE_S_MAX = 10.0
ITEM_HEAD = struct.Struct(">BI")


def election_path(ledgers_root: str, log_name: str) -> str:
    """Where the members of the state machine on ``log_name`` hold their election."""
    return join_path(_logs_root(ledgers_root).rpartition("/")[0], "elections", log_name)


class StateMachine(Protocol):
    """What a user implements. ``apply`` must be deterministic: every member applies the same
    commands in the same order and must reach the same state.

    A machine whose state is large may also offer ``snapshot_writer() -> Callable[[BinaryIO],
    None]``: called at the position to snapshot, it captures the state cheaply (a shallow
    copy) and returns a function that writes it; the framework runs that function in a
    thread, so the event loop (appends, the store's session) is not held up meanwhile."""

    def apply(self, command: bytes, position: Position) -> Any:
        """Apply one command (at ``position`` in the log); its result."""
        ...

    def write_snapshot(self, out: BinaryIO) -> None:
        """Write the whole state to ``out``."""
        ...

    def restore_snapshot(self, source: BinaryIO) -> None:
        """Replace the state by the one ``source`` holds (as ``write_snapshot`` wrote it)."""
        ...


@dataclass(frozen=True)
class RsmConfig:
    """``candidate``: this member's election data (what others see as the leader's).
    ``snapshot_every_commands`` / ``snapshot_every_bytes``: 0 disables either trigger.
    ``retain_ledgers``: after a snapshot, truncation keeps this many of the log's ledgers
    that lie wholly before it (0: it drops them all). ``read_lease_s``: how long an
    acknowledged append lets the leader answer linearizable reads from its state without
    a barrier, and so how long a new leader waits after fencing before it takes commands
    (0: every read waits for a barrier; see :mod:`bkeeper.statemachine.machine`).
    ``follow_stall_s``: how long a follower may apply nothing (time without the store's
    connection not counted) before it looks whether the log's confirmed end lies past what
    it applied (its reader is then stuck: it says where, and reads on with a new one)."""

    log_name: str
    candidate: bytes
    append_timeout_s: float = 10.0
    follow_poll_s: float = 0.1
    retry_pause_s: float = 0.5
    in_flight_max: int = 10_000
    snapshot_every_commands: int = 0
    snapshot_every_bytes: int = 0
    retain_ledgers: int = 0
    read_lease_s: float = 0.0
    follow_stall_s: float = 15.0

    def __post_init__(self) -> None:
        if not self.candidate:
            raise ConfigError("candidate: must not be empty")
        for name in ("append_timeout_s", "follow_poll_s", "retry_pause_s", "follow_stall_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}: must be positive, got {getattr(self, name)!r}")
        if not 0.0 <= self.read_lease_s <= READ_LEASE_S_MAX:
            raise ConfigError(
                f"read_lease_s: must be 0..{READ_LEASE_S_MAX:g}, got {self.read_lease_s!r}"
            )
        if self.in_flight_max < 1:
            raise ConfigError(f"in_flight_max: must be at least 1, got {self.in_flight_max}")
        for name in ("snapshot_every_commands", "snapshot_every_bytes", "retain_ledgers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must be 0 or more, got {getattr(self, name)}")


def encode_batch(items: list[tuple[bool, bytes]]) -> bytes:
    """Several commands in one record: per command, a noop flag byte, its length, its bytes."""
    out = bytearray()
    for noop, command in items:
        out += ITEM_HEAD.pack(1 if noop else 0, len(command))
        out += command
    return bytes(out)


def decode_batch(payload: bytes) -> list[tuple[bool, bytes]]:
    """The commands of a batch record (see :func:`encode_batch`)."""
    items, at, view = [], 0, memoryview(payload)
    while at < len(view):
        if at + ITEM_HEAD.size > len(view):
            raise StateMachineError(f"batch record: a truncated item head at byte {at}")
        flag, size = ITEM_HEAD.unpack_from(view, at)
        at += ITEM_HEAD.size
        if at + size > len(view):
            raise StateMachineError(f"batch record: item at byte {at} runs past the end")
        items.append((flag == 1, bytes(view[at : at + size])))
        at += size
    return items
