"""The metadata of named logs: the ordered ledger list of each log, under compare-and-set.

Each log is one node ``<logs root>/<name>`` of the cluster's metadata store, beside (not
inside) the BookKeeper ledger tree so that BookKeeper tools never see it: for a cluster at
``/ledgers`` the logs live under ``/bkeeper/logs``, for ``/a/ledgers`` under
``/a/bkeeper/logs``. The node holds UTF-8 JSON, readable with ``bkeeper meta show``::

    {"format": 1, "ctime_ms": 1700000000000,
     "ledgers": [{"id": 12, "ctime_ms": 1700000000000}, ...],
     "truncated_before": [12, 0],
     "commits": {"<writer id>": {"batch": 7, "time_ms": 1700000000000}},
     "term": 42}

``ledgers`` is in log order with strictly increasing ids. ``truncated_before`` is the
position given to the last ``truncate`` (records before it are gone or going). ``commits``
(optional) holds, per idempotent writer (a Spark streaming query, say), the last batch id
whose ledgers were appended, written in the same compare-and-set as those ledgers, so that a
replayed batch is recognised; at most ``COMMITS_MAX`` writers are remembered (the least
recently committed is forgotten first).

``term`` (optional) is the leadership term of the newest writer that opened the log with one
(:meth:`NamedLog.open_writer <bkeeper.namedlog.logs.NamedLog.open_writer>`'s ``term``, for
example a leader election node's sequence number): a writer asking with an older term is
refused (``WriterTermError``) before it fences anything. Metadata written before terms
existed has none and reads as ``None``; the format number stays 1 (a reader that does not
know ``term`` ignores it, but a bkeeper from before terms that rewrites the list drops it:
do not mix such writers with termed ones on one log).

``config`` (optional) holds the log's own settings (:class:`~bkeeper.namedlog.core.config.
LogSettings`): any of ``retention_age_ms``, ``retention_bytes``, ``retention_consumed``,
``roll_bytes``, ``roll_age_ms`` and ``ensemble_size``/``write_quorum``/``ack_quorum``
(the three together), with ``LogConfig``'s units and meanings, for example
``"config": {"retention_consumed": true, "roll_age_ms": 3600000}``. A setting not there is
not set (the writing process's ``LogConfig`` decides); metadata without ``config`` has none.
It is checked when it is used (:meth:`LogMetadata.settings`: a writer opening, ``bkeeper log
config``), not by every read, so that a bad value written by hand stops writers with an error
naming the log and the setting but never readers, and can be fixed with ``bkeeper log
config``. Keys this version does not know are kept and written back. The format stays 1, as
for ``term`` (a bkeeper from before ``config`` that rewrites the list drops it).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from bkeeper.common.errors import (
    ConfigError,
    ProtocolError,
)
from bkeeper.namedlog.core.config import LogSettings
from bkeeper.namedlog.core.records import Position

__all__ = [
    "COMMITS_MAX",
    "LogLedger",
    "LogMetadata",
    "WriterCommit",
    "check_log_name",
    "check_writer_id",
    "logs_root",
]

FORMAT = 1
#: Idempotent writers remembered per log (see ``commits``).
COMMITS_MAX = 1_000
#: Longest writer id, in characters.
WRITER_ID_CHARS_MAX = 256
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: The rule of log names, as errors state it.
LOG_NAME_RULE = (
    "use 1 to 200 ASCII letters (A-Z, a-z), digits, '.', '_' or '-', starting with a "
    "letter or digit"
)


def check_log_name(name: str) -> str:
    """``name`` if it is a log name, else a ``ConfigError`` stating the rule: 1 to 200 ASCII
    letters, digits, '.', '_' or '-', the first a letter or digit (so never '.' or '..', nor
    a name a shell takes for an option). Kafka's topic rule, which Pulsar's topic names and
    Spark's options carry as they are; docs/logs.md says why not Unicode letters."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"log name {name!r}: {LOG_NAME_RULE}")
    return name


def logs_root(ledgers_root: str) -> str:
    """Where named logs live for a cluster whose ledgers live at ``ledgers_root``."""
    parent = ledgers_root.rstrip("/").rpartition("/")[0]
    return f"{parent}/bkeeper/logs"


@dataclass(frozen=True)
class LogLedger:
    ledger_id: int
    ctime_ms: int


@dataclass(frozen=True)
class WriterCommit:
    """The last batch an idempotent writer appended to the log, and when."""

    writer_id: str
    batch_id: int
    time_ms: int


def check_writer_id(writer_id: str) -> str:
    if not isinstance(writer_id, str) or not 0 < len(writer_id) <= WRITER_ID_CHARS_MAX:
        raise ConfigError(f"writer id {writer_id!r}: use 1-{WRITER_ID_CHARS_MAX} characters")
    return writer_id


@dataclass(frozen=True)
class LogMetadata:
    ctime_ms: int
    ledgers: tuple[LogLedger, ...] = ()
    truncated_before: Position | None = None
    commits: tuple[WriterCommit, ...] = ()
    #: The leadership term of the newest writer that opened the log with one (None: never).
    writer_term: int | None = None
    #: The log's own settings as stored (``"config"``, compact JSON text; None: none).
    config_text: str | None = None

    def settings(self, name: str = "?") -> LogSettings:
        """The log's own settings; a ``ConfigError`` naming the log and the bad setting."""
        if self.config_text is None:
            return LogSettings()
        try:
            return LogSettings.from_json(json.loads(self.config_text))
        except ConfigError as exc:
            raise ConfigError(
                f"log {name!r}: the settings stored with it are wrong: {exc} (change or unset "
                f"it with bkeeper log config {name})"
            ) from None

    def settings_salvaged(self) -> tuple[LogSettings, list[str]]:
        """The log's own settings without any stored wrongly, and the names of those."""
        if self.config_text is None:
            return LogSettings(), []
        return LogSettings.salvaged(json.loads(self.config_text))

    def with_settings(self, settings: LogSettings) -> LogMetadata:
        """The metadata holding ``settings`` as the log's own (none set: no ``config``)."""
        text = None if settings.empty else _compact(settings.to_json())
        return replace(self, config_text=text)

    def with_term(self, term: int) -> LogMetadata:
        """The metadata recording ``term`` as the log's writer term."""
        return replace(self, writer_term=term)

    def with_ledger(self, ledger_id: int, ctime_ms: int) -> LogMetadata:
        if self.ledgers and ledger_id <= self.ledgers[-1].ledger_id:
            raise ConfigError(
                f"ledger {ledger_id} cannot follow ledger {self.ledgers[-1].ledger_id}"
            )
        return replace(self, ledgers=(*self.ledgers, LogLedger(ledger_id, ctime_ms)))

    def with_ledgers(
        self, ledgers: tuple[LogLedger, ...], commit: WriterCommit | None = None
    ) -> LogMetadata:
        """The metadata with ``ledgers`` appended (ids increasing) and ``commit`` recorded."""
        meta = self
        for ledger in ledgers:
            meta = meta.with_ledger(ledger.ledger_id, ledger.ctime_ms)
        if commit is None:
            return meta
        check_writer_id(commit.writer_id)
        others = [c for c in meta.commits if c.writer_id != commit.writer_id]
        others.sort(key=lambda c: c.time_ms)
        return replace(meta, commits=(*others[-(COMMITS_MAX - 1) :], commit))

    def last_batch(self, writer_id: str) -> int | None:
        """The last batch id ``writer_id`` committed (None: none remembered)."""
        for commit in self.commits:
            if commit.writer_id == writer_id:
                return commit.batch_id
        return None

    def truncated(self, before: Position) -> tuple[LogMetadata, list[int]]:
        """The metadata without the ledgers wholly before ``before``, and their ids.

        The last ledger is always kept (the writer may be appending to it)."""
        keep_from = 0
        for index, ledger in enumerate(self.ledgers[:-1]):
            if ledger.ledger_id < before.ledger_id:
                keep_from = index + 1
        dropped = [ledger.ledger_id for ledger in self.ledgers[:keep_from]]
        mark = before if self.truncated_before is None else max(before, self.truncated_before)
        return replace(self, ledgers=self.ledgers[keep_from:], truncated_before=mark), dropped

    def index_of(self, ledger_id: int) -> int | None:
        for index, ledger in enumerate(self.ledgers):
            if ledger.ledger_id == ledger_id:
                return index
        return None

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "ctime_ms": self.ctime_ms,
            "ledgers": [{"id": x.ledger_id, "ctime_ms": x.ctime_ms} for x in self.ledgers],
        }
        if self.truncated_before is not None:
            doc["truncated_before"] = list(self.truncated_before)
        if self.commits:
            doc["commits"] = {
                c.writer_id: {"batch": c.batch_id, "time_ms": c.time_ms} for c in self.commits
            }
        if self.writer_term is not None:
            doc["term"] = self.writer_term
        if self.config_text is not None:
            doc["config"] = json.loads(self.config_text)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, name: str = "?") -> LogMetadata:
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r} is not {FORMAT}")
            ledgers = tuple(LogLedger(int(x["id"]), int(x["ctime_ms"])) for x in doc["ledgers"])
            mark = doc.get("truncated_before")
            truncated = Position(int(mark[0]), int(mark[1])) if mark is not None else None
            commits = tuple(
                WriterCommit(str(writer), int(c["batch"]), int(c["time_ms"]))
                for writer, c in doc.get("commits", {}).items()
            )
            term = doc.get("term")
            writer_term = int(term) if term is not None else None
            config = doc.get("config")
            config_text = _compact(config) if config is not None else None
            meta = cls(int(doc["ctime_ms"]), ledgers, truncated, commits, writer_term, config_text)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ProtocolError(f"metadata of log {name!r} is unreadable: {exc}") from exc
        ids = [x.ledger_id for x in ledgers]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            raise ProtocolError(f"metadata of log {name!r}: ledger ids are not increasing")
        return meta


def _compact(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"))
