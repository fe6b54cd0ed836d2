"""A subscription's state: what its consumers have acknowledged (pure).

A subscription consumes a named log from ``start`` on. ``mark`` is its cumulative
acknowledgement: every record at or before it is consumed (None: none yet). Records acked out
of order beyond the mark (``ack_individual``, as Pulsar's cursors keep them) are kept
compactly, as runs of consecutive entry ids within a ledger, at most ``ACKED_RUNS_MAX`` runs.
``epoch`` grows by one each time a consumer takes the subscription over; ``owner`` is the id
of the last one that did. A consumer's acks are written with its epoch: once another consumer
took over (a greater epoch), they are refused.

Stored as JSON in the metadata store, under the log's node
(``<logs root>/<log>/subscriptions/<name>``)::

    {"format": 1, "ctime_ms": 1700000000000, "start": [12, 0], "mark": [14, 7],
     "acked": [[14, 9, 12], [15, 0, 0]], "epoch": 3, "owner": "host:1234"}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from bkeeper.common.errors import ConfigError, LogError, ProtocolError
from bkeeper.namedlog.records import Position

__all__ = [
    "ACKED_RUNS_MAX",
    "SubscriptionState",
    "check_subscription_name",
    "next_position",
]

#: Runs of records acked beyond the mark a subscription keeps at most (its node stays far
#: under ZooKeeper's 1 MiB limit: about 30 bytes a run).
ACKED_RUNS_MAX = 10_000
_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

AckedRun = tuple[int, int, int]  # (ledger id, first entry id, last entry id)


def check_subscription_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"subscription name {name!r}: 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def next_position(position: Position) -> Position:
    """The position right after ``position`` in its ledger (a reader starting there moves on
    to the next ledger if the ledger holds no more)."""
    return Position(position.ledger_id, position.entry_id + 1)


@dataclass(frozen=True)
class SubscriptionState:
    """See the module docstring."""

    ctime_ms: int
    start: Position
    mark: Position | None = None
    acked: tuple[AckedRun, ...] = ()
    epoch: int = 0
    owner: str = ""

    @property
    def resume_from(self) -> Position:
        """Where a consumer starts reading: after the mark, else at the start."""
        return self.start if self.mark is None else max(self.start, next_position(self.mark))

    def is_acked(self, position: Position) -> bool:
        if self.mark is not None and position <= self.mark:
            return True
        ledger, entry = position
        return any(r[0] == ledger and r[1] <= entry <= r[2] for r in self.acked)

    def taken_over(self, owner: str) -> SubscriptionState:
        """The state once consumer ``owner`` took the subscription over (a new epoch)."""
        return replace(self, epoch=self.epoch + 1, owner=owner)

    def with_acks(
        self, cumulative: Position | None, individual: Iterable[Position]
    ) -> SubscriptionState:
        """The state with ``cumulative`` (everything at or before it) and the ``individual``
        positions acknowledged. The mark never goes back; runs at or before it are dropped.
        ``LogError`` when the runs would exceed :data:`ACKED_RUNS_MAX`."""
        mark = self.mark
        if cumulative is not None and (mark is None or cumulative > mark):
            mark = cumulative
        spans = [list(r) for r in self.acked]
        spans += [[p.ledger_id, p.entry_id, p.entry_id] for p in individual]
        runs = _merged(spans)
        first = runs[0] if runs else None
        if mark is None and first is not None and Position(first[0], first[1]) == self.start:
            mark = Position(first[0], first[2])  # acked from the very start: a mark at last
        if mark is not None:
            runs = _beyond(runs, mark)
            while runs and runs[0][0] == mark.ledger_id and runs[0][1] == mark.entry_id + 1:
                mark = Position(mark.ledger_id, runs[0][2])  # the run continues the mark
                runs = runs[1:]
        if len(runs) > ACKED_RUNS_MAX:
            raise LogError(
                f"more than {ACKED_RUNS_MAX} runs of records acknowledged out of order beyond "
                f"the mark {mark}: acknowledge cumulatively"
            )
        return replace(self, mark=mark, acked=tuple(runs))

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "format": _FORMAT,
            "ctime_ms": self.ctime_ms,
            "start": list(self.start),
            "epoch": self.epoch,
            "owner": self.owner,
        }
        if self.mark is not None:
            doc["mark"] = list(self.mark)
        if self.acked:
            doc["acked"] = [list(r) for r in self.acked]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, what: str = "subscription") -> SubscriptionState:
        try:
            doc = json.loads(data)
            if doc.get("format") != _FORMAT:
                raise ValueError(f"format {doc.get('format')!r} is not {_FORMAT}")
            mark = doc.get("mark")
            acked = tuple((int(r[0]), int(r[1]), int(r[2])) for r in doc.get("acked", ()))
            state = cls(
                int(doc["ctime_ms"]),
                Position(int(doc["start"][0]), int(doc["start"][1])),
                Position(int(mark[0]), int(mark[1])) if mark is not None else None,
                acked,
                int(doc.get("epoch", 0)),
                str(doc.get("owner", "")),
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ProtocolError(f"{what} is unreadable: {exc}") from exc
        if any(r[1] > r[2] or r[1] < 0 for r in acked):
            raise ProtocolError(f"{what}: a run of acknowledged records is malformed")
        return state


def _merged(spans: list[list[int]]) -> list[AckedRun]:
    """Runs sorted, overlapping or adjacent ones (same ledger) joined."""
    runs: list[list[int]] = []
    for ledger, first, last in sorted(spans):
        if runs and runs[-1][0] == ledger and first <= runs[-1][2] + 1:
            runs[-1][2] = max(runs[-1][2], last)
        else:
            runs.append([ledger, first, last])
    return [(r[0], r[1], r[2]) for r in runs]


def _beyond(runs: list[AckedRun], mark: Position) -> list[AckedRun]:
    """The parts of ``runs`` after ``mark``."""
    kept = []
    for ledger, first, last in runs:
        if ledger < mark.ledger_id or (ledger == mark.ledger_id and last <= mark.entry_id):
            continue
        kept.append(
            (ledger, max(first, mark.entry_id + 1) if ledger == mark.ledger_id else first, last)
        )
    return kept
