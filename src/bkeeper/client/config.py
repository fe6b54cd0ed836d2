"""Configuration of the ledger client: one frozen dataclass, validated on creation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bkeeper.client.placement import PLACEMENTS
from bkeeper.common.auth import ClientAuthConfig
from bkeeper.common.errors import ConfigError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.common.tls import TlsClientConfig
from bkeeper.common.validate import check_non_negative_ints, check_positive_ints
from bkeeper.meta.locations import check_location
from bkeeper.wire.codes import Protocol
from bkeeper.wire.correlate import PENDING_REQUESTS_MAX

__all__ = ["ClientConfig", "set_process_security"]


@dataclass
class _ProcessSecurity:
    tls: TlsClientConfig | None = None
    auth: ClientAuthConfig | None = field(default=None, repr=False)


#: The ``tls`` and ``auth`` a ClientConfig gets when not given (set by the command line).
_PROCESS_SECURITY = _ProcessSecurity()


def set_process_security(tls: TlsClientConfig | None, auth: ClientAuthConfig | None) -> None:
    """Make ``tls`` and ``auth`` the defaults of every :class:`ClientConfig` made from now on
    in this process. The ``bkeeper`` command sets them from its client security options, so
    that every tool it runs (shell, bench, log, auto-recovery, ...) reaches a secured
    cluster; library users pass them in their ``ClientConfig`` instead."""
    _PROCESS_SECURITY.tls = tls
    _PROCESS_SECURITY.auth = auth


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts in milliseconds; limits name what they bound.

    ``add_timeout_ms``: a bookie that has not acknowledged an add within this time counts as
    failed and is replaced (ensemble change). ``speculative_read_timeout_ms``: a read not
    answered within this time is also sent to the next replica (0 turns it off).
    ``pending_adds_max``: appends in flight per ledger before ``append`` waits
    (back-pressure). ``explicit_lac_interval_ms``: when > 0 the writer sends its LAC to the
    bookies as it goes idle (its last add in flight acknowledged), at most once per this
    interval, so readers see the last entry too (v3 WRITE_LAC).
    ``placement``: how new ensembles and replacements are chosen (:mod:`bkeeper.client.
    placement`): ``"rackaware"`` (the default, as Apache BookKeeper's client) spreads each
    write quorum over racks, ``"regionaware"`` over regions then racks, ``"random"`` ignores
    where bookies are. Where a bookie is: its registered network location (the cluster's rack
    information, :mod:`bkeeper.meta.racks`), unless ``racks`` (bookie id -> ``/rack`` or
    ``/region/rack``) names it; a bookie in neither is on ``/default-rack``, so with no
    locations anywhere rack-aware placement is random placement.
    ``min_racks_per_write_quorum``: racks every write quorum should span (BookKeeper's
    ``minNumRacksPerWriteQuorum``, 2); ``enforce_min_racks``: refuse an ensemble or a
    replacement that cannot (``NotEnoughBookiesError``; BookKeeper's
    ``enforceMinNumRacksPerWriteQuorum``, off: best effort). ``local_region`` (``/region``):
    reads ask the replicas in that region first (BookKeeper's region-aware read reordering),
    the others only when those fail or are slow.
    ``metadata_session_timeout_ms``: the ZooKeeper session timeout asked for (Apache
    BookKeeper's ``zkTimeout``; the server clamps it to 2..20 of its ticks).
    ``metadata_reconnect_timeout_ms``: how long a metadata call is tried again while the
    connection or session to the metadata store is being re-established (see
    :mod:`bkeeper.client.metadata`).
    ``recovery_batch_entries``: entries a recovery reads and re-writes concurrently.
    ``batch_read_entries_max`` / ``batch_read_bytes_max``: what one v2 BATCH_READ request
    asks for (a bookie may answer with fewer); the largest answer must fit a frame.
    ``batch_reads_in_flight_max``: BATCH_READ requests in flight while iterating a range.
    ``connection_requests_pending_max``: requests awaiting an answer on one connection to a
    bookie (every ledger's adds and reads together); one more fails with
    ``TooManyRequestsError`` (writers are held back first by ``pending_adds_max`` and by the
    socket's write buffer).
    ``metrics``: keep client metrics (:mod:`bkeeper.client.metrics`; off by default).
    ``connection_write_buffer_bytes_max``: bytes queued on one connection's socket before
    writers wait for it to drain (below a quarter of it they go on).
    ``max_frame_bytes``: the largest frame (the 4-byte length's value) this client sends or
    accepts, as Apache BookKeeper's ``nettyMaxFrameSizeBytes`` (5 MiB); set it as the
    bookies' ``max_frame_bytes``. An entry whose add would not fit, with its headers and
    digest, is refused before it is sent (``EntryTooLargeError``; ``WriteHandle.
    max_entry_bytes`` is the largest that fits).
    ``metadata_watches_max``: read handles of this client that watch their ledger's metadata
    at once (a handle starts watching at its first long poll, see
    :mod:`bkeeper.client.follow`); the others re-read it only when a bookie's answer says
    their view is old.
    ``tls``: every connection to a bookie starts with START_TLS and a TLS handshake
    (``bkeeper.common.tls``); ``auth``: the AUTH exchange's plugin and credentials
    (``bkeeper.common.auth``; None: the disabled plugin, no AUTH sent).
    ``store_password_in_metadata``: new ledgers' metadata carries their password (as Apache
    BookKeeper's does, for auto-recovery); off, it carries none, and only holders of the
    password can recover or re-replicate the ledger (docs/security.md).
    ``bookie_quarantine_time_ms``: a bookie that failed a writer of this client is avoided
    by every new ensemble and ensemble change of the client for this long, unless no other
    bookie is left (Apache BookKeeper's ``bookieQuarantineTimeSeconds``, 1800 s; 0: never;
    :mod:`bkeeper.client.placement`).
    ``degraded_writes``: a writer that loses a bookie and finds no bookie to replace it goes
    on while every write set keeps ``Qa`` bookies up: adds complete with ``Qa`` acks from
    the others (docs/client.md, "No spare: degraded writes"; Apache BookKeeper's
    ``delayEnsembleChange`` for that case). Off, the writer fails with
    ``NotEnoughBookiesError`` (BookKeeper's default). ``degraded_retry_interval_ms``: how
    often a degraded writer looks for a bookie to replace the one down.
    """

    protocol: Protocol = Protocol.V2
    connect_timeout_ms: int = 5_000
    add_timeout_ms: int = 5_000
    read_timeout_ms: int = 5_000
    speculative_read_timeout_ms: int = 2_000
    long_poll_timeout_ms: int = 10_000
    pending_adds_max: int = 5_000
    read_ahead_entries_max: int = 200
    ensemble_changes_max: int = 1_000
    metadata_retries_max: int = 20
    metadata_session_timeout_ms: int = 10_000
    metadata_reconnect_timeout_ms: int = 10_000
    explicit_lac_interval_ms: int = 0
    placement: str = "rackaware"
    racks: Mapping[str, str] = field(default_factory=dict)
    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    local_region: str = ""
    timeout_check_interval_ms: int = 100
    recovery_batch_entries: int = 64
    batch_read_entries_max: int = 1_000
    batch_read_bytes_max: int = 4 * 1024 * 1024
    batch_reads_in_flight_max: int = 4
    connection_requests_pending_max: int = PENDING_REQUESTS_MAX
    connection_write_buffer_bytes_max: int = 8 * 1024 * 1024
    max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT
    metrics: bool = False
    metadata_watches_max: int = 1_000
    tls: TlsClientConfig | None = field(default_factory=lambda: _PROCESS_SECURITY.tls)
    auth: ClientAuthConfig | None = field(default_factory=lambda: _PROCESS_SECURITY.auth)
    store_password_in_metadata: bool = True
    bookie_quarantine_time_ms: int = 1_800_000
    degraded_writes: bool = True
    degraded_retry_interval_ms: int = 3_000

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ConfigError(
                f"placement: {self.placement!r} is not one of {', '.join(PLACEMENTS)}"
            )
        for bookie, location in self.racks.items():
            check_location(location, f"racks: location of {bookie}")
        if self.local_region and check_location(self.local_region, "local_region").count("/") != 1:
            raise ConfigError(f"local_region: {self.local_region!r} is a region, /name")
        check_positive_ints(
            self,
            "connect_timeout_ms",
            "add_timeout_ms",
            "read_timeout_ms",
            "long_poll_timeout_ms",
            "pending_adds_max",
            "read_ahead_entries_max",
            "ensemble_changes_max",
            "metadata_retries_max",
            "metadata_session_timeout_ms",
            "metadata_reconnect_timeout_ms",
            "timeout_check_interval_ms",
            "min_racks_per_write_quorum",
            "recovery_batch_entries",
            "batch_read_entries_max",
            "batch_read_bytes_max",
            "batch_reads_in_flight_max",
            "connection_requests_pending_max",
            "connection_write_buffer_bytes_max",
            "max_frame_bytes",
            "metadata_watches_max",
            "degraded_retry_interval_ms",
        )
        check_non_negative_ints(
            self,
            "speculative_read_timeout_ms",
            "explicit_lac_interval_ms",
            "bookie_quarantine_time_ms",
        )
        # A full answer: 32 bytes of header, then a 4-byte length before every body.
        answer_bytes_max = 32 + 4 * self.batch_read_entries_max + self.batch_read_bytes_max
        if answer_bytes_max > self.max_frame_bytes:
            raise ConfigError(
                f"batch_read_bytes_max + 4 * batch_read_entries_max: a batch answer of up to "
                f"{answer_bytes_max} bytes would not fit a {self.max_frame_bytes}-byte frame "
                "(max_frame_bytes)"
            )
