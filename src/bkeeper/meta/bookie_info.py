"""What a bookie publishes when it registers: its endpoints and properties.

Stored as the data of ``<root>/available/<bookieId>`` in the ``BookieServiceInfoFormat``
protobuf (binary), as Apache BookKeeper 4.11+ does. Bookies older than that register with
empty data; such an entry decodes to the legacy info derived from the bookie id
(``host:port``). Pure codec, no I/O.

What the bookie requires of a client travels in its ``bookie-rpc`` endpoint (as the
``auth`` and ``extensions`` lists of Apache BookKeeper's ``BookieServiceInfo``, which Java
readers ignore): ``auth`` names the bookie's auth plugin (empty: authentication off), and
``extensions`` holds :data:`TLS_EXTENSION` when the bookie offers TLS (Java BookKeeper
publishes the same), :data:`TLS_REQUIRED_EXTENSION` when it answers EUA to requests before
START_TLS, :data:`TLS_CLIENT_CERT_EXTENSION` when it asks clients for a certificate (mutual
TLS). A bookie with TLS publishes its admin HTTP endpoint with protocol ``https``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from google.protobuf.message import DecodeError

from bkeeper.common.auth import AUTH_DISABLED_PLUGIN
from bkeeper.common.errors import ProtocolError
from bkeeper.wire._pb.data_formats_pb2 import BookieServiceInfoFormat

__all__ = [
    "BOOKIE_RPC",
    "HTTP_ENDPOINT_ID",
    "TLS_CLIENT_CERT_EXTENSION",
    "TLS_EXTENSION",
    "TLS_REQUIRED_EXTENSION",
    "BookieServiceInfo",
    "Endpoint",
]

#: Endpoint id and protocol of the bookie's client port, as BookKeeper names them.
BOOKIE_RPC = "bookie-rpc"
_BOOKIE_ENDPOINT_ID = "bookie"
#: Endpoint id of the bookie's admin HTTP server, as BookKeeper names it.
HTTP_ENDPOINT_ID = "httpserver"
#: ``bookie-rpc`` extensions (module doc): TLS offered (Java BookKeeper's marker), TLS
#: required before any request, a client certificate required (mutual TLS).
TLS_EXTENSION = "tls"
TLS_REQUIRED_EXTENSION = "tls-required"
TLS_CLIENT_CERT_EXTENSION = "tls-client-cert"


@dataclass(frozen=True)
class Endpoint:
    id: str
    host: str
    port: int
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()

    @property
    def offers_tls(self) -> bool:
        return TLS_EXTENSION in self.extensions or self.requires_tls

    @property
    def requires_tls(self) -> bool:
        return TLS_REQUIRED_EXTENSION in self.extensions

    @property
    def requires_client_cert(self) -> bool:
        return TLS_CLIENT_CERT_EXTENSION in self.extensions

    @property
    def auth_plugins(self) -> tuple[str, ...]:
        """The auth plugins the endpoint requires (empty: no authentication)."""
        return tuple(a for a in self.auth if a and a != AUTH_DISABLED_PLUGIN)


@dataclass(frozen=True)
class BookieServiceInfo:
    endpoints: tuple[Endpoint, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    @classmethod
    def for_bookie(
        cls,
        host: str,
        port: int,
        *,
        http_port: int | None = None,
        http_host: str | None = None,
        properties: Mapping[str, str] | None = None,
        auth: tuple[str, ...] = (),
        extensions: tuple[str, ...] = (),
    ) -> BookieServiceInfo:
        """The usual info: the bookie port as ``bookie-rpc`` with its ``auth`` and
        ``extensions`` (module doc), and the HTTP admin port if any (at ``http_host``, by
        default ``host``; ``https`` when the bookie offers TLS)."""
        rpc = Endpoint(_BOOKIE_ENDPOINT_ID, host, port, BOOKIE_RPC, auth, extensions)
        endpoints = [rpc]
        if http_port is not None:
            scheme = "https" if rpc.offers_tls else "http"
            endpoints.append(Endpoint(HTTP_ENDPOINT_ID, http_host or host, http_port, scheme))
        return cls(tuple(endpoints), properties or {})

    @classmethod
    def legacy(cls, bookie_id: str) -> BookieServiceInfo:
        """The info of a bookie that registered no data: its id read as ``host:port``."""
        host, _, port = bookie_id.rpartition(":")
        if not host or not port.isdigit():
            return cls()
        return cls((Endpoint(bookie_id, host, int(port), BOOKIE_RPC),))

    def endpoint(self, endpoint_id: str = _BOOKIE_ENDPOINT_ID) -> Endpoint | None:
        return next((e for e in self.endpoints if e.id == endpoint_id), None)

    def encode(self) -> bytes:
        message = BookieServiceInfoFormat()
        for e in self.endpoints:
            message.endpoints.add(
                id=e.id,
                host=e.host,
                port=e.port,
                protocol=e.protocol,
                auth=list(e.auth),
                extensions=list(e.extensions),
            )
        for key, value in self.properties.items():
            message.properties[key] = value
        return message.SerializeToString(deterministic=True)

    @classmethod
    def decode(cls, data: bytes, bookie_id: str = "") -> BookieServiceInfo:
        """Decode registration data; empty data gives :meth:`legacy` for ``bookie_id``."""
        if not data:
            return cls.legacy(bookie_id)
        message = BookieServiceInfoFormat()
        try:
            message.ParseFromString(data)
        except DecodeError as exc:
            raise ProtocolError(f"bookie {bookie_id}: registration data unreadable") from exc
        endpoints = tuple(
            Endpoint(e.id, e.host, e.port, e.protocol, tuple(e.auth), tuple(e.extensions))
            for e in message.endpoints
        )
        return cls(endpoints, dict(message.properties))
