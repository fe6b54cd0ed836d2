"""A bookie's registration says what it requires of clients: its auth plugin and TLS markers
on the ``bookie-rpc`` endpoint, ``https`` for its admin HTTP endpoint when TLS is on; in the
``BookieServiceInfoFormat`` fields Apache BookKeeper has (``auth``, ``extensions``)."""

from __future__ import annotations

from bkeeper.common.auth import AUTH_DISABLED_PLUGIN, TOKEN_PLUGIN, ServerAuthConfig
from bkeeper.common.tls import TlsServerConfig
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID, BookieServiceInfo, Endpoint
from bkeeper.server.registration import published_info
from bkeeper.wire._pb.data_formats_pb2 import BookieServiceInfoFormat

SECRET = b"k" * 32


def _rpc(info: BookieServiceInfo) -> Endpoint:
    endpoint = info.endpoint()
    assert endpoint is not None
    return endpoint


def test_a_bookie_without_security_requires_nothing() -> None:
    info = published_info("10.0.0.1", 3181, ("10.0.0.1", 8080))
    rpc = _rpc(info)
    assert (rpc.auth, rpc.extensions) == ((), ())
    assert not (rpc.offers_tls or rpc.requires_tls or rpc.requires_client_cert)
    assert rpc.auth_plugins == ()
    http = info.endpoint(HTTP_ENDPOINT_ID)
    assert http is not None and http.protocol == "http"


def test_a_secure_bookie_publishes_its_plugin_and_tls_markers() -> None:
    tls = TlsServerConfig("b.pem", "b.key", "ca.pem", client_auth=True, required=True)
    auth = ServerAuthConfig(TOKEN_PLUGIN, SECRET)
    info = published_info("10.0.0.1", 3181, ("10.0.0.2", 8443), tls, auth)
    rpc = _rpc(info)
    assert rpc.auth == (TOKEN_PLUGIN,) and rpc.auth_plugins == (TOKEN_PLUGIN,)
    assert rpc.extensions == ("tls", "tls-required", "tls-client-cert")
    assert rpc.offers_tls and rpc.requires_tls and rpc.requires_client_cert
    http = info.endpoint(HTTP_ENDPOINT_ID)
    assert http == Endpoint(HTTP_ENDPOINT_ID, "10.0.0.2", 8443, "https")


def test_tls_offered_only_and_auth_off() -> None:
    tls = TlsServerConfig("b.pem", "b.key")
    info = published_info("h", 1, ("h", 2), tls, ServerAuthConfig(AUTH_DISABLED_PLUGIN))
    rpc = _rpc(info)
    assert rpc.auth == () and rpc.extensions == ("tls",)
    assert rpc.offers_tls and not rpc.requires_tls
    http = info.endpoint(HTTP_ENDPOINT_ID)
    assert http is not None and http.protocol == "https"


def test_requirements_survive_the_protobuf_fields_java_reads() -> None:
    tls = TlsServerConfig("b.pem", "b.key", required=True)
    info = published_info("10.0.0.1", 3181, None, tls, ServerAuthConfig(TOKEN_PLUGIN, SECRET))
    data = info.encode()
    assert BookieServiceInfo.decode(data, "10.0.0.1:3181") == info
    raw = BookieServiceInfoFormat()
    raw.ParseFromString(data)
    (endpoint,) = raw.endpoints
    assert (endpoint.id, endpoint.protocol) == ("bookie", "bookie-rpc")
    assert list(endpoint.auth) == [TOKEN_PLUGIN]
    assert list(endpoint.extensions) == ["tls", "tls-required"]


def test_a_java_bookie_with_tls_offers_it_and_requires_nothing() -> None:
    # Java BookKeeper publishes extensions ["tls"] when TLS is configured, auth empty.
    rpc = Endpoint("bookie", "h", 3181, "bookie-rpc", (), ("tls",))
    assert rpc.offers_tls and not rpc.requires_tls and rpc.auth_plugins == ()
    legacy = BookieServiceInfo.decode(b"", "h:3181").endpoint("h:3181")
    assert legacy is not None and not legacy.offers_tls and legacy.auth_plugins == ()
