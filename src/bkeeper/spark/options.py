"""The options of the ``bkeeper`` Spark data source, parsed and validated (pure code).

Spark hands a data source a case-insensitive dict of strings; :func:`source_options` and
:func:`sink_options` turn it into frozen dataclasses, raising :class:`ConfigError` naming the
option and what is wrong. docs/spark.md lists every option; this module is the truth.

Positions in options and in streaming offsets are JSON: ``{"<log>": {"ledger": L, "entry":
E}}`` where ``(L, E)`` is the next record to read, or ``{"ledger": L, "entry": E, "index": I}``
for record ``I`` of the record batch in entry ``E`` (offsets carry ``index`` only when it is
not 0, so those of single-record entries read as before); a log may also map to
``"earliest"`` or ``"latest"``.

Security (docs/spark.md, Security): the options ``tls.caFile``, ``tls.certFile``,
``tls.keyFile``, ``tls.hostnameCheck`` and ``auth.tokenFile`` name the client's credential
files; each one not given is taken from the variable every ``bkeeper`` command reads
(``BKEEPER_TLS_CA``, ``BKEEPER_TLS_CERT``, ``BKEEPER_TLS_KEY``,
``BKEEPER_TLS_NO_HOSTNAME_CHECK``, ``BKEEPER_AUTH_TOKEN_FILE``), and ``metadata`` from
``BKEEPER_METADATA``, in the environment of the process that parses the options (the
driver's). Only the paths travel to executors, in the ``client`` settings
(:class:`~bkeeper.client.credentials.ClientCredentials`); :func:`client_config` reads the
files where the client is made, so they must exist there.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import EARLIEST, LATEST, LogConfig
from bkeeper.namedlog.core import check_log_name, check_subscription_name
from bkeeper.spark.client_options import CREDENTIALS, client_config, client_settings, metadata_uri
from bkeeper.spark.names import READ_OPTIONS, WRITE_OPTIONS, check_names
from bkeeper.spark.offsets import (
    PositionSpec,
    offset_from_positions,
    positions_from_offset,
    start_end,
    timestamps,
)
from bkeeper.spark.option_values import bool_option, duration_ms, option_text, positive_int

__all__ = [
    "CREDENTIALS",
    "MAX_BYTES_PER_SPLIT_DEFAULT",
    "MAX_ENTRIES_PER_SPLIT_DEFAULT",
    "PositionSpec",
    "SinkOptions",
    "SourceOptions",
    "client_config",
    "offset_from_positions",
    "positions_from_offset",
    "sink_options",
    "source_options",
    "spark_schema",
]

MAX_ENTRIES_PER_SPLIT_DEFAULT = 100_000
#: Bytes of entries per Spark task, about (entries hold one record or a record batch).
MAX_BYTES_PER_SPLIT_DEFAULT = 32 * 1024 * 1024
#: Rows per Arrow record batch a read task yields.
ROWS_PER_BATCH_DEFAULT = 10_000
#: How long a stream waits for ``minEntriesPerTrigger`` entries (or ``minRecordsPerTrigger``
#: records) before it reads fewer.
MAX_TRIGGER_DELAY_MS_DEFAULT = 15 * 60 * 1000
#: ``minPartitions`` at most (Spark tasks of one read or micro-batch).
MIN_PARTITIONS_MAX = 100_000
#: Logs one query may read (a ``logPattern`` matching more is refused).
LOGS_MAX = 10_000


@dataclass(frozen=True)
class SourceOptions:
    """What a read (batch or streaming) reads, from where to where, and how."""

    metadata: str
    logs: tuple[str, ...] = ()
    log_pattern: str | None = None
    starting: Mapping[str, PositionSpec] = field(default_factory=dict)
    starting_default: str = EARLIEST
    starting_timestamp_ms: int | None = None
    #: Per-log ``startingTimestamp`` (a JSON object); wins over ``starting_timestamp_ms``.
    starting_timestamps: Mapping[str, int] = field(default_factory=dict)
    ending: Mapping[str, PositionSpec] = field(default_factory=dict)
    #: ``endingTimestamp`` (batch): every log, or per log; wins over ``ending``.
    ending_timestamp_ms: int | None = None
    ending_timestamps: Mapping[str, int] = field(default_factory=dict)
    max_entries_per_split: int = MAX_ENTRIES_PER_SPLIT_DEFAULT
    max_bytes_per_split: int = MAX_BYTES_PER_SPLIT_DEFAULT
    max_entries_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    #: ``maxRecordsPerTrigger``: records (not entries) per micro-batch, exactly.
    max_records_per_trigger: int | None = None
    #: ``minRecordsPerTrigger``: wait (up to ``maxTriggerDelay``) for this many records.
    min_records_per_trigger: int | None = None
    #: ``minPartitions``: at least this many read tasks (spans split), up to one per entry.
    min_partitions: int | None = None
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY_MS_DEFAULT
    rows_per_batch: int = ROWS_PER_BATCH_DEFAULT
    fail_on_data_loss: bool = True
    filter_pushdown: bool = False
    include_properties: bool = False
    password: bytes = field(default=b"", repr=False)  # never shown (docs/security.md)
    client: tuple[tuple[str, Any], ...] = ()
    #: A subscription of each log the stream reads: it starts from the subscription's
    #: position, and each committed micro-batch is recorded there (retention by consumption).
    subscription: str | None = None

    def client_config(self) -> ClientConfig:
        return client_config(self.client)

    def matches(self, name: str) -> bool:
        if self.log_pattern is not None:
            return re.fullmatch(self.log_pattern, name) is not None
        return name in self.logs


@dataclass(frozen=True)
class SinkOptions:
    """Where a write goes and how its ledgers are made."""

    metadata: str
    log: str | None = None
    #: None: the default, true except for a stream restarted from its checkpoint (see
    #: ``bkeeper.spark.sink``).
    create_log: bool | None = None
    log_config: LogConfig = field(default_factory=LogConfig)
    writer_id: str | None = None
    client: tuple[tuple[str, Any], ...] = ()

    def client_config(self) -> ClientConfig:
        return client_config(self.client)


def spark_schema(include_properties: bool) -> str:
    """The read schema as Spark DDL (``bkeeper.spark.arrow`` has its Arrow form)."""
    ddl = (
        "log string, ledger bigint, entry bigint, batch_index int, timestamp timestamp, "
        "key binary, payload binary"
    )
    return ddl + (", properties map<string,binary>" if include_properties else "")


def _driver_environment() -> Mapping[str, str]:
    """The variables of the process validating the options (Spark's driver). The data source
    is an entry point like the ``bkeeper`` command: Spark hands it options only, so the client
    variables a user's shell holds (``BKEEPER_METADATA``, ``BKEEPER_TLS_*``,
    ``BKEEPER_AUTH_TOKEN_FILE``) are read here, as the command reads them (module doc)."""
    return os.environ


def source_options(
    options: Mapping[str, str],
    *,
    streaming: bool | None,
    environ: Mapping[str, str] | None = None,
) -> SourceOptions:
    """Validate the options of a read; ``streaming`` selects the defaults of a stream (None:
    check what holds for both kinds of read, as ``load()`` must before Spark says which).
    ``environ`` (default: this process's) supplies what the options leave out (module doc)."""
    check_names(options, READ_OPTIONS, "read")
    environ = _driver_environment() if environ is None else environ
    metadata = metadata_uri(options, environ)
    logs_text, pattern = option_text(options, "log"), option_text(options, "logPattern")
    if (logs_text is None) == (pattern is None):
        raise ConfigError(
            "set exactly one of the options log (comma-separated names) and "
            "logPattern (a regular expression over log names)"
        )
    logs: tuple[str, ...] = ()
    if logs_text is not None:
        logs = tuple(check_log_name(x.strip()) for x in logs_text.split(",") if x.strip())
        if not logs:
            raise ConfigError("option log: name at least one log")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"option logPattern: {pattern!r} is not a regex ({exc})") from None
    example = logs[0] if logs else "events"
    starting, starting_default = start_end(
        options,
        "startingPosition",
        streaming,
        (EARLIEST,) if streaming is False else (EARLIEST, LATEST),
        example,
    )
    ending, ending_default = start_end(options, "endingPosition", streaming, (LATEST,), example)
    for name in ("endingPosition", "endingTimestamp"):
        if streaming and option_text(options, name) is not None:
            raise ConfigError(f"option {name} is for batch reads only")
    if ending_default not in (None, LATEST):  # pragma: no cover - start_end allows latest only
        raise ConfigError("option endingPosition: use latest or positions")
    for log, spec in ending.items():
        if spec == EARLIEST:
            raise ConfigError(f"option endingPosition: log {log!r} cannot end at earliest")
    starting_timestamp_ms, starting_timestamps = timestamps(options, "startingTimestamp")
    ending_timestamp_ms, ending_timestamps = timestamps(options, "endingTimestamp")
    if logs:  # named logs: a position or a timestamp of another log is a mistake now
        named = (
            ("startingPosition", starting),
            ("startingTimestamp", starting_timestamps),
            ("endingPosition", ending),
            ("endingTimestamp", ending_timestamps),
        )
        for option, per_log in named:
            unknown = sorted(set(per_log) - set(logs))
            if unknown:
                raise ConfigError(f"option {option} names logs this read does not cover: {unknown}")
    password = option_text(options, "password") or ""
    split = positive_int(options, "maxEntriesPerSplit", MAX_ENTRIES_PER_SPLIT_DEFAULT)
    split_bytes = positive_int(options, "maxBytesPerSplit", None) or MAX_BYTES_PER_SPLIT_DEFAULT
    rows = positive_int(options, "rowsPerBatch", ROWS_PER_BATCH_DEFAULT)
    per_trigger = positive_int(options, "maxEntriesPerTrigger", None)
    min_per_trigger = positive_int(options, "minEntriesPerTrigger", None)
    max_records = positive_int(options, "maxRecordsPerTrigger", None)
    min_records = positive_int(options, "minRecordsPerTrigger", None)
    min_partitions = positive_int(options, "minPartitions", None)
    if min_partitions is not None and min_partitions > MIN_PARTITIONS_MAX:
        raise ConfigError(
            f"option minPartitions: at most {MIN_PARTITIONS_MAX}, got {min_partitions}"
        )
    delay_ms = duration_ms(options, "maxTriggerDelay", MAX_TRIGGER_DELAY_MS_DEFAULT)
    subscription = option_text(options, "subscription")
    if subscription is not None:
        check_subscription_name(subscription)
    if streaming is False:
        for name in (
            "maxEntriesPerTrigger",
            "minEntriesPerTrigger",
            "maxRecordsPerTrigger",
            "minRecordsPerTrigger",
            "maxTriggerDelay",
            "subscription",
        ):
            if option_text(options, name) is not None:
                raise ConfigError(f"option {name} is for streaming reads only")
    if per_trigger and min_per_trigger and min_per_trigger > per_trigger:
        raise ConfigError(
            f"option minEntriesPerTrigger ({min_per_trigger}) exceeds maxEntriesPerTrigger "
            f"({per_trigger})"
        )
    for kind in ("max", "min"):
        if option_text(options, f"{kind}EntriesPerTrigger") and option_text(
            options, f"{kind}RecordsPerTrigger"
        ):
            raise ConfigError(
                f"options {kind}EntriesPerTrigger and {kind}RecordsPerTrigger: set one "
                f"(records count what a batch holds; entries hold a record or a batch of them)"
            )
    if max_records and min_records and min_records > max_records:
        raise ConfigError(
            f"option minRecordsPerTrigger ({min_records}) exceeds maxRecordsPerTrigger "
            f"({max_records})"
        )
    assert split is not None and rows is not None
    return SourceOptions(
        metadata=metadata,
        logs=logs,
        log_pattern=pattern,
        starting=starting,
        starting_default=starting_default or (LATEST if streaming else EARLIEST),
        starting_timestamp_ms=starting_timestamp_ms,
        starting_timestamps=starting_timestamps,
        ending=ending,
        ending_timestamp_ms=ending_timestamp_ms,
        ending_timestamps=ending_timestamps,
        max_entries_per_split=split,
        max_bytes_per_split=split_bytes,
        max_entries_per_trigger=per_trigger,
        min_entries_per_trigger=min_per_trigger,
        max_records_per_trigger=max_records,
        min_records_per_trigger=min_records,
        min_partitions=min_partitions,
        max_trigger_delay_ms=delay_ms,
        rows_per_batch=rows,
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
        filter_pushdown=bool_option(options, "filterPushdown", False),
        include_properties=bool_option(options, "includeProperties", False),
        password=password.encode(),
        client=client_settings(options, environ),
        subscription=subscription,
    )


def sink_options(
    options: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> SinkOptions:
    """Validate the options of a write (batch or streaming); ``environ`` as for
    :func:`source_options`."""
    check_names(options, WRITE_OPTIONS, "write")
    environ = _driver_environment() if environ is None else environ
    metadata = metadata_uri(options, environ)
    log = option_text(options, "log")
    if log is not None:
        check_log_name(log.strip())
        log = log.strip()
    quorum = {
        "ensemble_size": positive_int(options, "ensembleSize", 3),
        "write_quorum": positive_int(options, "writeQuorum", 3),
        "ack_quorum": positive_int(options, "ackQuorum", 2),
    }
    digest = (option_text(options, "digest") or "crc32c").lower()
    if digest not in ("crc32", "crc32c", "hmac", "dummy"):
        raise ConfigError(f"option digest: {digest!r} is not crc32, crc32c, hmac or dummy")
    roll = positive_int(options, "rollBytes", LogConfig.roll_bytes)
    try:
        log_config = LogConfig(
            **quorum,  # type: ignore[arg-type]
            digest=digest,
            password=(option_text(options, "password") or "").encode(),
            roll_bytes=roll,  # type: ignore[arg-type]
            **_sink_batching(options),
            # A task's ledgers join the log sealed, at the commit: no tailer reads them open.
            explicit_lac_interval_ms=0,
        )
    except ConfigError as exc:  # a batching field: name the option
        text = str(exc)
        for field_name, option in _SINK_BATCHING_OPTIONS.items():
            text = text.replace(field_name, f"option {option}", 1)
        raise ConfigError(text) from None
    writer_id = option_text(options, "writerId")
    if writer_id is None and (checkpoint := option_text(options, "checkpointLocation")):
        # A restarted query keeps its checkpoint, so it keeps its writer id too.
        writer_id = "checkpoint:" + hashlib.sha256(checkpoint.encode()).hexdigest()[:32]
    if writer_id is not None and not 0 < len(writer_id) <= 256:
        raise ConfigError("option writerId: use 1-256 characters")
    return SinkOptions(
        metadata=metadata,
        log=log,
        create_log=None
        if option_text(options, "createLog") is None
        else bool_option(options, "createLog", True),
        log_config=log_config,
        writer_id=writer_id,
        client=client_settings(options, environ),
    )


def _sink_batching(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``LogConfig`` batching fields of options ``batching`` (default true: see
    docs/spark.md), ``batchMaxRecords``, ``batchMaxBytes`` and ``compression``."""
    chosen: dict[str, Any] = {"batching": bool_option(options, "batching", True)}
    for option, name in (
        ("batchMaxRecords", "batch_max_records"),
        ("batchMaxBytes", "batch_max_bytes"),
    ):
        value = positive_int(options, option, None)
        if value is not None:
            chosen[name] = value
    compression = option_text(options, "compression")
    if compression is not None:
        chosen["compression"] = compression.strip().lower()
    if not chosen["batching"] and len(chosen) > 1:
        raise ConfigError(
            "options batchMaxRecords, batchMaxBytes and compression need batching=true"
        )
    return chosen


_SINK_BATCHING_OPTIONS = {
    "batch_max_records": "batchMaxRecords",
    "batch_max_bytes": "batchMaxBytes",
    "compression": "compression",
}
