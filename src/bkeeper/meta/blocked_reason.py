"""Why a queued ledger is not being repaired: our record beside Apache BookKeeper's
under-replication mark (:mod:`bkeeper.meta.underreplication` owns where it is kept and when).

``<root>/underreplication/blocked/urL<%010d>`` holds one :class:`BlockedReason` as JSON text.
Java's ``UnderreplicatedLedgerFormat`` has no field for it, and Java parses marks with
``TextFormat.merge``, which refuses unknown fields: so the reason is a node of its own, which
Java never reads. The detail is one line of at most :data:`DETAIL_CHARS_MAX` characters from
construction on, so that a reason read back compares equal to the one written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bkeeper.common.errors import ProtocolError
from bkeeper.meta.layout import UNDERREPLICATION
from bkeeper.meta.store import join_path

__all__ = ["BLOCKED", "DETAIL_CHARS_MAX", "BlockedReason", "ur_blocked_path"]

#: The directory of the reasons, under ``<root>/underreplication``.
BLOCKED = "blocked"
#: Characters of a reason's detail kept (a reason is one line for a table, not a report).
DETAIL_CHARS_MAX = 400


@dataclass(frozen=True)
class BlockedReason:
    """Why a queued ledger is not being repaired: ``kind`` (a short word for metrics and
    filters, such as ``no_candidate``), ``detail`` (one line for a person), since when
    (``since_ms``, wall clock) and which worker found it."""

    kind: str
    detail: str
    since_ms: int
    worker: str

    def __post_init__(self) -> None:
        if not self.kind or not self.kind.replace("_", "").isalnum():
            raise ProtocolError(f"blocked reason: kind must be a word, got {self.kind!r:.40}")
        # One line, bounded: what is stored is what is compared (``same_as``) after a read.
        object.__setattr__(self, "detail", " ".join(self.detail.split())[:DETAIL_CHARS_MAX])

    def encode(self) -> bytes:
        body = {
            "kind": self.kind,
            "detail": self.detail,
            "since_ms": self.since_ms,
            "worker": self.worker,
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> BlockedReason:
        try:
            body = json.loads(data.decode())
            reason = cls(
                str(body["kind"]), str(body["detail"]), int(body["since_ms"]), str(body["worker"])
            )
        except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise ProtocolError(f"blocked reason is unreadable: {exc!r:.80}") from exc
        return reason

    def same_as(self, other: BlockedReason | None) -> bool:
        """The same state (kind and detail): who found it and when do not count."""
        return other is not None and (self.kind, self.detail) == (other.kind, other.detail)


def ur_blocked_path(root: str, ledger_id: int) -> str:
    """The node holding why ``ledger_id`` is not being repaired (ours, module doc)."""
    return join_path(root, UNDERREPLICATION, BLOCKED, f"urL{ledger_id:010d}")
