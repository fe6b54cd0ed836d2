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
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from bkeeper.client.config import ClientConfig
from bkeeper.client.credentials import (
    ENV_METADATA,
    ClientCredentials,
    credentials_from_environment,
)
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import EARLIEST, LATEST, LogConfig, Position
from bkeeper.namedlog.metadata import check_log_name
from bkeeper.namedlog.subscription import check_subscription_name
from bkeeper.spark.names import READ_OPTIONS, WRITE_OPTIONS, check_names

__all__ = [
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
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: ``minPartitions`` at most (Spark tasks of one read or micro-batch).
MIN_PARTITIONS_MAX = 100_000
#: Logs one query may read (a ``logPattern`` matching more is refused).
LOGS_MAX = 10_000

#: The ``client`` setting that carries the credentials' paths (not a ``ClientConfig`` field).
CREDENTIALS = "credentials"
#: The security options and the :class:`ClientCredentials` field each sets.
CREDENTIAL_OPTIONS = {
    "tls.caFile": "tls_ca_file",
    "tls.certFile": "tls_cert_file",
    "tls.keyFile": "tls_key_file",
    "auth.tokenFile": "auth_token_file",
}

#: Where to start or stop in one log: earliest, latest or an exact position.
PositionSpec = str | Position


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


def client_config(client: tuple[tuple[str, Any], ...]) -> ClientConfig:
    """The client of these ``client`` settings: its TLS and token are made here from the
    credentials' files (read now, so on the executor that makes the client)."""
    settings = dict(client)
    credentials = settings.pop(CREDENTIALS, None)
    if isinstance(credentials, ClientCredentials):
        settings["tls"] = credentials.tls()
        settings["auth"] = credentials.auth()
    return ClientConfig(**settings)


def spark_schema(include_properties: bool) -> str:
    """The read schema as Spark DDL (``bkeeper.spark.arrow`` has its Arrow form)."""
    ddl = (
        "log string, ledger bigint, entry bigint, batch_index int, timestamp timestamp, "
        "key binary, payload binary"
    )
    return ddl + (", properties map<string,binary>" if include_properties else "")


def _get(options: Mapping[str, str], name: str) -> str | None:
    """The option ``name`` whatever its case (Spark lower-cases keys; tests may not)."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return str(value)
    return None


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name}: {text!r} is not an integer") from None
    if value <= 0:
        raise ConfigError(f"option {name}: must be a positive integer, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name}: {text!r} is not true or false")


def _duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """A duration such as ``500ms``, ``30s``, ``15m``, ``1h`` (a bare number is ms)."""
    text = _get(options, name)
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*", text.lower())
    if match is None:
        raise ConfigError(f"option {name}: {text!r} is not a duration such as 500ms, 30s or 15m")
    return int(match.group(1)) * _DURATION_UNITS_MS[match.group(2) or "ms"]


def _metadata(options: Mapping[str, str], environ: Mapping[str, str]) -> str:
    uri = _get(options, "metadata")
    name = "option metadata"
    if uri is None and environ.get(ENV_METADATA):
        uri, name = environ[ENV_METADATA], f"{ENV_METADATA} (the driver's environment)"
    if not uri:
        raise ConfigError(
            f"option metadata is required (or {ENV_METADATA} in the driver's environment): "
            "the cluster's metadata URI, e.g. zk://127.0.0.1:2181/ledgers"
        )
    if not uri.startswith(("zk://", "memory://")):
        raise ConfigError(f"{name}: {uri!r} is not a zk:// or memory:// URI")
    return uri


def _credentials(options: Mapping[str, str], environ: Mapping[str, str]) -> ClientCredentials:
    """The security options, each one not given taken from the environment (module doc).
    An option given empty turns its variable off."""
    chosen: dict[str, Any] = {}
    named: list[tuple[str, str]] = []
    for option, field_name in CREDENTIAL_OPTIONS.items():
        value = _get(options, option)
        if value is not None:
            chosen[field_name] = value.strip()
            named.append((field_name, f"option {option}"))
    if _get(options, "tls.hostnameCheck") is not None:
        chosen["tls_hostname_check"] = _bool(options, "tls.hostnameCheck", True)
        named.append(("tls_hostname_check", "option tls.hostnameCheck"))
    given = ClientCredentials(**chosen, named_by=tuple(sorted(named)))
    return given.over(credentials_from_environment(environ)).check()


#: ``ClientConfig`` fields no ``client.<field>`` option sets.
_NOT_OPTIONS = ("racks", "protocol", "tls", "auth")


def _client(options: Mapping[str, str], environ: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """``client.<field>`` options, typed like the ``ClientConfig`` field they set."""
    known = {f.name: f for f in fields(ClientConfig)}
    chosen: list[tuple[str, Any]] = []
    for key, text in options.items():
        if not key.lower().startswith("client."):
            continue
        name = key[len("client.") :].lower()
        if name in ("tls", "auth"):
            raise ConfigError(
                f"option {key}: set TLS and the token with the options tls.caFile, "
                "tls.certFile, tls.keyFile, tls.hostnameCheck and auth.tokenFile"
            )
        if name not in known or name in _NOT_OPTIONS:
            simple = sorted(n for n in known if n not in _NOT_OPTIONS)
            raise ConfigError(f"option {key}: unknown client setting; use one of {simple}")
        if name == "placement":
            chosen.append((name, str(text)))
            continue
        try:
            chosen.append((name, int(text)))
        except ValueError:
            raise ConfigError(f"option {key}: {text!r} is not an integer") from None
    ClientConfig(**dict(chosen))  # validates ranges now, on the driver
    credentials = _credentials(options, environ)
    if not credentials.is_empty:
        chosen.append((CREDENTIALS, credentials))
    return tuple(sorted(chosen))


def _position(log: str, value: Any, option: str) -> PositionSpec:
    if value in (EARLIEST, LATEST):
        return str(value)
    if isinstance(value, dict) and set(value) in ({"ledger", "entry"}, _WITH_INDEX):
        parts = [value["ledger"], value["entry"], value.get("index", 0)]
        if all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            return Position(*parts)
    raise ConfigError(
        f'option {option}: position of log {log!r} must be "earliest", "latest" or '
        f'{{"ledger": L, "entry": E}} (or with "index": I, a record of a batch) with L, E, '
        f"I >= 0; got {json.dumps(value)}"
    )


_WITH_INDEX = {"ledger", "entry", "index"}


def positions_from_offset(
    text: str | Mapping[str, Any], option: str = "offset"
) -> dict[str, PositionSpec]:
    """Parse ``{"<log>": {"ledger": L, "entry": E} | "earliest" | "latest"}``."""
    doc: Any = text
    if isinstance(text, str):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"option {option}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"option {option}: must be a JSON object of log name to position")
    return {check_log_name(log): _position(log, value, option) for log, value in doc.items()}


def offset_from_positions(positions: Mapping[str, Position]) -> dict[str, Any]:
    """The JSON-able offset of exact positions (sorted by log name)."""
    return {log: _offset(position) for log, position in sorted(positions.items())}


def _offset(position: Position) -> dict[str, int]:
    offset = {"ledger": position.ledger_id, "entry": position.entry_id}
    if position.index:
        offset["index"] = position.index
    return offset


def _start_end(
    options: Mapping[str, str],
    name: str,
    streaming: bool | None,
    allow: tuple[str, ...],
    example_log: str = "events",
) -> tuple[dict[str, PositionSpec], str | None]:
    """Per-log positions and the default for logs not named."""
    text = _get(options, name)
    if text is None:
        return {}, None
    if text.strip().lower() in allow:
        return {}, text.strip().lower()
    if text.strip().lower() in (EARLIEST, LATEST):
        mode = "streaming" if streaming else "batch"
        raise ConfigError(f"option {name}: {text.strip()!r} is not allowed for {mode} reads")
    if not text.strip().startswith("{"):
        example = json.dumps({example_log: {"ledger": 12, "entry": 0}})
        raise ConfigError(
            f"option {name}: {text.strip()!r} is not {', '.join(allow)} or a JSON object of "
            f"log name to position such as {example}"
        )
    return positions_from_offset(text, name), None


def _timestamps(options: Mapping[str, str], name: str) -> tuple[int | None, dict[str, int]]:
    """One timestamp (ms since the epoch) for every log, or a JSON object of log name to
    timestamp (Kafka's ``startingOffsetsByTimestamp`` in one option)."""
    text = _get(options, name)
    if text is None:
        return None, {}
    what = "milliseconds since the epoch or a JSON object of log name to milliseconds"
    if text.strip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"option {name}: not valid JSON ({exc})") from None
        found = {}
        for log, value in doc.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"option {name}: log {log!r} maps to {value!r}, not {what}")
            found[check_log_name(log)] = value
        return None, found
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name}: {text!r} is not {what}") from None
    if value < 0:
        raise ConfigError(f"option {name}: must be >= 0")
    return value, {}


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
    metadata = _metadata(options, environ)
    logs_text, pattern = _get(options, "log"), _get(options, "logPattern")
    if (logs_text is None) == (pattern is None):
        raise ConfigError("set exactly one of the options log (comma-separated names) and "
                          "logPattern (a regular expression over log names)")  # fmt: skip
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
    starting, starting_default = _start_end(
        options,
        "startingPosition",
        streaming,
        (EARLIEST,) if streaming is False else (EARLIEST, LATEST),
        example,
    )
    ending, ending_default = _start_end(options, "endingPosition", streaming, (LATEST,), example)
    for name in ("endingPosition", "endingTimestamp"):
        if streaming and _get(options, name) is not None:
            raise ConfigError(f"option {name} is for batch reads only")
    if ending_default not in (None, LATEST):  # pragma: no cover - _start_end allows latest only
        raise ConfigError("option endingPosition: use latest or positions")
    for log, spec in ending.items():
        if spec == EARLIEST:
            raise ConfigError(f"option endingPosition: log {log!r} cannot end at earliest")
    starting_timestamp_ms, starting_timestamps = _timestamps(options, "startingTimestamp")
    ending_timestamp_ms, ending_timestamps = _timestamps(options, "endingTimestamp")
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
    password = _get(options, "password") or ""
    split = _positive_int(options, "maxEntriesPerSplit", MAX_ENTRIES_PER_SPLIT_DEFAULT)
    split_bytes = _positive_int(options, "maxBytesPerSplit", None) or MAX_BYTES_PER_SPLIT_DEFAULT
    rows = _positive_int(options, "rowsPerBatch", ROWS_PER_BATCH_DEFAULT)
    per_trigger = _positive_int(options, "maxEntriesPerTrigger", None)
    min_per_trigger = _positive_int(options, "minEntriesPerTrigger", None)
    max_records = _positive_int(options, "maxRecordsPerTrigger", None)
    min_records = _positive_int(options, "minRecordsPerTrigger", None)
    min_partitions = _positive_int(options, "minPartitions", None)
    if min_partitions is not None and min_partitions > MIN_PARTITIONS_MAX:
        raise ConfigError(
            f"option minPartitions: at most {MIN_PARTITIONS_MAX}, got {min_partitions}"
        )
    delay_ms = _duration_ms(options, "maxTriggerDelay", MAX_TRIGGER_DELAY_MS_DEFAULT)
    subscription = _get(options, "subscription")
    if subscription is not None:
        check_subscription_name(subscription)
    if streaming is False:
        for name in ("maxEntriesPerTrigger", "minEntriesPerTrigger", "maxRecordsPerTrigger",
                     "minRecordsPerTrigger", "maxTriggerDelay", "subscription"):  # fmt: skip
            if _get(options, name) is not None:
                raise ConfigError(f"option {name} is for streaming reads only")
    if per_trigger and min_per_trigger and min_per_trigger > per_trigger:
        raise ConfigError(
            f"option minEntriesPerTrigger ({min_per_trigger}) exceeds maxEntriesPerTrigger "
            f"({per_trigger})"
        )
    for kind in ("max", "min"):
        if _get(options, f"{kind}EntriesPerTrigger") and _get(options, f"{kind}RecordsPerTrigger"):
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
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        filter_pushdown=_bool(options, "filterPushdown", False),
        include_properties=_bool(options, "includeProperties", False),
        password=password.encode(),
        client=_client(options, environ),
        subscription=subscription,
    )


def sink_options(
    options: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> SinkOptions:
    """Validate the options of a write (batch or streaming); ``environ`` as for
    :func:`source_options`."""
    check_names(options, WRITE_OPTIONS, "write")
    environ = _driver_environment() if environ is None else environ
    metadata = _metadata(options, environ)
    log = _get(options, "log")
    if log is not None:
        check_log_name(log.strip())
        log = log.strip()
    quorum = {
        "ensemble_size": _positive_int(options, "ensembleSize", 3),
        "write_quorum": _positive_int(options, "writeQuorum", 3),
        "ack_quorum": _positive_int(options, "ackQuorum", 2),
    }
    digest = (_get(options, "digest") or "crc32c").lower()
    if digest not in ("crc32", "crc32c", "hmac", "dummy"):
        raise ConfigError(f"option digest: {digest!r} is not crc32, crc32c, hmac or dummy")
    roll = _positive_int(options, "rollBytes", LogConfig.roll_bytes)
    try:
        log_config = LogConfig(
            **quorum,  # type: ignore[arg-type]
            digest=digest,
            password=(_get(options, "password") or "").encode(),
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
    writer_id = _get(options, "writerId")
    if writer_id is None and (checkpoint := _get(options, "checkpointLocation")):
        # A restarted query keeps its checkpoint, so it keeps its writer id too.
        writer_id = "checkpoint:" + hashlib.sha256(checkpoint.encode()).hexdigest()[:32]
    if writer_id is not None and not 0 < len(writer_id) <= 256:
        raise ConfigError("option writerId: use 1-256 characters")
    return SinkOptions(
        metadata=metadata,
        log=log,
        create_log=None
        if _get(options, "createLog") is None
        else _bool(options, "createLog", True),
        log_config=log_config,
        writer_id=writer_id,
        client=_client(options, environ),
    )


def _sink_batching(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``LogConfig`` batching fields of options ``batching`` (default true: see
    docs/spark.md), ``batchMaxRecords``, ``batchMaxBytes`` and ``compression``."""
    chosen: dict[str, Any] = {"batching": _bool(options, "batching", True)}
    for option, name in (("batchMaxRecords", "batch_max_records"),
                         ("batchMaxBytes", "batch_max_bytes")):  # fmt: skip
        value = _positive_int(options, option, None)
        if value is not None:
            chosen[name] = value
    compression = _get(options, "compression")
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
