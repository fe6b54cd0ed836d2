"""The names of the ``bkeeper`` data source's options, and the check that refuses any other
(pure code).

Spark passes every ``.option(...)`` through, lower-cased, and a name a data source does not
read is silently ignored: Kafka's ``maxOffsetsPerTrigger`` gave a data engineer one batch of
1.5M rows, and a typo (``maxEntriesPerSplitt``) changed nothing without a word. So each
option must be known to the read or the write it is given to; an unknown one is refused
naming the closest known name, or bkeeper's name for a Kafka option.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from bkeeper.common.errors import ConfigError

__all__ = [
    "CLIENT_PREFIX",
    "READ_OPTIONS",
    "SPARK_OPTIONS",
    "WRITE_OPTIONS",
    "check_names",
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

#: Kafka source and sink options a user coming from Kafka will try, and bkeeper's names.
_KAFKA = {
    "subscribe": "log",
    "assign": "log",
    "topic": "log",
    "subscribePattern": "logPattern",
    "startingOffsets": "startingPosition",
    "endingOffsets": "endingPosition",
    "startingOffsetsByTimestamp": "startingTimestamp",
    "endingOffsetsByTimestamp": "endingTimestamp",
    "maxOffsetsPerTrigger": "maxEntriesPerTrigger",
    "minOffsetsPerTrigger": "minEntriesPerTrigger",
    "maxRecordsPerPartition": "maxEntriesPerSplit",
    "kafka.bootstrap.servers": "metadata",
    "kafka.ssl.truststore.location": "tls.caFile",
    "kafka.ssl.keystore.location": "tls.certFile",
    "kafka.ssl.endpoint.identification.algorithm": "tls.hostnameCheck",
    "kafka.sasl.jaas.config": "auth.tokenFile",
}
_KAFKA_LOWER = {name.lower(): (name, ours) for name, ours in _KAFKA.items()}


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
    if low in _KAFKA_LOWER:
        kafka, ours = _KAFKA_LOWER[low]
        return f"unknown option {kafka} (Kafka's name): bkeeper's is {ours}"
    spelled = _spelled(key, allowed)
    close = difflib.get_close_matches(low, [n.lower() for n in allowed], n=1, cutoff=0.75)
    if close:
        match = next(n for n in allowed if n.lower() == close[0])
        return f"unknown option {spelled}: did you mean {match}?"
    return f"unknown option {spelled}; the options are listed in docs/spark.md"


def _spelled(key: str, allowed: tuple[str, ...]) -> str:
    """The key as the user wrote it when Spark kept its case, else (Spark lower-cases
    option names) in the casing of the known name it is closest to."""
    if key != key.lower():
        return key
    names = {n.lower(): n for n in (*allowed, *_KAFKA)}
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.75)
    return _recase(key, names[close[0]]) if close else key


def _recase(key: str, model: str) -> str:
    """``key`` with the upper-case letters of ``model`` where the two agree."""
    matcher = difflib.SequenceMatcher(None, model.lower(), key)
    out = list(key)
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            if model[block.a + offset].isupper():
                out[block.b + offset] = model[block.a + offset]
    return "".join(out)
