"""Apache BookKeeper 4.x's ZooKeeper layout under the ledgers root (default ``/ledgers``).

Pure path arithmetic, no I/O::

    <root>/LAYOUT                "2\\n<manager factory class>:<manager version>"
    <root>/INSTANCEID            cluster UUID string
    <root>/available/<bookieId>  ephemeral, BookieServiceInfoFormat; readonly/<bookieId> too
    <root>/cookies/<bookieId>    cookie text, versioned
    <root>/idgen/ID-<seq>        ephemeral-sequential, deleted once read (31-bit ids)
    <root>/idgen-long/HOB-<%010d high 32 bits>/ID-<seq>   64-bit ids
    <root>/00/0000/L0001         ledger metadata, ids < 2^31-1: 10 digits split 2/4/L4
    <root>/000/0000/0000/0002/L1234   ids >= 2^31-1: 19 digits split 3/4/4/4/L4
    <root>/underreplication/ledgers/<%04x>x4/urL<%010d>, .../locks/urL<%010d>, .../disable

Invariant: :func:`ledger_path` and :func:`ledger_id_from_parts` are inverse for every id in
[0, 2^63-1].
"""

from __future__ import annotations

from dataclasses import dataclass

from bkeeper.common.errors import ProtocolError
from bkeeper.common.ids import MAX_LEDGER_ID, LedgerId
from bkeeper.meta.store import join_path

__all__ = [
    "AVAILABLE",
    "COOKIES",
    "DISABLE_HEALTH_CHECK",
    "HIERARCHICAL_LAYOUT",
    "IDGEN",
    "IDGEN_LONG",
    "INSTANCEID",
    "LAYOUT",
    "LAYOUT_FORMAT_VERSION",
    "READONLY",
    "RESERVED_NAMES",
    "SHORT_LEDGER_ID_LIMIT",
    "UNDERREPLICATION",
    "LedgerLayout",
    "is_ledger_tree_name",
    "ledger_id_from_parts",
    "ledger_path",
    "ur_ledger_path",
    "ur_lock_path",
]

LAYOUT = "LAYOUT"
INSTANCEID = "INSTANCEID"
AVAILABLE = "available"
READONLY = "readonly"
COOKIES = "cookies"
IDGEN = "idgen"
IDGEN_LONG = "idgen-long"
UNDERREPLICATION = "underreplication"
DISABLE_HEALTH_CHECK = "disableHealthCheck"

#: Top-level names under the root that are never ledger directories.
RESERVED_NAMES = frozenset(
    {
        LAYOUT,
        INSTANCEID,
        AVAILABLE,
        COOKIES,
        IDGEN,
        IDGEN_LONG,
        UNDERREPLICATION,
        DISABLE_HEALTH_CHECK,
    }
)

#: Ids below this (Java's Integer.MAX_VALUE) use the short 2/4/L4 form.
SHORT_LEDGER_ID_LIMIT = (1 << 31) - 1

LAYOUT_FORMAT_VERSION = 2

_SHORT_SPLIT = (2, 4, 4)
_LONG_SPLIT = (3, 4, 4, 4, 4)


@dataclass(frozen=True)
class LedgerLayout:
    """The LAYOUT node: which ledger manager wrote this cluster."""

    manager_factory_class: str
    manager_version: int
    format_version: int = LAYOUT_FORMAT_VERSION

    def encode(self) -> bytes:
        text = f"{self.format_version}\n{self.manager_factory_class}:{self.manager_version}"
        return text.encode()

    @classmethod
    def decode(cls, data: bytes) -> LedgerLayout:
        try:
            version_line, _, manager_line = data.decode().strip().partition("\n")
            factory, _, manager_version = manager_line.strip().rpartition(":")
            layout = cls(factory, int(manager_version), int(version_line))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"LAYOUT node {data!r} is not readable: {exc}") from exc
        if not factory:
            raise ProtocolError(f"LAYOUT node {data!r} names no ledger manager factory")
        return layout


#: The layout bkeeper writes and reads: Apache BookKeeper's default hierarchical manager.
HIERARCHICAL_LAYOUT = LedgerLayout("org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1)


def ledger_path(root: str, ledger_id: int) -> str:
    """The metadata node of ``ledger_id`` (short form below 2^31-1, long form from there)."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} is outside [0, 2^63-1]")
    if ledger_id < SHORT_LEDGER_ID_LIMIT:
        parts = _split(f"{ledger_id:010d}", _SHORT_SPLIT)
    else:
        parts = _split(f"{ledger_id:019d}", _LONG_SPLIT)
    parts[-1] = "L" + parts[-1]
    return join_path(root, *parts)


def ledger_id_from_parts(parts: list[str]) -> LedgerId | None:
    """The ledger id of a path below the root split into names, or None if it is not one."""
    if len(parts) not in (len(_SHORT_SPLIT), len(_LONG_SPLIT)) or not parts[-1].startswith("L"):
        return None
    split = _SHORT_SPLIT if len(parts) == len(_SHORT_SPLIT) else _LONG_SPLIT
    digits = [*parts[:-1], parts[-1][1:]]
    if any(len(d) != n or not d.isdigit() for d, n in zip(digits, split, strict=True)):
        return None
    return LedgerId(int("".join(digits)))


def is_ledger_tree_name(name: str, level: int, long_form: bool) -> bool:
    """Whether ``name`` can be the ``level``-th (0-based) directory of a ledger path."""
    split = _LONG_SPLIT if long_form else _SHORT_SPLIT
    return level < len(split) - 1 and len(name) == split[level] and name.isdigit()


def ur_ledger_path(root: str, ledger_id: int) -> str:
    """The under-replication marker of ``ledger_id``: four 16-bit hex levels, then urL."""
    levels = [f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0)]
    return join_path(root, UNDERREPLICATION, "ledgers", *levels, f"urL{ledger_id:010d}")


def ur_lock_path(root: str, ledger_id: int) -> str:
    """The replication lock of ``ledger_id``."""
    return join_path(root, UNDERREPLICATION, "locks", f"urL{ledger_id:010d}")


def _split(digits: str, widths: tuple[int, ...]) -> list[str]:
    parts, start = [], 0
    for width in widths:
        parts.append(digits[start : start + width])
        start += width
    return parts
