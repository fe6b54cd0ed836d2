"""The dashboard of a secured cluster, in process: an in-memory cluster whose one registered
bookie's admin HTTP is an HTTPS server (certificate of a private CA) that wants a bearer
token, as a secured bookie's is (docs/security.md, Dashboard).

- Outgoing: the dashboard probes the bookie over TLS with its token; without the token, with
  a wrong one, or without the CA, the bookie's row says what is missing, never the token.
- Incoming: with a token the page and the API are for holders of it only (login page, 401
  JSON, bearer, session cookie, logout, a limit on refused attempts, one log line each);
  without a token the dashboard is open as before.
- Nothing the API or the page serves holds a secret (the token, a ledger's password).
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bkeeper.common.auth import TOKEN_PLUGIN, ClientAuthConfig, make_token
from bkeeper.common.tls import TlsClientConfig, TlsServerConfig
from bkeeper.dashboard import ClusterMonitor, Dashboard, DashboardConfig
from bkeeper.dashboard.app import SESSION_COOKIE
from bkeeper.dashboard.login import LOGIN_FAILURES_MAX
from bkeeper.meta.bookie_info import BOOKIE_RPC, HTTP_ENDPOINT_ID, BookieServiceInfo, Endpoint
from bkeeper.testing.certs import CertFiles, make_ca, make_cert
from bkeeper.testing.cluster import MemoryCluster

SECRET = b"d" * 48
TOKEN = make_token(SECRET, "dashboard", 86_400)
LEDGER_PASSWORD = b"ledger-password-" + uuid.uuid4().hex.encode()
NEVER_MS = 3_600_000


@dataclass(frozen=True)
class Pki:
    ca: CertFiles
    bookie: CertFiles


@pytest.fixture(scope="module")
def pki(subprocesses: None, tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca = make_ca(where, "ca")
    return Pki(ca, make_cert(where, ca, "bookie"))


@dataclass
class FakeBookieAdmin:
    """A bookie's admin HTTP server as a secured bookie runs it: HTTPS, bearer token."""

    url: str
    authorizations: list[str | None] = field(default_factory=list)


def bookie_admin_app(seen: FakeBookieAdmin) -> web.Application:
    async def answer(request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        seen.authorizations.append(authorization)
        if authorization is None:
            return web.json_response({"error": "authentication required"}, status=401)
        if authorization != f"Bearer {TOKEN}":
            return web.json_response({"error": "token refused"}, status=403)
        if request.path == "/metrics":
            return web.Response(text="# no series\n")
        if request.path.endswith("/state"):
            return web.json_response({"readOnly": False})
        return web.json_response({"freeSpace": 5, "totalSpace": 9})

    app = web.Application()
    for path in ("/api/v1/bookie/state", "/api/v1/bookie/info", "/metrics"):
        app.router.add_get(path, answer)
    return app


@dataclass
class Secured:
    cluster: MemoryCluster
    admin: FakeBookieAdmin
    bookie_id: str
    ledger_id: int


@pytest.fixture
async def secured(pki: Pki) -> AsyncIterator[Secured]:
    """A memory cluster with a closed ledger (with a password), and one more bookie
    registered with an ``https`` admin endpoint served by :class:`FakeBookieAdmin`."""
    admin = FakeBookieAdmin("")
    runner = web.AppRunner(bookie_admin_app(admin), access_log=None)
    await runner.setup()
    tls = TlsServerConfig(pki.bookie.cert, pki.bookie.key).context()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    admin.url = f"https://127.0.0.1:{port}"
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        handle = await bk.create_ledger(1, 1, 1, password=LEDGER_PASSWORD)
        await handle.append(b"entry")
        await handle.close()
        assert cluster.metadata is not None
        bookie_id = f"127.0.0.1:{port + 1}"
        info = BookieServiceInfo(
            (
                Endpoint("bookie", "127.0.0.1", port + 1, BOOKIE_RPC),
                Endpoint(HTTP_ENDPOINT_ID, "127.0.0.1", port, "https"),
            )
        )
        registration = await cluster.metadata.registry.register(bookie_id, info)
        try:
            yield Secured(cluster, admin, bookie_id, handle.ledger_id)
        finally:
            await registration.aclose()
            await runner.cleanup()


def config(uri: str, pki: Pki | None, token: str | None) -> DashboardConfig:
    return DashboardConfig(
        uri,
        port=0,
        scrape_interval_ms=NEVER_MS,
        metadata_interval_ms=NEVER_MS,
        tls=None if pki is None else TlsClientConfig(pki.ca.cert),
        auth=None if token is None else ClientAuthConfig(TOKEN_PLUGIN, token),
    )


async def probed_row(secured: Secured, pki: Pki | None, token: str | None) -> dict[str, Any]:
    monitor = ClusterMonitor(config(secured.cluster.uri, pki, token))
    await monitor.start()
    try:
        [row] = [b for b in monitor.bookies if b["bookie_id"] == secured.bookie_id]
        return row
    finally:
        await monitor.aclose()


async def test_bookies_are_probed_over_tls_with_the_token(secured: Secured, pki: Pki) -> None:
    row = await probed_row(secured, pki, TOKEN)
    assert row["http_url"] == secured.admin.url
    assert (row["http_error"], row["metrics_error"]) == (None, None)
    assert (row["reported_read_only"], row["free_bytes"], row["total_bytes"]) == (False, 5, 9)
    assert secured.admin.authorizations == [f"Bearer {TOKEN}"] * 3


async def test_a_refused_probe_says_what_is_missing_and_never_the_token(
    secured: Secured, pki: Pki
) -> None:
    url = secured.admin.url
    row = await probed_row(secured, pki, None)
    assert row["http_error"] == (
        f"GET {url}/api/v1/bookie/state: HTTP 401: the bookie requires a token: start the "
        "dashboard with --auth-token-file (or BKEEPER_AUTH_TOKEN_FILE)"
    )
    assert row["metrics_error"].startswith(f"GET {url}/metrics: HTTP 401: the bookie requires")
    wrong = make_token(b"w" * 48, "dashboard", 86_400)
    row = await probed_row(secured, pki, wrong)
    assert row["http_error"] == (
        f"GET {url}/api/v1/bookie/state: HTTP 403: the bookie refused the dashboard's token "
        "(expired, or not signed by its secret?)"
    )
    assert wrong not in json.dumps(row)
    row = await probed_row(secured, None, TOKEN)  # the system's CAs: not the bookie's
    assert row["http_error"].startswith(f"{url}: TLS: certificate verify failed: ")
    assert row["http_error"].endswith("(the bookies' CA: --client-tls-ca or BKEEPER_TLS_CA)")
    assert TOKEN not in json.dumps(row)


@pytest.fixture
async def board(secured: Secured, pki: Pki) -> AsyncIterator[str]:
    dashboard = Dashboard(config(secured.cluster.uri, pki, TOKEN))
    url = await dashboard.start()
    try:
        yield url
    finally:
        await dashboard.aclose()


API = ("overview", "series", "ledgers", "logs", "recovery")


def holds_no_cluster_data(text: str, secured: Secured) -> None:
    assert secured.bookie_id not in text
    assert "bookie-0:3181" not in text
    assert secured.cluster.uri not in text
    assert "CLOSED" not in text and "ledger_id" not in text


async def test_without_the_token_the_api_answers_401_and_the_page_is_a_login_form(
    board: str, secured: Secured
) -> None:
    async with aiohttp.ClientSession() as http:
        for name in API:
            async with http.get(board + "api/" + name) as response:
                assert response.status == 401
                body = await response.json()
                assert body == {
                    "error": "login required: a session (log in at /) or "
                    "'Authorization: Bearer <token>'"
                }
        async with http.get(board) as response:
            assert response.status == 200
            page = await response.text()
        assert '<form id="login-form" method="post" action="/login">' in page
        holds_no_cluster_data(page, secured)
        async with http.get(board, cookies={SESSION_COOKIE: "made-up"}) as response:
            assert 'id="login-form"' in await response.text()
        async with http.get(board + "static/dashboard.js") as response:
            assert response.status == 200  # static files carry no data: open
        async with http.get(board + "api/overview", headers={"Authorization": "Basic x"}) as r:
            assert r.status == 401


async def test_a_bearer_token_opens_the_api_a_wrong_one_is_refused_without_data(
    board: str, secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = TOKEN[:-2] + ("AA" if not TOKEN.endswith("AA") else "BB")
    async with aiohttp.ClientSession() as http:
        for name in API:
            async with http.get(
                board + "api/" + name, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as response:
                assert response.status == 200, name
        async with http.get(
            board + "api/overview", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as response:
            overview = await response.json()
        assert secured.bookie_id in [b["bookie_id"] for b in overview["bookies"]]
        with caplog.at_level(logging.WARNING, logger="bkeeper.dashboard.app"):
            async with http.get(
                board + "api/ledgers", headers={"Authorization": f"Bearer {wrong}"}
            ) as response:
                assert response.status == 403
                text = await response.text()
        assert json.loads(text) == {"error": "token refused"}
        holds_no_cluster_data(text, secured)
    [line] = [r.getMessage() for r in caplog.records]
    assert line == "dashboard: bearer token from 127.0.0.1 refused: token refused"


async def test_logging_in_sets_a_session_cookie_and_logging_out_ends_it(
    board: str, secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    jar = aiohttp.CookieJar(unsafe=True)  # keeps cookies of an IP address (127.0.0.1)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        with caplog.at_level(logging.WARNING, logger="bkeeper.dashboard.app"):
            async with http.post(board + "login", data={"token": "wrong"}) as response:
                assert response.status == 403
                page = await response.text()
        assert '<p id="login-message" class="problem">token refused</p>' in page
        holds_no_cluster_data(page, secured)
        assert [r.getMessage() for r in caplog.records] == [
            "dashboard: login from 127.0.0.1 refused: token refused"
        ]
        assert len(http.cookie_jar) == 0

        async with http.post(
            board + "login", data={"token": TOKEN + "\n"}, allow_redirects=False
        ) as response:
            assert response.status == 303 and response.headers["Location"] == "/"
            cookie = response.headers["Set-Cookie"]
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {SESSION_COOKIE.lower(), "httponly", "path", "max-age", "samesite"} <= attributes
        assert "SameSite=Strict" in cookie and "Path=/" in cookie
        assert TOKEN not in cookie
        async with http.get(board) as response:
            page = await response.text()
        assert "<title>bkeeper dashboard</title>" in page
        assert '<form id="logout-form" method="post" action="/logout">' in page
        async with http.get(board + "api/overview") as response:
            assert response.status == 200
            overview = await response.json()
        assert secured.bookie_id in [b["bookie_id"] for b in overview["bookies"]]

        async with http.post(board + "logout", allow_redirects=False) as response:
            assert response.status == 303
        async with http.get(board + "api/overview") as response:
            assert response.status == 401


async def test_refused_logins_are_limited(board: str, secured: Secured) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(LOGIN_FAILURES_MAX):
            async with http.post(board + "login", data={"token": "wrong"}) as response:
                assert response.status == 403
        async with http.post(board + "login", data={"token": TOKEN}) as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) > 0
            page = await response.text()
        assert "too many refused attempts" in page
        holds_no_cluster_data(page, secured)
        async with http.get(board + "api/overview") as response:
            assert response.status == 401


async def test_nothing_served_holds_a_secret(board: str, secured: Secured) -> None:
    """The token, and the password of a ledger (from its metadata), in no answer."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        served = []
        for path in (f"api/{name}" for name in API):
            async with http.get(board + path) as response:
                assert response.status == 200, path
                served.append(await response.text())
    everything = "\n".join(served)
    assert f'"ledger_id": {secured.ledger_id}' in everything  # the ledger is shown ...
    encoded = (LEDGER_PASSWORD.hex(), base64.b64encode(LEDGER_PASSWORD).decode())
    for secret in (TOKEN, LEDGER_PASSWORD.decode(), *encoded, '"password"'):
        assert secret not in everything  # ... its password is not
    assert SECRET.decode() not in everything


async def test_without_a_token_the_dashboard_is_open(secured: Secured) -> None:
    dashboard = Dashboard(config(secured.cluster.uri, None, None))
    url = await dashboard.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "api/ledgers") as response:
                assert response.status == 200
                assert (await response.json())["ledgers"][0]["ledger_id"] == secured.ledger_id
            async with http.get(url) as response:
                page = await response.text()
            assert 'id="login-form"' not in page and "logout-form" in page  # hidden
            async with http.post(url + "login", data={"token": "x"}) as response:
                assert response.status == 404  # no login without a token
    finally:
        await dashboard.aclose()


def test_the_config_repr_holds_no_token() -> None:
    text = repr(config("memory://x/ledgers", None, TOKEN))
    assert TOKEN not in text
