"""The admin HTTP server under security, in process: with an auth plugin every route but the
open ones needs a bearer token (401 without, 403 refused, served with a good one), ``/metrics``
open only when asked; with TLS it speaks HTTPS only (plain HTTP is one log line, mutual TLS
refuses a client without a certificate); the configuration it serves is JSON with every
secret redacted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import MISSING, fields, replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bkeeper.admin import ClusterAdmin, add_admin_routes
from bkeeper.common.auth import ServerAuthConfig, make_token, server_provider
from bkeeper.common.tls import TlsClientConfig, TlsServerConfig
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server.admin_http import (
    METRICS_ROUTE,
    OPEN_ROUTES,
    AdminHttpConfig,
    AdminHttpServer,
)
from bkeeper.server.admin_request import text_response
from bkeeper.server.admin_routes import add_bookie_routes
from bkeeper.server.config import REDACTED, BookieConfig, public_values
from bkeeper.server.security import BookieSecurity
from bkeeper.storage import StorageConfig
from bkeeper.testing.certs import CertFiles, make_ca, make_cert
from tests.server.test_admin_http import FakeBookie

SECRET = b"k" * 40
AUTH = ServerAuthConfig(token_secret=SECRET)
#: Made at import: valid far longer than a whole suite (600 s ran out mid-suite once).
GOOD = make_token(SECRET, "operator", 86_400)
FORGED = make_token(b"f" * 40, "operator", 86_400)
BASE = AdminHttpConfig("127.0.0.1", 0, writes_enabled=True)


def authenticate() -> object:
    security = BookieSecurity(None, False, 10.0, server_provider(AUTH))
    return security.authenticate


async def metrics(request: web.Request) -> web.Response:
    return text_response("bkeeper_up 1\n")


async def serve(config: AdminHttpConfig) -> AdminHttpServer:
    server = AdminHttpServer(config)
    add_bookie_routes(FakeBookie(), server)
    server.add_route(*METRICS_ROUTE, metrics)
    await server.start()
    return server


@contextlib.asynccontextmanager
async def every_route(config: AdminHttpConfig) -> AsyncIterator[AdminHttpServer]:
    """The bookie's routes, the cluster's (on an in-memory cluster) and ``/metrics``."""
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        server = AdminHttpServer(config)
        add_bookie_routes(FakeBookie(), server)
        admin = ClusterAdmin(uri, lambda: "127.0.0.1:3181")
        add_admin_routes(server, admin)
        server.add_route(*METRICS_ROUTE, metrics)
        await server.start()
        try:
            yield server
        finally:
            await server.aclose()
            await admin.aclose()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=30), trust_env=False
    ) as session:
        yield session


async def ask(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    path: str,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, str]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    body = b"{}" if method in ("PUT", "POST") else None
    kwargs: dict[str, object] = {"headers": headers, "data": body}
    if ssl_context is not None:
        kwargs["ssl"] = ssl_context
    async with http.request(method, url + path, **kwargs) as answer:
        return answer.status, await answer.text()


# -- authentication ----------------------------------------------------------------------------
@pytest.mark.parametrize("metrics_open", [False, True])
async def test_every_route_but_the_open_ones_needs_a_token(
    http: aiohttp.ClientSession, metrics_open: bool
) -> None:
    config = replace(BASE, authenticate=authenticate(), metrics_open=metrics_open)
    async with every_route(config) as server:
        url = f"http://127.0.0.1:{server.port}"
        open_routes = OPEN_ROUTES | ({METRICS_ROUTE} if metrics_open else set())
        assert server.open_routes() == open_routes
        assert open_routes <= set(server.routes())
        assert ("GET", "/api/v1/ledger/read") in server.routes()
        assert ("POST", "/api/v1/bookie/sanity") in server.routes()
        for method, path in server.routes():
            if (method, path) in open_routes:
                for token in (None, FORGED, GOOD):
                    status, _ = await ask(http, url, method, path, token)
                    assert status == 200, (method, path, token)
                continue
            status, body = await ask(http, url, method, path)
            assert status == 401, (method, path, body)
            assert f"{method} {path} needs an authenticated identity" in body
            status, body = await ask(http, url, method, path, FORGED)
            assert status == 403, (method, path, body)
            assert "credentials refused: bad token signature" in body and FORGED not in body
            status, body = await ask(http, url, method, path, GOOD)
            assert status not in (401, 403), (method, path, body)  # the fake's own answer
        # An unknown path or method answers nothing without credentials either.
        assert (await ask(http, url, "GET", "/api/v1/nothing"))[0] == 401
        assert (await ask(http, url, "GET", "/api/v1/nothing", GOOD))[0] == 404
        assert (await ask(http, url, "DELETE", "/heartbeat"))[0] == 401


async def test_without_authentication_every_route_stays_open(http: aiohttp.ClientSession) -> None:
    server = await serve(BASE)
    url = f"http://127.0.0.1:{server.port}"
    try:
        for path in ("/api/v1/bookie/state", "/metrics", "/api/v1/bookie/gc"):
            assert (await ask(http, url, "GET", path))[0] == 200, path
    finally:
        await server.aclose()


# -- TLS ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certs(
    subprocesses: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[CertFiles, CertFiles]]:
    where = tmp_path_factory.mktemp("admin-pki")
    ca = make_ca(where, "ca")
    yield ca, make_cert(where, ca, "bookie")


def client_context(ca: CertFiles, cert: CertFiles | None = None) -> ssl.SSLContext:
    return TlsClientConfig(
        ca.cert, "" if cert is None else cert.cert, "" if cert is None else cert.key
    ).context()


async def test_with_tls_it_serves_https_only(
    http: aiohttp.ClientSession, certs: tuple[CertFiles, CertFiles], caplog
) -> None:
    ca, bookie = certs
    tls = TlsServerConfig(bookie.cert, bookie.key)
    config = replace(BASE, authenticate=authenticate(), ssl_context=tls.context())
    server = await serve(config)
    assert server.scheme == "https"
    caplog.set_level("INFO", logger="bkeeper.server.admin_http")
    try:
        url = f"https://localhost:{server.port}"
        context = client_context(ca)
        status, body = await ask(http, url, "GET", "/api/v1/bookie/state", GOOD, context)
        assert status == 200 and json.loads(body)["running"] is True
        status, _ = await ask(http, url, "GET", "/api/v1/bookie/state", None, context)
        assert status == 401
        assert (await ask(http, url, "GET", "/heartbeat", None, context))[0] == 200
        # Plain HTTP to it: closed, one line naming what happened, and it serves on.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /heartbeat HTTP/1.1\r\nHost: b\r\n\r\n")
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()
        for _ in range(100):
            lines = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
            if lines:
                break
            await asyncio.sleep(0.05)
        assert len(lines) == 1, lines
        assert "plain HTTP sent to the HTTPS admin port" in lines[0], lines
        assert not any(r.exc_info for r in caplog.records)
        assert (await ask(http, url, "GET", "/heartbeat", None, context))[0] == 200
    finally:
        await server.aclose()


async def test_https_carries_large_answers_and_bodies_whole(
    http: aiohttp.ClientSession, certs: tuple[CertFiles, CertFiles]
) -> None:
    ca, bookie = certs
    big = bytes(range(256)) * (12 * 1024)  # 3 MiB: many TLS records, the socket's buffer full

    async def echo_big(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=big + body)

    tls = TlsServerConfig(bookie.cert, bookie.key)
    server = AdminHttpServer(replace(BASE, ssl_context=tls.context()))
    server.add_route("POST", "/big", echo_big)
    await server.start()
    try:
        sent = b"b" * 60_000
        for _ in range(3):  # on one kept-alive connection
            async with http.post(
                f"https://localhost:{server.port}/big", data=sent, ssl=client_context(ca)
            ) as answer:
                assert answer.status == 200
                assert await answer.read() == big + sent
    finally:
        await server.aclose()


async def test_mutual_tls_refuses_a_client_without_a_certificate(
    http: aiohttp.ClientSession, certs: tuple[CertFiles, CertFiles]
) -> None:
    ca, bookie = certs
    tls = TlsServerConfig(bookie.cert, bookie.key, ca.cert, client_auth=True)
    server = await serve(replace(BASE, ssl_context=tls.context()))
    try:
        url = f"https://localhost:{server.port}"
        with pytest.raises(aiohttp.ClientError):
            await ask(http, url, "GET", "/heartbeat", None, client_context(ca))
        status, _ = await ask(http, url, "GET", "/heartbeat", None, client_context(ca, bookie))
        assert status == 200
    finally:
        await server.aclose()


async def test_tls_handshakes_count_against_the_connection_limit(
    certs: tuple[CertFiles, CertFiles],
) -> None:
    _, bookie = certs
    tls = TlsServerConfig(bookie.cert, bookie.key)
    server = await serve(replace(BASE, ssl_context=tls.context(), connections_max=2))
    try:
        # Two connections that never start their handshake hold both places; a third is
        # closed at once.
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        async with asyncio.timeout(10):  # the server has taken both (their handshakes wait)
            while len(server._handshakes) < 2:
                await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()
        for _, w in held:
            w.close()
    finally:
        await server.aclose()


# -- the configuration served ---------------------------------------------------------------
def every_option_set(cls: type, given: dict[str, object]) -> dict[str, object]:
    """A value other than the default for every field of ``cls``: ``given``'s, else the
    flipped bool, the int plus one, the float halved; a field of another kind fails the test
    until it is given a value (so a new option is serialized by this test too)."""
    values: dict[str, object] = {}
    for f in fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        default = f.default if f.default is not MISSING else None
        if isinstance(default, bool):
            values[f.name] = not default
        elif isinstance(default, int):
            values[f.name] = default + 1
        elif isinstance(default, float):
            values[f.name] = default / 2
        else:
            raise AssertionError(f"{cls.__name__}.{f.name}: give this test a value for it")
    return values


def test_the_configuration_is_json_with_every_secret_redacted(tmp_path: Path) -> None:
    tls = TlsServerConfig(
        "/etc/b/cert.pem", "/etc/b/key.pem", "/etc/b/ca.pem", client_auth=True, required=True
    )
    auth = ServerAuthConfig(token_secret=SECRET, allowed_subjects=frozenset({"b", "a"}))
    config = BookieConfig(
        **every_option_set(
            BookieConfig,
            {
                "data_dir": str(tmp_path),
                "host": "127.0.0.2",
                "bookie_id": "b1",
                "advertised_address": "10.0.0.2",
                "network_location": "/eu/rack-1",
                "network_location_file": "/etc/b/racks.txt",
                "network_location_script": "/etc/b/rack-of",
                "metadata_uri": "zk://127.0.0.1:2181/ledgers?digest-file=/etc/b/zk.digest",
                "http_port": 8000,
                "http_host": "0.0.0.0",
                "tls": tls,
                "auth": auth,
                "extra": {"x": "y"},
            },
        )
    )
    storage = StorageConfig(
        **every_option_set(
            StorageConfig,
            {
                "data_dir": str(tmp_path),
                "ledger_dirs": (str(tmp_path / "l"),),
                "journal_dirs": ("/j",),
                "write_cache_flush_bytes": 1 << 20,
            },
        )
    )
    values = {**public_values(storage), **public_values(config)}
    text = json.dumps(values)  # every value serializable
    assert SECRET.decode() not in text and SECRET.hex() not in text
    for f in [*fields(BookieConfig), *fields(StorageConfig)]:
        assert f.name in values, f.name
    assert values["auth"]["token_secret"] == REDACTED
    assert values["auth"]["allowed_subjects"] == ["a", "b"]
    assert values["tls"]["cert_file"] == "/etc/b/cert.pem"
    assert values["journal_dirs"] == ["/j"] and values["http_metrics_open"] is True


def test_any_bytes_value_or_repr_hidden_field_is_redacted() -> None:
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Future:
        secrets: tuple[bytes, ...] = (b"one", b"two")
        password: str = field(default="hunter2", repr=False)
        digest: str = field(default="user:pw", metadata={"secret": True})
        path: str = "/etc/secret.file"
        context: object = field(default_factory=ssl.create_default_context)

    values = public_values(Future())
    assert values == {
        "secrets": [REDACTED, REDACTED],
        "password": REDACTED,
        "digest": REDACTED,
        "path": "/etc/secret.file",
        "context": "<SSLContext>",
    }


# -- admin URLs as the shell builds them --------------------------------------------------------
def test_the_shell_builds_https_urls_for_a_bookie_with_tls() -> None:
    from bkeeper.cli.shell_ops import _http
    from bkeeper.meta.bookie_info import BookieServiceInfo

    with_tls = BookieServiceInfo.for_bookie("h", 3181, http_port=8080, extensions=("tls",))
    assert _http(with_tls) == "https://h:8080"
    assert _http(BookieServiceInfo.for_bookie("h", 3181, http_port=8080)) == "http://h:8080"
