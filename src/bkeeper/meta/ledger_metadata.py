"""The ledger metadata model: one frozen value per version of a ledger's metadata.

A ledger is written to a sequence of *segments*: from its first entry id on, each entry goes
to the segment's ensemble (``ensemble_size`` bookies), ``write_quorum`` of them per entry,
acknowledged by ``ack_quorum``. Every change returns a new object; the store writes it back
with a compare-and-set on the version it was read at.

Invariants, checked on every construction (so where metadata is made and where it is
decoded): ``ensemble_size >= write_quorum >= ack_quorum >= 1``; at least one segment, the
first starting at entry 0, first entry ids strictly increasing, each ensemble exactly
``ensemble_size`` distinct bookies; ``last_entry_id >= -1`` and ``length >= 0``; an open
ledger has ``last_entry_id == -1``.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from bkeeper.common.errors import ConfigError
from bkeeper.common.ids import INVALID_ENTRY_ID, BookieId
from bkeeper.wire.digest import DigestType

__all__ = ["CURRENT_METADATA_FORMAT", "DigestType", "LedgerMetadata", "LedgerState"]

#: The metadata format version new ledgers are written in.
CURRENT_METADATA_FORMAT = 3

Ensemble = tuple[BookieId, ...]


class LedgerState(enum.IntEnum):
    """A ledger's state; the values are those of ``LedgerMetadataFormat.State``."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True)
class LedgerMetadata:
    """Metadata of one ledger. ``segments`` maps first entry id to ensemble, in order."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    segments: Mapping[int, Ensemble] = field(hash=False)
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = field(default=b"", repr=False)
    #: False: the metadata holds no password (``store_password_in_metadata`` off, or an old
    #: format); ``password`` is then empty and says nothing about the ledger's password.
    has_password: bool = True
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    ctime_ms: int | None = None
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict, hash=False)
    ctoken: int = 0
    format_version: int = CURRENT_METADATA_FORMAT

    def __post_init__(self) -> None:
        segments = {int(k): tuple(BookieId(b) for b in v) for k, v in self.segments.items()}
        object.__setattr__(self, "segments", MappingProxyType(dict(sorted(segments.items()))))
        object.__setattr__(self, "custom_metadata", MappingProxyType(dict(self.custom_metadata)))
        object.__setattr__(self, "state", LedgerState(self.state))
        object.__setattr__(self, "digest_type", DigestType(self.digest_type))
        self._check_quorums()
        self._check_segments()
        self._check_progress()

    @classmethod
    def new(
        cls,
        ensemble: Iterable[str],
        write_quorum: int,
        ack_quorum: int,
        digest_type: DigestType,
        password: bytes,
        *,
        ctime_ms: int | None = None,
        custom_metadata: Mapping[str, bytes] | None = None,
        ctoken: int = 0,
        store_password: bool = True,
    ) -> LedgerMetadata:
        """Metadata of a new, open ledger writing its first segment to ``ensemble``; without
        ``store_password`` it holds no password."""
        members = tuple(BookieId(b) for b in ensemble)
        return cls(
            ensemble_size=len(members),
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            segments={0: members},
            digest_type=digest_type,
            password=password if store_password else b"",
            has_password=store_password,
            ctime_ms=ctime_ms,
            custom_metadata=custom_metadata or {},
            ctoken=ctoken,
        )

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_ensemble(self) -> Ensemble:
        """The ensemble new entries go to."""
        return self.segments[max(self.segments)]

    def ensemble_for(self, entry_id: int) -> Ensemble:
        """The ensemble that holds ``entry_id``: the last segment starting at or before it."""
        if entry_id < 0:
            raise ValueError(f"entry id {entry_id} is negative")
        starts = list(self.segments)
        return self.segments[starts[bisect.bisect_right(starts, entry_id) - 1]]

    def with_state(self, state: LedgerState) -> LedgerMetadata:
        return replace(self, state=state)

    def in_recovery(self) -> LedgerMetadata:
        return replace(self, state=LedgerState.IN_RECOVERY)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """This ledger closed at ``last_entry_id`` (-1: empty) with ``length`` bytes."""
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def with_new_segment(self, first_entry_id: int, ensemble: Iterable[str]) -> LedgerMetadata:
        """Entries from ``first_entry_id`` go to ``ensemble`` (replacing the last segment if it
        starts at the same entry: nothing was written to it)."""
        last_start = max(self.segments)
        if first_entry_id < last_start:
            raise ConfigError(
                f"new segment at entry {first_entry_id} precedes the last one at {last_start}"
            )
        segments = dict(self.segments)
        segments[first_entry_id] = tuple(BookieId(b) for b in ensemble)
        return replace(self, segments=segments)

    def _check_quorums(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ConfigError(
                "ledger metadata needs ensemble >= write quorum >= ack quorum >= 1, got "
                f"{self.ensemble_size}/{self.write_quorum}/{self.ack_quorum}"
            )

    def _check_segments(self) -> None:
        if not self.segments or next(iter(self.segments)) != 0:
            raise ConfigError("ledger metadata needs a first segment starting at entry 0")
        for first_entry_id, ensemble in self.segments.items():
            if len(ensemble) != self.ensemble_size or len(set(ensemble)) != len(ensemble):
                raise ConfigError(
                    f"segment at entry {first_entry_id}: ensemble {list(ensemble)} is not "
                    f"{self.ensemble_size} distinct bookies"
                )

    def _check_progress(self) -> None:
        if self.last_entry_id < INVALID_ENTRY_ID or self.length < 0:
            raise ConfigError(
                f"last entry id {self.last_entry_id} and length {self.length} must be >= -1, >= 0"
            )
        if self.state is LedgerState.OPEN and self.last_entry_id != INVALID_ENTRY_ID:
            raise ConfigError(f"an open ledger has no last entry id, got {self.last_entry_id}")
