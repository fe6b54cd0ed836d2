"""How named logs store their ledgers, roll and tail (:class:`LogConfig`, a process's
setting), the settings a log stores with itself (:class:`LogSettings`), and the names of the
two ends a reader can start from (``EARLIEST``, ``LATEST``).

Precedence: a log's stored settings win; what the log does not set comes from the process's
``LogConfig`` (:meth:`LogSettings.applied_to`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any

from bkeeper.common.errors import ConfigError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.common.validate import (
    check_int_in_range,
    check_non_negative_ints,
    check_positive_ints,
    check_quorum,
)
from bkeeper.namedlog.core.records import BATCH_RECORDS_MAX, CHUNK_BYTES_MIN, codec_id

__all__ = [
    "BATCH_BYTES_MAX",
    "CHUNK_BYTES_MAX",
    "EARLIEST",
    "LATEST",
    "SETTING_NAMES",
    "LogConfig",
    "LogSettings",
]

#: The largest ``batch_max_bytes``: a batch's entry must fit in a bookie's 5 MiB frame.
BATCH_BYTES_MAX = 4 * 1024 * 1024
#: The largest ``chunk_bytes`` (and its default): a bookie's default frame less 1 MiB for the
#: chunk head, the add request's head and digest.
CHUNK_BYTES_MAX = MAX_FRAME_BYTES_DEFAULT - 1024 * 1024
#: A reader start: the first record still in the log.
EARLIEST = "earliest"
#: A reader start: the records appended from now on (see :mod:`bkeeper.namedlog.walk`).
LATEST = "latest"


@dataclass(frozen=True)
class LogConfig:
    """How logs store their ledgers, roll and tail.

    ``roll_bytes`` / ``roll_age_ms``: a writer starts a new ledger once the current one holds
    this many payload bytes or is this old (0: never by age). ``tail_poll_ms``: the longest a
    tailing reader waits before it re-reads the ledger list. ``retention_age_ms`` /
    ``retention_bytes`` (0: keep everything): the writer truncates whole sealed ledgers whose
    records are all older than the age, or that lie beyond the newest ``retention_bytes`` of
    sealed ledgers. ``retention_consumed``: also truncate the sealed ledgers that every
    subscription of the log has consumed past (a log with no subscription keeps them); the
    age and size limits still apply as caps, and a subscription left behind by one is told
    its records are gone (:mod:`bkeeper.namedlog.subscriptions`). Retention runs when a writer
    opens, at each roll and on the writer's timer (:mod:`bkeeper.namedlog.core.retention`).

    A log may store its own retention, roll and replication settings (:class:`LogSettings`);
    those win over this config's for that log's writers.

    Record batching (Kafka's names; :mod:`bkeeper.namedlog.batching`): with ``batching``
    on, the writer packs records into one entry (a record batch) until it holds
    ``batch_max_records`` records or ``batch_max_bytes`` bytes of records (a single larger
    record goes alone), or ``linger_ms`` passed since its first record (0: the records
    appended before the event loop next runs). ``compression`` (none, zstd, lz4; the package
    must be installed) compresses each batch. Off by default: a writer then writes format-1
    entries, which every reader of earlier versions reads, and every record is alone in its
    entry (``Position(L, E + 1)`` follows ``Position(L, E)``, as the state machine assumes).

    Large records (:mod:`bkeeper.namedlog.core.chunks`): a record whose envelope (payload, key,
    properties and a 10-byte head) is larger than ``chunk_bytes`` is cut into chunks of
    ``chunk_bytes`` bytes, each its own entry (format 3), up to ``RECORD_BYTES_MAX`` (65 MiB)
    in all. ``chunk_bytes``: 64 KiB to ``CHUNK_BYTES_MAX`` (4 MiB, the default); a writer whose
    client has smaller frames (``ClientConfig.max_frame_bytes``) cuts chunks that fit them.

    ``explicit_lac_interval_ms``: a writer whose appends are all acknowledged tells the
    bookies its last add confirmed at once, and then at most once per this interval, so that
    tailing readers see its last record too, not only once it appends the next one (a
    bookie learns an entry is confirmed from the next add otherwise). None: the client's
    ``ClientConfig.explicit_lac_interval_ms`` when that is set, else 10 ms; 0: never.
    """

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    digest: str = "crc32c"
    password: bytes = field(default=b"", repr=False)  # never shown (docs/security.md)
    roll_bytes: int = 256 * 1024 * 1024
    roll_age_ms: int = 0
    tail_poll_ms: int = 1_000
    metadata_retries_max: int = 20
    retention_age_ms: int = 0
    retention_bytes: int = 0
    retention_consumed: bool = False
    batching: bool = False
    batch_max_bytes: int = 128 * 1024
    batch_max_records: int = 1_000
    linger_ms: int = 1
    compression: str = "none"
    explicit_lac_interval_ms: int | None = None
    chunk_bytes: int = CHUNK_BYTES_MAX

    def __post_init__(self) -> None:
        check_quorum(self.ensemble_size, self.write_quorum, self.ack_quorum)
        check_positive_ints(self, "roll_bytes", "tail_poll_ms", "metadata_retries_max")
        check_non_negative_ints(
            self, "roll_age_ms", "retention_age_ms", "retention_bytes", "linger_ms"
        )
        check_int_in_range("batch_max_bytes", self.batch_max_bytes, 1, BATCH_BYTES_MAX)
        check_int_in_range("batch_max_records", self.batch_max_records, 1, BATCH_RECORDS_MAX)
        check_int_in_range("chunk_bytes", self.chunk_bytes, CHUNK_BYTES_MIN, CHUNK_BYTES_MAX)
        if not isinstance(self.batching, bool):
            raise ConfigError(f"batching: must be true or false, got {self.batching!r}")
        codec_id(self.compression)
        if self.explicit_lac_interval_ms is not None:
            check_non_negative_ints(self, "explicit_lac_interval_ms")


#: The settings a log stores with itself, in the order they are shown.
SETTING_NAMES = (
    "retention_age_ms",
    "retention_bytes",
    "retention_consumed",
    "roll_bytes",
    "roll_age_ms",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
)
_REPLICATION = ("ensemble_size", "write_quorum", "ack_quorum")
_POSITIVE = {"roll_bytes", *_REPLICATION}


@dataclass(frozen=True)
class LogSettings:
    """The settings a log stores with itself (the ``"config"`` object of its metadata node,
    :mod:`bkeeper.namedlog.core.log_metadata`); None: not set, the process's
    :class:`LogConfig` decides.
    Same names, units and meanings as ``LogConfig``'s fields (0: off / never, as there).

    ``ensemble_size``, ``write_quorum`` and ``ack_quorum`` are set together or not at all (a
    log's replication is one decision; half of it mixed with a process's other half could
    make an impossible ensemble). ``others``: settings this version does not know (written
    by a newer bkeeper), kept as JSON text and written back unchanged, otherwise ignored."""

    retention_age_ms: int | None = None
    retention_bytes: int | None = None
    retention_consumed: bool | None = None
    roll_bytes: int | None = None
    roll_age_ms: int | None = None
    ensemble_size: int | None = None
    write_quorum: int | None = None
    ack_quorum: int | None = None
    others: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name, value in self.items():
            if name == "retention_consumed":
                if not isinstance(value, bool):
                    raise ConfigError(f"{name}: must be true or false, got {value!r}")
            elif name in _POSITIVE:
                check_positive_ints(self, name)
            else:
                check_non_negative_ints(self, name)
        sizes = [getattr(self, name) for name in _REPLICATION]
        given = "/".join(map(str, sizes))
        if any(size is not None for size in sizes) and None in sizes:
            raise ConfigError(f"{'/'.join(_REPLICATION)}: set all three or none, got {given}")
        if None not in sizes and not sizes[0] >= sizes[1] >= sizes[2]:
            raise ConfigError(
                f"{'/'.join(_REPLICATION)}: need ensemble >= write quorum >= ack quorum, "
                f"got {given}"
            )

    def items(self) -> list[tuple[str, int | bool]]:
        """The settings that are set, in ``SETTING_NAMES`` order."""
        values = ((name, getattr(self, name)) for name in SETTING_NAMES)
        return [(name, value) for name, value in values if value is not None]

    @property
    def empty(self) -> bool:
        return not self.items() and not self.others

    def changed(self, **changes: int | bool | None) -> LogSettings:
        """These settings with ``changes`` (None: unset); a ``ConfigError`` naming the
        setting when a value is not allowed."""
        unknown = set(changes) - set(SETTING_NAMES)
        if unknown:
            raise ConfigError(f"no log setting named {sorted(unknown)[0]!r}")
        return replace(self, **changes)  # type: ignore[arg-type]

    def applied_to(self, config: LogConfig) -> LogConfig:
        """``config`` with this log's settings in place of its own."""
        changes: dict[str, Any] = dict(self.items())
        return replace(config, **changes) if changes else config

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(self.items())
        for name, text in self.others:
            doc[name] = json.loads(text)
        return doc

    @classmethod
    def from_json(cls, doc: object) -> LogSettings:
        """The settings of a stored ``"config"`` object; a ``ConfigError`` naming the bad
        setting (``config.roll_bytes: must be a positive integer, got -1``)."""
        if not isinstance(doc, dict):
            raise ConfigError(f"config: must be a JSON object, got {doc!r}")
        known = {f.name for f in fields(cls)} - {"others"}
        given = {name: value for name, value in doc.items() if name in known}
        others = tuple(sorted((str(k), json.dumps(v)) for k, v in doc.items() if k not in known))
        try:
            return cls(**given, others=others)
        except ConfigError as exc:
            raise ConfigError(f"config.{exc}") from None

    @classmethod
    def salvaged(cls, doc: object) -> tuple[LogSettings, list[str]]:
        """The settings of a stored ``"config"`` object without the wrong ones, and the
        names of those left out (so that a change to one setting keeps the others)."""
        if not isinstance(doc, dict):
            return cls(), ["config"]
        try:
            return cls.from_json(doc), []
        except ConfigError:
            pass
        kept: dict[str, Any] = {}
        dropped: list[str] = []
        groups = [(n,) for n in SETTING_NAMES if n not in _REPLICATION] + [_REPLICATION]
        for group in groups:
            part = {name: doc[name] for name in group if name in doc}
            try:
                cls.from_json(part)
                kept.update(part)
            except ConfigError:
                dropped += list(part)
        others = {k: v for k, v in doc.items() if k not in SETTING_NAMES}
        return cls.from_json({**kept, **others}), dropped
