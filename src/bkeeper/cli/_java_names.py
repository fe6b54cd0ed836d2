"""Apache BookKeeper's (Java) server configuration names, as ``-o`` and ``--conf`` aliases.

A ``bk_server.conf`` key whose meaning bkeeper has is read as bkeeper's option, its value
converted where the units differ (``minorCompactionInterval=3600``, seconds, is
``minor_compaction_interval_ms=3600000``; ``journalMaxSizeMB=2048`` is
``journal_file_bytes_max=2147483648``). A Java key bkeeper has no equivalent of is refused
with one line saying why and what to use instead. The table is docs/storage.md's (*Java
BookKeeper's names*; a test keeps the two the same). Pure: names and numbers only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["JAVA_NAMES", "JAVA_REFUSED", "JavaName", "java_value"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class JavaName:
    """Java's ``java`` is bkeeper's ``ours``; a value is ``convert``ed from Java's text to
    bkeeper's (None: the same text); ``unit`` says how, for the docs."""

    java: str
    ours: str
    unit: str = "same"
    convert: Callable[[str], str] | None = None


def _times(factor: int, what: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        try:
            number = int(text, 0)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer ({what})") from None
        return str(number * factor)

    return convert


def _seconds_to_ms(text: str) -> str:
    return _times(1000, "seconds")(text)


def _mib_to_bytes(text: str) -> str:
    return _times(_MIB, "MB")(text)


def _negative_off(text: str) -> str:
    """Java's -1 (off) is bkeeper's 0 (off)."""
    try:
        number = int(text, 0)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    return str(max(number, 0))


def _zk_servers(text: str) -> str:
    servers = text.strip()
    if not servers or "/" in servers:
        raise ValueError(f"{text!r} is not host:port[,host:port...]")
    return f"zk://{servers}/ledgers"


_SECONDS_TO_MS = "s → ms (x 1000)"
_MB_TO_BYTES = "MB → bytes (x 1048576)"

#: Java's name -> bkeeper's, by the configuration they set.
JAVA_NAMES: dict[str, JavaName] = {
    n.java: n
    for n in (
        # storage
        JavaName("journalDirectories", "journal_dirs"),
        JavaName("journalDirectory", "journal_dirs"),
        JavaName("ledgerDirectories", "ledger_dirs"),
        JavaName("journalMaxGroupWaitMSec", "journal_max_group_wait_ms"),
        JavaName("journalBufferedWritesThreshold", "journal_group_bytes_max"),
        JavaName("journalQueueSize", "journal_queue_entries_max"),
        JavaName("journalMaxSizeMB", "journal_file_bytes_max", _MB_TO_BYTES, _mib_to_bytes),
        JavaName("logSizeLimit", "entry_log_bytes_max"),
        JavaName(
            "dbStorage_writeCacheMaxSizeMb", "write_cache_bytes_max", _MB_TO_BYTES, _mib_to_bytes
        ),
        JavaName(
            "dbStorage_readAheadCacheMaxSizeMb", "read_cache_bytes_max", _MB_TO_BYTES, _mib_to_bytes
        ),
        JavaName("diskUsageThreshold", "disk_usage_threshold"),
        JavaName("diskUsageWarnThreshold", "disk_usage_warn_threshold"),
        JavaName("diskUsageLwmThreshold", "disk_usage_lwm_threshold"),
        JavaName("minUsableSizeForHighPriorityWrites", "disk_high_priority_free_bytes_min"),
        JavaName("readOnlyModeOnAnyDiskFullEnabled", "readonly_on_any_dir_full"),
        JavaName("minorCompactionThreshold", "minor_compaction_threshold"),
        JavaName("majorCompactionThreshold", "major_compaction_threshold"),
        JavaName("compactionRateByBytes", "compaction_rate_bytes_per_s"),
        JavaName("isForceGCAllowWhenNoSpace", "gc_allowed_on_full_disk"),
        # bookie
        JavaName("bookiePort", "port"),
        JavaName("bookieId", "bookie_id"),
        JavaName("advertisedAddress", "advertised_address"),
        JavaName("metadataServiceUri", "metadata_uri"),
        JavaName(
            "zkServers", "metadata_uri", "host:port,... → zk://host:port,.../ledgers", _zk_servers
        ),
        JavaName("httpServerPort", "http_port"),
        JavaName("nettyMaxFrameSizeBytes", "max_frame_bytes"),
        JavaName("forceReadOnlyBookie", "readonly"),
        JavaName("enableStatistics", "metrics_enabled"),
        JavaName("gcWaitTime", "gc_wait_ms"),
        JavaName(
            "minorCompactionInterval",
            "minor_compaction_interval_ms",
            _SECONDS_TO_MS,
            _seconds_to_ms,
        ),
        JavaName(
            "majorCompactionInterval",
            "major_compaction_interval_ms",
            _SECONDS_TO_MS,
            _seconds_to_ms,
        ),
        JavaName("diskCheckInterval", "disk_check_interval_ms"),
        JavaName("flushInterval", "checkpoint_interval_ms"),
        # autorecovery
        JavaName("lostBookieRecoveryDelay", "lost_bookie_recovery_delay_s"),
        JavaName("auditorPeriodicBookieCheckInterval", "bookie_check_interval_s"),
        JavaName("auditorPeriodicCheckInterval", "check_all_ledgers_interval_s"),
        JavaName("auditorPeriodicPlacementPolicyCheckInterval", "placement_check_interval_s"),
        JavaName("auditorReplicasCheckInterval", "replicas_check_interval_s"),
        JavaName("rereplicationEntryBatchSize", "entries_in_flight_max"),
        JavaName("openLedgerRereplicationGracePeriod", "open_ledger_grace_period_ms"),
        JavaName("replicationRateByBytes", "rate_bytes_per_s", "-1 (off) → 0 (off)", _negative_off),
    )
}

#: Java names bkeeper has no equivalent of, and what to do instead.
JAVA_REFUSED: dict[str, str] = {
    "ledgerStorageClass": "a bkeeper bookie has one ledger storage (entry logs, a write "
    "cache and a location index, as DbLedgerStorage)",
    "journalSyncData": "a bkeeper bookie always syncs the journal before it acknowledges an add",
    "journalWriteData": "a bkeeper bookie always writes the journal",
    "zkLedgersRootPath": "put the root in metadata_uri (zk://host:port/root/ledgers)",
    "zkTimeout": "a bookie's ZooKeeper session timeout is 10 s (StoreConfig.session_timeout_ms "
    "in Python), not a bookie option; how long it waits for ZooKeeper at start is "
    "metadata_connect_timeout_ms",
    "httpServerEnabled": "the admin HTTP server runs when http_port is set (none: off)",
    "autoRecoveryDaemonEnabled": "pass --autorecovery to bkeeper bookie",
    "numAddWorkerThreads": "a bkeeper bookie is one asyncio process with no worker pools",
    "numReadWorkerThreads": "a bkeeper bookie is one asyncio process with no worker pools",
    "compactionRate": "compaction is throttled by bytes only: compaction_rate_bytes_per_s",
    "compactionRateByEntries": "compaction is throttled by bytes only: compaction_rate_bytes_per_s",
    "useHostNameAsBookieID": "set bookie_id to the name you want",
}


def java_value(name: JavaName, text: str) -> str:
    """``text``, Java's value of ``name``, as bkeeper's option reads it; ValueError naming
    what it should be."""
    return text if name.convert is None else name.convert(text)
