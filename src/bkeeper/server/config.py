"""Configuration of one bookie process: a frozen dataclass validated on creation."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from bkeeper.common.auth import ServerAuthConfig
from bkeeper.common.errors import ConfigError
from bkeeper.common.limits import DEFAULT_BOOKIE_PORT, MAX_FRAME_BYTES_DEFAULT
from bkeeper.common.tls import TlsServerConfig
from bkeeper.common.validate import check_non_negative_ints, check_port, check_positive_ints
from bkeeper.meta.locations import check_location

__all__ = ["ADMIN_HTTP_HOST_DEFAULT", "REDACTED", "BookieConfig", "public_values"]

#: What :func:`public_values` shows for a secret.
REDACTED = "<redacted>"

#: Addresses that mean "every address of this machine" (to listen on, never to connect to).
_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})

#: Where the admin HTTP server listens unless ``http_host`` says otherwise.
ADMIN_HTTP_HOST_DEFAULT = "127.0.0.1"


@dataclass(frozen=True)
class BookieConfig:
    """Everything a bookie needs besides its storage configuration.

    At start the bookie waits up to ``metadata_connect_timeout_ms`` for a session with its
    metadata service (``metadata_uri``), however often it is refused meanwhile: a bookie
    started with its ZooKeeper, or during a ZooKeeper restart, waits for it rather than
    giving up at the first refusal as a client does. Raise it where ZooKeeper may come up
    later (a machine booting every service at once).

    Addresses: the bookie listens on ``host`` (``0.0.0.0``: every address of the machine) and
    registers ``advertised_address`` (Apache BookKeeper's ``advertisedAddress``; empty:
    ``host``) as the address clients connect to; its id is ``bookie_id``, by default
    ``<advertised address>:<port>``. ``network_location``: its failure domain, ``/rack`` or
    ``/region/rack`` (:mod:`bkeeper.meta.racks`), written to the cluster's rack information
    at start for placement; empty: whatever that information says already (an operator's
    ``bkeeper shell setrack``), else the default rack. Or the command looks it up before
    start (``bkeeper bookie``; the bookie itself reads neither): in
    ``network_location_file`` (``name location`` lines, by bookie id or advertised host), or
    by running ``network_location_script`` with the advertised host as its argument
    (Apache BookKeeper's script-based mapping: it prints the location).

    Limits are per connection unless named otherwise. The disk thresholds live in
    :class:`~bkeeper.storage.StorageConfig` (the engine checks them as it writes); the bookie
    also checks the disk every ``disk_check_interval_ms`` for space taken or freed by others.
    ``readonly`` keeps the bookie read-only whatever the disk says.

    Admin HTTP server (:mod:`bkeeper.server.admin_http`): on ``http_port`` (0: any free
    port; ``None``: none) at ``http_host`` (empty: loopback, ``127.0.0.1``, whatever ``host``
    is: the admin API is reached from elsewhere only when asked for); the bookie publishes
    it in its registration as the endpoint ``httpserver``. Requests that change something
    (PUT, POST, DELETE) are refused with 403 unless ``http_admin_writes``. With ``auth`` every
    request needs a token but liveness and readiness (and ``/metrics`` with
    ``http_metrics_open``); with ``tls`` the server speaks HTTPS (docs/security.md).

    Metrics (:mod:`bkeeper.server.metrics`): kept while ``metrics_enabled`` (the default) and
    served as ``/metrics`` on the admin HTTP server; off, the bookie keeps none (no counting
    at all) and ``/metrics`` answers 404.

    Bookie-wide connection limits (see ``bkeeper.server.connections``): ``connections_max``
    open connections (0: derived from the file-descriptor limit); a connection with no
    complete first frame after ``connection_handshake_timeout_ms``, or with nothing received
    and nothing in flight for ``connection_idle_timeout_ms``, is closed; bytes buffered in
    incomplete frames across all connections stay under ``partial_frames_bytes_max``. Lines
    about misbehaving clients are logged at most ``client_error_log_lines_per_s`` a second
    (bursts of ``client_error_log_burst``); the rest are counted and the count logged.

    Security (``bkeeper.server.security``, docs/security.md): ``tls`` turns on START_TLS
    (PEM certificate and key; mutual TLS; TLS-only), ``auth`` an authentication plugin (every
    request before a successful AUTH exchange is answered EUA). Both off by default.

    Garbage collection (see ``bkeeper.server.garbage``): a pass every ``gc_wait_ms`` deletes
    the local data of ledgers whose metadata is gone (confirming each with at most
    ``gc_metadata_reads_per_s`` metadata reads a second: ZooKeeper serves a read from memory
    on any server, and at 100 a second the 900 deletions of ``bench gc`` took a pass of 9 s)
    and removes entry logs that hold no live ledger; it runs minor compaction when
    ``minor_compaction_interval_ms`` have passed since the last one, and major compaction
    every ``major_compaction_interval_ms`` (0 disables that kind; the thresholds are in
    ``StorageConfig``).

    Scrub (:mod:`bkeeper.storage.scrub`, run by ``bkeeper bookie`` with a metadata service):
    every entry stored in entry logs is read back and checked against its checksum, at most
    ``scrub_bytes_per_s``, once soon after start and then every ``scrub_interval_ms`` (0: never);
    damaged entries are copied back from the other replicas by the data integrity check,
    which also runs every ``limbo_check_interval_ms`` while ledgers are in limbo (a read that
    found a damaged record, a repair that could not finish).
    """

    data_dir: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_BOOKIE_PORT
    bookie_id: str = ""
    advertised_address: str = ""
    network_location: str = ""
    network_location_file: str = ""
    network_location_script: str = ""
    metadata_uri: str = ""
    metadata_connect_timeout_ms: int = 10_000
    http_port: int | None = None
    http_host: str = ""
    http_admin_writes: bool = False
    http_metrics_open: bool = False
    max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT
    connection_requests_in_flight_max: int = 10_000
    connection_bytes_in_flight_max: int = 64 * 1024 * 1024
    connections_max: int = 0
    connection_handshake_timeout_ms: int = 10_000
    connection_idle_timeout_ms: int = 600_000
    partial_frames_bytes_max: int = 128 * 1024 * 1024
    client_error_log_lines_per_s: int = 10
    client_error_log_burst: int = 20
    long_poll_waiters_max: int = 10_000
    long_poll_timeout_ms_max: int = 120_000
    batch_read_bytes_max: int = 4 * 1024 * 1024
    batch_read_entries_max: int = 10_000
    disk_check_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 10_000
    shutdown_drain_timeout_ms: int = 10_000
    readonly: bool = False
    metrics_enabled: bool = True
    gc_wait_ms: int = 60_000
    minor_compaction_interval_ms: int = 3_600_000
    major_compaction_interval_ms: int = 86_400_000
    gc_metadata_reads_per_s: int = 1000
    scrub_interval_ms: int = 7 * 86_400_000
    scrub_bytes_per_s: int = 32 * 1024 * 1024
    limbo_check_interval_ms: int = 30_000
    tls: TlsServerConfig | None = None
    auth: ServerAuthConfig | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ConfigError("data_dir: a data directory is required")
        if self.network_location:
            check_location(self.network_location, "network_location")
        given = [
            name
            for name in ("network_location", "network_location_file", "network_location_script")
            if getattr(self, name)
        ]
        if len(given) > 1 and given[0] != "network_location":
            raise ConfigError(
                "network_location_file and network_location_script: give one way to find the "
                "network location, not both"
            )
        if self.advertised_address in _ANY_ADDRESS - {""}:
            raise ConfigError(
                f"advertised_address: {self.advertised_address!r} is not an address clients "
                "can connect to"
            )
        check_port("port", self.port)
        if self.http_port is not None:
            check_port("http_port", self.http_port)
            if self.http_port == self.port != 0 and self.effective_http_host == self.host:
                raise ConfigError(f"http_port: {self.http_port} is the bookie's port too")
        if not isinstance(self.connections_max, int) or self.connections_max < 0:
            raise ConfigError(
                "connections_max: must be a positive integer, or 0 for the file-descriptor "
                f"limit, got {self.connections_max!r}"
            )
        check_positive_ints(
            self,
            "metadata_connect_timeout_ms",
            "max_frame_bytes",
            "connection_requests_in_flight_max",
            "connection_bytes_in_flight_max",
            "connection_handshake_timeout_ms",
            "connection_idle_timeout_ms",
            "partial_frames_bytes_max",
            "client_error_log_lines_per_s",
            "client_error_log_burst",
            "long_poll_waiters_max",
            "long_poll_timeout_ms_max",
            "batch_read_bytes_max",
            "batch_read_entries_max",
            "disk_check_interval_ms",
            "checkpoint_interval_ms",
            "shutdown_drain_timeout_ms",
            "gc_wait_ms",
            "gc_metadata_reads_per_s",
            "scrub_bytes_per_s",
            "limbo_check_interval_ms",
        )
        check_non_negative_ints(
            self,
            "minor_compaction_interval_ms",
            "major_compaction_interval_ms",
            "scrub_interval_ms",
        )
        if self.partial_frames_bytes_max < self.max_frame_bytes:
            raise ConfigError(
                f"partial_frames_bytes_max: {self.partial_frames_bytes_max} is below "
                f"max_frame_bytes ({self.max_frame_bytes}): one frame could never arrive"
            )

    @property
    def effective_http_host(self) -> str:
        """The address the admin HTTP server listens on: ``http_host``, or loopback."""
        return self.http_host or ADMIN_HTTP_HOST_DEFAULT

    @property
    def advertised_host(self) -> str:
        """The address registered for clients: ``advertised_address``, else ``host``."""
        return self.advertised_address or self.host

    @property
    def effective_bookie_id(self) -> str:
        """The configured bookie id, or ``<advertised host>:port`` as Apache BookKeeper
        defaults it."""
        return self.bookie_id or f"{self.advertised_host}:{self.port}"


def public_values(config: object) -> dict[str, object]:
    """A configuration dataclass as JSON values, by field name, without its secrets: a field
    declared ``repr=False`` (how secrets are declared: a token secret, a password) or with
    ``metadata={"secret": True}``, and any bytes value at any depth, are :data:`REDACTED`;
    nested dataclasses are dicts, sets sorted lists, tuples lists, enums their names, paths
    strings; a value of any other type is shown as its type's name only."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"public_values: a dataclass instance, got {type(config).__name__}")
    return {
        f.name: REDACTED if _secret(f) else _json_value(getattr(config, f.name))
        for f in dataclasses.fields(config)
    }


def _secret(f: dataclasses.Field[object]) -> bool:
    return not f.repr or bool(f.metadata.get("secret"))


def _json_value(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return REDACTED
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return public_values(value)
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        items = [_json_value(v) for v in value]
        return sorted(items, key=repr)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        return path if isinstance(path, str) else REDACTED
    return f"<{type(value).__name__}>"
