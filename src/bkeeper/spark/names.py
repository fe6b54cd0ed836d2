"""The names of the ``bkeeper`` data source's options, and the check that refuses any other
(pure code).

Spark passes every ``.option(...)`` through, lower-cased, and a name a data source does not
read is silently ignored: Kafka's ``maxOffsetsPerTrigger`` gave a data engineer one batch of
1.5M rows, and a typo (``maxEntriesPerSplitt``) changed nothing without a word. So each
option must be known to the read or the write it is given to; an unknown one is refused
naming the closest known name, or, for a Kafka option (:data:`KAFKA_NAMES`), bkeeper's
name and how to use it, or why bkeeper has none.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError
from bkeeper.common.messages import did_you_mean

__all__ = [
    "CLIENT_PREFIX",
    "KAFKA_NAMES",
    "KAFKA_PREFIX",
    "KafkaName",
    "READ_OPTIONS",
    "SPARK_OPTIONS",
    "WRITE_OPTIONS",
    "check_names",
    "kafka_name",
]

#: Options of a read, batch or streaming (docs/spark.md).
READ_OPTIONS = (
    "metadata",
    "log",
    "logPattern",
    "startingPosition",
    "startingTimestamp",
    "endingPosition",
    "endingTimestamp",
    "maxEntriesPerSplit",
    "maxBytesPerSplit",
    "maxEntriesPerTrigger",
    "minEntriesPerTrigger",
    "maxRecordsPerTrigger",
    "minRecordsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "rowsPerBatch",
    "failOnDataLoss",
    "filterPushdown",
    "includeProperties",
    "password",
    "subscription",
    "tls.caFile",
    "tls.certFile",
    "tls.keyFile",
    "tls.hostnameCheck",
    "auth.tokenFile",
)
#: Options of a write, batch or streaming (docs/spark.md).
WRITE_OPTIONS = (
    "metadata",
    "log",
    "createLog",
    "ensembleSize",
    "writeQuorum",
    "ackQuorum",
    "digest",
    "password",
    "rollBytes",
    "writerId",
    "batching",
    "batchMaxRecords",
    "batchMaxBytes",
    "compression",
    "tls.caFile",
    "tls.certFile",
    "tls.keyFile",
    "tls.hostnameCheck",
    "auth.tokenFile",
)
#: Options Spark itself sets or passes on: ``load(path)``/``save(path)`` and a streaming
#: query's checkpoint and name.
SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")
#: ``client.<ClientConfig field>``: client settings (checked by the options' parsers).
CLIENT_PREFIX = "client."


@dataclass(frozen=True)
class KafkaName:
    """A Kafka connector option (``format("kafka")``) and what bkeeper has for it.

    ``ours`` is bkeeper's option (``client.<setting>`` for a ledger client setting), the same
    name when bkeeper reads Kafka's, or ``None`` when there is none; ``how`` says how to use
    ours in one line, or why there is none. ``kind`` is where Kafka takes it: ``read``
    (its source), ``write`` (its sink) or ``both``. docs/spark.md, "Coming from Kafka", has
    this table (tests/spark/test_kafka_names.py checks that the two agree).
    """

    kafka: str
    kind: str
    ours: str | None
    how: str = ""


_NO_SECRET = "keys are PEM files, so no option holds a secret (docs/spark.md, Security)"
_NO_SERDE = "records are bytes: key and payload are binary columns; cast or parse them in Spark"

#: Every Kafka option a user coming from Kafka may type, from Spark's Kafka integration guide
#: (source, sink, and the ``kafka.*`` client settings it names or users set most).
KAFKA_NAMES = (
    KafkaName("subscribe", "read", "log"),
    KafkaName("assign", "read", "log", "a log has no partitions: name the logs"),
    KafkaName("subscribePattern", "read", "logPattern", "a regular expression over log names"),
    KafkaName("kafka.bootstrap.servers", "both", "metadata",
              "the cluster's metadata URI, zk://host:port/ledgers, not the bookies"),
    KafkaName("startingOffsets", "read", "startingPosition"),
    KafkaName("endingOffsets", "read", "endingPosition"),
    KafkaName("startingOffsetsByTimestamp", "read", "startingTimestamp",
              "one value, or a JSON object of log name to milliseconds"),
    KafkaName("endingOffsetsByTimestamp", "read", "endingTimestamp",
              "one value, or a JSON object of log name to milliseconds"),
    KafkaName("startingTimestamp", "read", "startingTimestamp"),
    KafkaName("endingTimestamp", "read", "endingTimestamp"),
    KafkaName("startingOffsetsByTimestampStrategy", "read", None,
              "a log with no record at or after the timestamp starts at its end, never an "
              "error (Kafka's strategy latest)"),
    KafkaName("failOnDataLoss", "read", "failOnDataLoss"),
    KafkaName("maxOffsetsPerTrigger", "read", "maxRecordsPerTrigger"),
    KafkaName("minOffsetsPerTrigger", "read", "minRecordsPerTrigger"),
    KafkaName("maxTriggerDelay", "read", "maxTriggerDelay"),
    KafkaName("minPartitions", "read", "minPartitions"),
    KafkaName("maxRecordsPerPartition", "read", "maxEntriesPerSplit",
              "counts entries (an entry may hold a record batch); maxBytesPerSplit bounds bytes"),
    KafkaName("kafkaConsumer.pollTimeoutMs", "read", "client.read_timeout_ms",
              "how long a task waits for a bookie's read response"),
    KafkaName("fetchOffset.numRetries", "read", "client.metadata_reconnect_timeout_ms",
              "positions are read from the metadata store, tried again for this long while "
              "its connection is re-established (a time, not a count)"),
    KafkaName("fetchOffset.retryIntervalMs", "read", None,
              "the metadata client tries again as soon as it has reconnected, for up to "
              "client.metadata_reconnect_timeout_ms"),
    KafkaName("groupIdPrefix", "read", "subscription",
              "a durable subscription of each log, where the stream's progress is recorded"),
    KafkaName("kafka.group.id", "read", "subscription",
              "a durable subscription of each log, where the stream's progress is recorded"),
    KafkaName("kafka.enable.auto.commit", "read", "subscription",
              "each completed micro-batch is recorded in the subscription"),
    KafkaName("kafka.auto.offset.reset", "read", "startingPosition"),
    KafkaName("includeHeaders", "read", "includeProperties",
              "adds the properties column: a record's properties are Kafka's headers"),
    KafkaName("includeHeaders", "write", None,
              "a properties column is written when the frame has one, with no option"),
    KafkaName("kafka.isolation.level", "read", None,
              "reads see only committed data: confirmed entries, and a Spark write's records "
              "once its job commits (Kafka's read_committed)"),
    KafkaName("kafka.max.poll.records", "read", "client.batch_read_entries_max",
              "entries per batch read from a bookie"),
    KafkaName("kafka.fetch.max.bytes", "read", "client.batch_read_bytes_max",
              "bytes per batch read from a bookie"),
    KafkaName("kafka.max.partition.fetch.bytes", "read", "client.batch_read_bytes_max",
              "bytes per batch read from a bookie"),
    KafkaName("kafka.request.timeout.ms", "read", "client.read_timeout_ms"),
    KafkaName("kafka.request.timeout.ms", "write", "client.add_timeout_ms"),
    KafkaName("kafka.key.deserializer", "read", None, _NO_SERDE),
    KafkaName("kafka.value.deserializer", "read", None, _NO_SERDE),
    KafkaName("kafka.interceptor.classes", "both", None,
              "no client plugins (Spark refuses it for Kafka too)"),
    KafkaName("kafka.security.protocol", "both", "tls.caFile",
              "TLS is on when tls.caFile is set; a token is auth.tokenFile"),
    KafkaName("kafka.ssl.truststore.location", "both", "tls.caFile", "PEM CA certificates"),
    KafkaName("kafka.ssl.keystore.location", "both", "tls.certFile",
              "a PEM certificate, with tls.keyFile, for mutual TLS"),
    KafkaName("kafka.ssl.truststore.password", "both", None, _NO_SECRET),
    KafkaName("kafka.ssl.keystore.password", "both", None, _NO_SECRET),
    KafkaName("kafka.ssl.key.password", "both", None, _NO_SECRET),
    KafkaName("kafka.ssl.truststore.type", "both", None, "PEM files only"),
    KafkaName("kafka.ssl.keystore.type", "both", None, "PEM files only"),
    KafkaName("kafka.ssl.endpoint.identification.algorithm", "both", "tls.hostnameCheck",
              "true (Kafka's https) or false (empty)"),
    KafkaName("kafka.sasl.mechanism", "both", "auth.tokenFile",
              "bkeeper authenticates with a token in a file (mode 600)"),
    KafkaName("kafka.sasl.jaas.config", "both", "auth.tokenFile",
              "a file holding the token, so no option holds a secret"),
    KafkaName("topic", "both", "log"),
    KafkaName("kafka.acks", "write", "ackQuorum",
              "bookies that acknowledge each entry (acks=all: ackQuorum equal to writeQuorum)"),
    KafkaName("kafka.transactional.id", "write", "writerId",
              "writes are exactly once without transactions: a stream's committed batches are "
              "recorded under writerId (default: from checkpointLocation)"),
    KafkaName("kafka.enable.idempotence", "write", None,
              "writes are exactly once already: a job's ledgers join the log at its commit"),
    KafkaName("kafka.compression.type", "write", "compression", "zstd or lz4 (or none)"),
    KafkaName("kafka.batch.size", "write", "batchMaxBytes", "bytes of records per batch"),
    KafkaName("kafka.linger.ms", "write", None,
              "nothing waits: a task packs its rows into batches as they come, and nothing is "
              "visible before the job commits"),
    KafkaName("kafka.partitioner.class", "write", None,
              "a log has no partitions: route rows to logs with a log column"),
    KafkaName("kafka.delivery.timeout.ms", "write", "client.add_timeout_ms"),
    KafkaName("kafka.retries", "write", "client.ensemble_changes_max",
              "a writer replaces a failed bookie instead of retrying"),
    KafkaName("kafka.key.serializer", "write", None, _NO_SERDE),
    KafkaName("kafka.value.serializer", "write", None, _NO_SERDE),
)  # fmt: skip
#: Kafka's prefix for its client's settings (those not in :data:`KAFKA_NAMES`).
KAFKA_PREFIX = "kafka."
_KAFKA_CLIENT = (
    "bkeeper takes no Kafka client settings: the ledger client's are client.<setting> "
    "(e.g. client.read_timeout_ms), TLS is tls.*, the token auth.tokenFile "
    "(docs/spark.md, Coming from Kafka)"
)


def kafka_name(key: str, what: str) -> KafkaName | None:
    """The Kafka option ``key`` names (any case), preferring the one for ``what``."""
    low = key.lower()
    found = [k for k in KAFKA_NAMES if k.kafka.lower() == low]
    for entry in found:
        if entry.kind in (what, "both"):
            return entry
    return found[0] if found else None


def check_names(options: Mapping[str, str], known: Iterable[str], what: str) -> None:
    """Refuse the first option (in name order) that is not in ``known``, a Spark option or a
    client setting. ``what`` (``read``, ``write``) names the other kind in the error when the
    option belongs to it: ``option rollBytes is for writes, not reads``."""
    allowed = tuple(known) + SPARK_OPTIONS
    lowered = {name.lower(): name for name in allowed}
    for key in sorted(options, key=str.lower):
        low = key.lower()
        if low in lowered or low.startswith(CLIENT_PREFIX):
            continue
        raise ConfigError(_unknown(key, allowed, what))


def _unknown(key: str, allowed: tuple[str, ...], what: str) -> str:
    low = key.lower()
    other = {"read": WRITE_OPTIONS, "write": READ_OPTIONS}.get(what, ())
    for name in other:
        if name.lower() == low:
            kind = "writes" if what == "read" else "reads"
            return f"option {name} is for {kind}, not {what}s"
    kafka = kafka_name(key, what)
    if kafka is not None:
        whose = "Kafka's name"
        if kafka.kind not in (what, "both"):
            whose += f", for {kafka.kind}s"
        if kafka.ours is None:
            return f"unknown option {kafka.kafka} ({whose}); bkeeper has none: {kafka.how}"
        how = f"; {kafka.how}" if kafka.how else ""
        return f"unknown option {kafka.kafka} ({whose}): bkeeper's is {kafka.ours}{how}"
    if low.startswith(KAFKA_PREFIX):
        return f"unknown option {low} (a Kafka client setting): {_KAFKA_CLIENT}"
    spelled = _spelled(key, allowed)
    close = did_you_mean(low, allowed)
    if close:
        return f"unknown option {spelled}: did you mean {close[0]}?"
    return f"unknown option {spelled}; the options are listed in docs/spark.md"


def _spelled(key: str, allowed: tuple[str, ...]) -> str:
    """The key as the user wrote it when Spark kept its case. Spark lower-cases option names
    before a Python data source sees them (pyspark's ``CaseInsensitiveDict``; the typed case
    reaches no Python process), so a lower-case key is shown in the casing of the known name
    it is closest to, else in camel case when it is made of the words of known names
    (``maxrowspersplit``: ``maxRowsPerSplit``), else as it came."""
    if key != key.lower():
        return key
    known = (*allowed, *READ_OPTIONS, *WRITE_OPTIONS, *(k.kafka for k in KAFKA_NAMES))
    words = _words(known)
    camel = ".".join(_camel(part, words) for part in key.split("."))
    if camel != key:
        return camel
    close = did_you_mean(key, known)
    return _recase(key, close[0]) if close else key


def _recase(key: str, model: str) -> str:
    """``key`` with the upper-case letters of ``model`` where the two agree."""
    matcher = difflib.SequenceMatcher(None, model.lower(), key)
    out = list(key)
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            if model[block.a + offset].isupper():
                out[block.b + offset] = model[block.a + offset]
    return "".join(out)


def _words(names: Iterable[str]) -> frozenset[str]:
    """The lower-case words of camel-case names (``maxEntriesPerSplit``: max, entries, ...)."""
    words: set[str] = set()
    for name in names:
        for part in name.split("."):
            words.update(w.lower() for w in re.findall(r"[a-z]+|[A-Z][a-z]*", part))
    return frozenset(w for w in words if len(w) > 1)


def _camel(part: str, words: frozenset[str]) -> str:
    """``part`` in camel case when it splits into ``words`` (fewest words), else as it is."""
    best: list[list[str] | None] = [[]] + [None] * len(part)
    for end in range(1, len(part) + 1):
        for start in range(end):
            before, current = best[start], best[end]
            if before is None or part[start:end] not in words:
                continue
            if current is None or len(before) + 1 < len(current):
                best[end] = [*before, part[start:end]]
    found = best[len(part)]
    if not found:
        return part
    return found[0] + "".join(w.capitalize() for w in found[1:])
