"""The security matrix (docs/security.md, "The matrix: every door without credentials"),
walked against one secure sandbox: TLS required, token authentication, ZooKeeper ACLs (as
``bkeeper sandbox --secure``), its bookies also taking admin writes (``--http-admin-writes``,
so that an admin route left open would change something) and running the dashboard.

Every door comes from the code, not from a list here: every request kind of ``bkeeper.wire``
(v3 ``OperationType``, v2 ``V2OpCode``), every route of the admin app the bookie builds, every
route of the dashboard's app, every ZooKeeper node under the cluster's root. Without
credentials none of them answers ledger data or ledger metadata, nor changes anything; with
them the documented reads answer. The doc's table must list exactly the doors the code has."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from bkeeper.admin import add_admin_routes
from bkeeper.admin.context import ClusterAdmin
from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.auth import ClientAuthConfig
from bkeeper.common.errors import BKeeperError
from bkeeper.common.tls import TlsClientConfig
from bkeeper.dashboard import Dashboard, DashboardConfig
from bkeeper.meta.uri import MetadataUri
from bkeeper.namedlog import NamedLogs, logs_root
from bkeeper.server import admin_http
from bkeeper.server.bookie import Bookie
from bkeeper.server.config import BookieConfig
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.wire.codes import OperationType, Protocol, StatusCode, V2OpCode
from bkeeper.wire.digest import DigestType
from bkeeper.wire.messages import AuthMessage, AuthRequest, AuthResponse, ReadRequest
from tests.security import matrix
from tests.security.conftest import BookieProcess
from tests.security.matrix import Answer, Target

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

Start = Callable[..., BookieProcess]

BOOKIES = 3
#: What the ledgers hold, and a marker of their metadata (custom metadata): neither may be
#: in any answer to a request without credentials.
PAYLOAD = b"matrix-payload-" + os.urandom(6).hex().encode()
METADATA_MARKER = b"matrix-metadata-" + os.urandom(6).hex().encode()
PASSWORD = b"matrix-password"
ENTRIES = 5
LOG_NAME = "matrix-log"


@dataclass
class Cluster:
    box: Sandbox
    tls: ssl.SSLContext
    token: str
    closed: Target
    open: Target
    #: A ledger for requests with credentials (they add to it, fence it).
    scratch: Target
    writer: WriteHandle
    ctimes: tuple[int, int]
    #: What the state routes answered (with the token) before the walk.
    states: dict[str, bytes]

    def bookie_port(self, index: int = 0) -> int:
        return self.box.bookie_address(index)[1]

    def admin_port(self, index: int = 0) -> int:
        address = self.box.admin_address(index)
        assert address is not None
        return address[1]

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    config = SandboxConfig(
        data_dir=tmp_path_factory.mktemp("matrix") / "sandbox",
        bookies=BOOKIES,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(BOOKIES),
        http_port_base=free_port_range(BOOKIES),
        dashboard_port=free_port(),
        secure=True,
        bookie_args=("--http-admin-writes",),
    )
    with Sandbox(config) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
async def cluster(box: Sandbox) -> AsyncIterator[Cluster]:
    """Two ledgers on every bookie written with credentials: one closed, one left open (its
    writer appends at the end of the walk: it is not fenced)."""
    security = box.security
    assert security is not None
    token = security.token_file.read_text().strip()
    config = ClientConfig(tls=TlsClientConfig(security.ca.cert), auth=ClientAuthConfig(token=token))
    tls = ssl.create_default_context(cafile=security.ca.cert)
    custom = {"matrix": METADATA_MARKER}
    async with BookKeeper(box.metadata_uri, config) as bk:
        targets = []
        handles = []
        for _ in range(3):
            handle = await bk.create_ledger(
                BOOKIES, BOOKIES, BOOKIES, "crc32c", PASSWORD, custom_metadata=custom
            )
            for _ in range(ENTRIES):
                await handle.append(PAYLOAD)
            handles.append(handle)
            targets.append(Target(handle.ledger_id, ENTRIES, PASSWORD, DigestType.CRC32C))
        await handles[0].close()
        await handles[2].close()
        await NamedLogs(bk).create(LOG_NAME)  # its node is outside the root
        ctimes = [(await bk.ledger_metadata(h.ledger_id)).ctime_ms for h in handles[:2]]
        states = await asyncio.to_thread(_states, box, tls, token)
        yield Cluster(box, tls, token, *targets, handles[1], (ctimes[0], ctimes[1]), states)
        with contextlib.suppress(BKeeperError):  # the writer may have failed a test
            await handles[1].close()


#: GETs of state a mutating route (PUT, POST, DELETE) changes, read before and after the walk.
STATE_ROUTES = (
    "/api/v1/bookie/state",
    "/api/v1/bookie/gc/suspend_compaction",
    "/api/v1/autorecovery/status",
    "/api/v1/autorecovery/lost_bookie_recovery_delay",
    "/api/v1/bookie/list_bookies",
)


def _states(box: Sandbox, tls: ssl.SSLContext, token: str) -> dict[str, bytes]:
    """What each state route answers, with the token, on every bookie."""
    found = {}
    for index in range(BOOKIES):
        address = box.admin_address(index)
        assert address is not None
        for path in STATE_ROUTES:
            answer = matrix.http(
                address[1], "GET", path, tls=tls, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status == 200, (path, answer)
            found[f"{index} {path}"] = answer.body
    return found


def leaks(cluster: Cluster, body: bytes) -> list[str]:
    """What of the ledgers' data or metadata, or of the cluster's secrets, ``body`` holds
    (raw, base64 or hex)."""
    found = []
    markers = {"ledger data": PAYLOAD, "ledger metadata": METADATA_MARKER}
    markers.update(_secrets(cluster))
    for what, marker in markers.items():
        for form in (marker, base64.b64encode(marker), marker.hex().encode()):
            if form in body:
                found.append(what)
    for ctime in cluster.ctimes:
        if str(ctime).encode() in body:
            found.append("ledger metadata (ctime)")
    return found


# -- the doc's table lists exactly the doors of the code ---------------------------------------
def _doc_doors() -> list[matrix.Door]:
    return matrix.matrix_doors(matrix.DOC.read_text())


def _admin_routes(tmp_path: Path) -> list[tuple[str, str]]:
    """The (method, path) routes of the admin app a bookie with a cluster builds (as
    ``bkeeper bookie --metadata ... --http-port ...`` does)."""
    config = BookieConfig(
        data_dir=str(tmp_path), port=0, http_port=0, metadata_uri="zk://127.0.0.1:1/ledgers"
    )
    bookie = Bookie(config)
    server = bookie.admin_server
    assert server is not None
    add_admin_routes(server, ClusterAdmin(config.metadata_uri, lambda: bookie.bookie_id))
    return server.routes()


def _dashboard_routes(head: bool = False) -> list[tuple[str, str]]:
    """The (method, path) routes of the dashboard of a secured cluster (HEAD, which aiohttp
    adds beside each GET, only if ``head``)."""
    config = DashboardConfig("zk://127.0.0.1:1/ledgers", auth=ClientAuthConfig(token="v1.e30.AAAA"))
    app = Dashboard(config).app()
    return sorted(
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if (head or route.method != "HEAD") and route.resource is not None
    )


def test_the_doc_lists_every_request_kind_of_the_wire() -> None:
    assert set(matrix.V3_REQUESTS) == set(OperationType), "a v3 operation without a request here"
    assert set(matrix.V2_REQUESTS) == set(V2OpCode), "a v2 opcode without a request here"
    doors = matrix.doors_of(_doc_doors(), "Bookie port")
    listed = sorted(d.door for d in doors)
    assert listed == sorted(
        [f"v3 {op.name}" for op in OperationType] + [f"v2 {op.name}" for op in V2OpCode]
    )
    assert [d.door for d in doors if d.open] == ["v3 START_TLS"]


def test_the_doc_lists_every_admin_route(tmp_path: Path) -> None:
    routes = _admin_routes(tmp_path)
    doors = matrix.doors_of(_doc_doors(), "Admin HTTP")
    assert sorted(d.door for d in doors) == sorted(f"{m} {p}" for m, p in routes)
    documented_open = {tuple(d.door.split(" ", 1)) for d in doors if d.open}
    assert documented_open == set(admin_http.OPEN_ROUTES)
    metrics = next(d for d in doors if d.door == "GET /metrics")
    assert "--http-metrics-open" in metrics.cells[0]


def test_the_doc_lists_every_dashboard_route() -> None:
    doors = matrix.doors_of(_doc_doors(), "Dashboard")
    assert sorted(d.door for d in doors) == sorted(f"{m} {p}" for m, p in _dashboard_routes())


# -- the bookie port ---------------------------------------------------------------------------
def _refused(protocol: Protocol, request: object, answer: Answer, tls: bool) -> str:
    """ "" when ``answer`` refuses ``request`` (a request sent without credentials); else what
    is wrong."""
    kind = type(request).__name__
    if answer.response is None:
        return ""  # closed
    if kind == "StartTlsRequest":
        expected = StatusCode.EBADREQ if tls else StatusCode.EOK
        return "" if answer.status is expected else f"START_TLS answered {answer.status}"
    if protocol is Protocol.V2 and isinstance(answer.response, AuthResponse):
        # v2's AUTH answer has no status: the proof is the next request, still refused.
        auth = answer.response.auth
        if auth is not None and auth.payload:
            return f"v2 AUTH answered a payload of {len(auth.payload)} bytes"
        then = answer.then
        if then is not None and then.response is not None and then.status is not StatusCode.EUA:
            return f"a READ after a v2 AUTH without credentials answered {then.status}"
        return ""
    if answer.status is not StatusCode.EUA:
        return f"answered {answer.status!r}"
    return ""


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "after-START_TLS"])
@pytest.mark.parametrize("protocol", [Protocol.V3, Protocol.V2])
async def test_every_request_kind_without_credentials_is_refused(
    cluster: Cluster, protocol: Protocol, tls: bool
) -> None:
    table = matrix.V3_REQUESTS if protocol is Protocol.V3 else matrix.V2_REQUESTS
    problems = []
    sent = 0
    for ledger in (cluster.closed, cluster.open):
        for kind, builders in table.items():
            for build in builders:
                request = build(ledger)
                follow = ReadRequest(ledger.ledger_id, 0) if kind == V2OpCode.AUTH else None
                answer = await matrix.exchange(
                    cluster.bookie_port(), protocol, request, cluster.tls if tls else None, follow
                )
                sent += 1
                wrong = _refused(protocol, request, answer, tls)
                raw = answer.raw + (answer.then.raw if answer.then else b"")
                leaked = leaks(cluster, raw)
                if wrong or leaked:
                    problems.append(f"{protocol.name} {kind.name} {request}: {wrong} {leaked}")
    assert sent >= 2 * len(table)
    assert not problems, "\n".join(problems)


#: What each request kind answers with credentials (docs/security.md, the matrix): served by
#: its handler, never EUA. Fenced by an earlier fencing read, adds are EFENCED.
SERVED_V3 = {
    OperationType.READ_ENTRY: {StatusCode.EOK, StatusCode.ENOENTRY},
    OperationType.ADD_ENTRY: {StatusCode.EOK, StatusCode.EFENCED},
    OperationType.RANGE_READ_ENTRY: {StatusCode.EBADREQ},
    OperationType.RANGE_ADD_ENTRY: {StatusCode.EBADREQ},
    OperationType.AUTH: {StatusCode.EOK},
    OperationType.WRITE_LAC: {StatusCode.EOK, StatusCode.EFENCED},
    OperationType.READ_LAC: {StatusCode.EOK},
    OperationType.GET_BOOKIE_INFO: {StatusCode.EOK},
    OperationType.START_TLS: {StatusCode.EBADREQ},  # TLS is on already
    OperationType.FORCE_LEDGER: {StatusCode.EOK},
    OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER: {StatusCode.EOK},
    OperationType.BATCH_READ_ENTRY: {StatusCode.EBADREQ},
}
SERVED_V2 = {
    V2OpCode.ADD_ENTRY: {StatusCode.EOK, StatusCode.EFENCED},
    V2OpCode.READ_ENTRY: {StatusCode.EOK, StatusCode.ENOENTRY},
    V2OpCode.AUTH: {StatusCode.EOK},
    V2OpCode.READ_LAC: {StatusCode.EBADREQ},
    V2OpCode.WRITE_LAC: {StatusCode.EBADREQ},
    V2OpCode.GET_BOOKIE_INFO: {StatusCode.EBADREQ},
    V2OpCode.BATCH_READ_ENTRY: {StatusCode.EOK, StatusCode.ENOENTRY},
}


@pytest.mark.parametrize("protocol", [Protocol.V3, Protocol.V2])
async def test_with_credentials_every_request_kind_is_served(
    cluster: Cluster, protocol: Protocol
) -> None:
    """The same requests, after TLS and AUTH with the token: each answered by its handler as
    the doc says (the refusals above are for want of credentials, not of a well-formed
    request), and a read answers the entry."""
    table = matrix.V3_REQUESTS if protocol is Protocol.V3 else matrix.V2_REQUESTS
    served = SERVED_V3 if protocol is Protocol.V3 else SERVED_V2
    assert set(served) == set(table)
    problems = []
    for kind, builders in table.items():
        for build in builders:
            request = build(cluster.scratch)
            if isinstance(request, AuthRequest):  # again, with the token this time
                auth = AuthMessage(matrix.TOKEN_PLUGIN, cluster.token.encode())
                request = AuthRequest(auth, txn_id=7)
            answer = await matrix.exchange(
                cluster.bookie_port(), protocol, request, cluster.tls, token=cluster.token
            )
            if answer.status not in served[kind]:
                problems.append(f"{protocol.name} {kind.name} {request}: {answer.status!r}")
    assert not problems, "\n".join(problems)
    read = await matrix.exchange(
        cluster.bookie_port(),
        protocol,
        ReadRequest(cluster.closed.ledger_id, 0, txn_id=7),
        cluster.tls,
        token=cluster.token,
    )
    assert read.status is StatusCode.EOK and PAYLOAD in read.raw, read


# -- the admin HTTP port -----------------------------------------------------------------------
#: Query strings the documented GETs take (the ledger's id filled in).
GET_QUERIES = {
    "/api/v1/ledger/read": "?ledger_id={ledger}",
    "/api/v1/ledger/metadata": "?ledger_id={ledger}",
    "/api/v1/ledger/list": "?print_metadata=true",
}


def _admin_walk(cluster: Cluster, tls: ssl.SSLContext | None) -> list[str]:
    """Every admin route of the code, without credentials: the problems found."""
    problems = []
    routes = _admin_routes(cluster.box.config.data_dir / "routes-probe")
    ledger = cluster.closed.ledger_id
    for method, path in routes:
        query = GET_QUERIES.get(path, "").format(ledger=ledger)
        if path == "/api/v1/ledger/delete":
            query = f"?ledger_id={ledger}"
        body = b"{}" if method != "GET" else None
        answer = matrix.http(cluster.admin_port(), method, path + query, tls=tls, body=body)
        leaked = leaks(cluster, answer.body)
        if leaked:
            problems.append(f"{method} {path}: {leaked}")
        is_open = (method, path) in admin_http.OPEN_ROUTES
        if tls is None:  # plain HTTP to an HTTPS port: nothing answered at all
            if answer.status is not None and answer.status < 400:
                problems.append(f"{method} {path} over plain HTTP: {answer.status}")
        elif is_open and answer.status is not None and 200 <= answer.status < 300:
            pass
        elif is_open:
            problems.append(f"{method} {path} (open): {answer}")
        elif answer.status != 401:
            problems.append(f"{method} {path}: {answer}")
    return problems


def test_every_admin_route_without_a_token_over_https(cluster: Cluster) -> None:
    problems = _admin_walk(cluster, cluster.tls)
    ledger = cluster.closed.ledger_id
    # Unknown paths, a method an open path does not serve, and open paths spelled to reach
    # closed ones: 401 all (no route but the open ones is answered without a token).
    for method, path in [
        ("GET", "/no/such/path"),
        ("DELETE", "/api/v1/no_such"),
        ("POST", "/heartbeat"),
        ("GET", "/heartbeat/"),
        ("GET", f"/api/v1/bookie/is_ready/../../ledger/read?ledger_id={ledger}"),
        ("GET", f"/heartbeat/%2e%2e/api/v1/ledger/read?ledger_id={ledger}"),
        ("GET", "//heartbeat/../api/v1/ledger/list?print_metadata=true"),
    ]:
        answer = matrix.http(cluster.admin_port(), method, path, tls=cluster.tls)
        if answer.status != 401 or leaks(cluster, answer.body):
            problems.append(f"{method} {path}: {answer} (not an open route: 401)")
    assert not problems, "\n".join(problems)


def test_every_admin_route_without_a_token_over_plain_http(cluster: Cluster) -> None:
    problems = _admin_walk(cluster, None)
    assert not problems, "\n".join(problems)


def _secrets(cluster: Cluster) -> dict[str, bytes]:
    """What no answer may hold, even to a client with the token: the token secret(s), the
    token itself, the ZooKeeper digest password, a ledger's password."""
    security = cluster.box.security
    assert security is not None
    found = {"the token": cluster.token.encode(), "the ledger password": PASSWORD}
    lines = security.token_secret_file.read_bytes().split()
    found.update({f"token secret {i}": line for i, line in enumerate(lines)})
    found["the digest password"] = security.digest_file.read_bytes().strip().partition(b":")[2]
    return found


#: The GETs whose documented answer, on this cluster, is not 200 (and a word of it).
NOT_200_WITH_TOKEN = {
    "/api/v1/autorecovery/bookie": (404, "no recover job since the bookie started"),
    "/api/v1/autorecovery/decommission": (404, "no decommission job since the bookie started"),
    "/api/v1/bookie/entry_location_compact": (501, "there is nothing to compact"),
}


def test_with_the_token_every_documented_get_answers(cluster: Cluster) -> None:
    routes = _admin_routes(cluster.box.config.data_dir / "routes-probe-2")
    ledger = cluster.closed.ledger_id
    auditor = "/api/v1/autorecovery/who_is_auditor"
    for _ in range(300):  # elected once a bookie's auto-recovery has started: bounded wait
        found = matrix.http(cluster.admin_port(), "GET", auditor, tls=cluster.tls,
                            headers=cluster.bearer)  # fmt: skip
        if found.status != 404:
            break
        time.sleep(0.1)
    problems = []
    bodies: dict[str, bytes] = {}
    for method, path in routes:
        if method != "GET":
            continue
        query = GET_QUERIES.get(path, "").format(ledger=ledger)
        answer = matrix.http(
            cluster.admin_port(), method, path + query, tls=cluster.tls, headers=cluster.bearer
        )
        bodies[path] = answer.body
        status, text = NOT_200_WITH_TOKEN.get(path, (200, ""))
        if answer.status != status or text.encode() not in answer.body:
            problems.append(f"GET {path}: {answer}, expected {status}")
        shown = [what for what in leaks(cluster, answer.body) if not what.startswith("ledger")]
        if shown:
            problems.append(f"GET {path} shows {shown}")
    assert not problems, "\n".join(problems)
    # The markers are found where they are: what the walk looks for would be seen.
    assert "ledger data" in leaks(cluster, bodies["/api/v1/ledger/read"])
    assert "ledger metadata" in leaks(cluster, bodies["/api/v1/ledger/metadata"])
    assert b"bkeeper_bookie_" in bodies["/metrics"]


def test_metrics_open_opens_metrics_alone(bookie_factory: Start, cluster: Cluster) -> None:
    """A bookie started with ``--http-metrics-open`` answers ``GET /metrics`` without a token
    (counters, no ledger data), and nothing else."""
    security = cluster.box.security
    assert security is not None
    bookie = bookie_factory(*security.bookie_args(), "--http-port", "0", "--http-metrics-open")
    found = re.search(r"\(admin https://127\.0\.0\.1:(\d+)\)", bookie.log())
    assert found is not None, bookie.log()
    port = int(found.group(1))
    metrics = matrix.http(port, "GET", "/metrics", tls=cluster.tls)
    assert metrics.status == 200 and b"bkeeper_bookie_" in metrics.body, metrics
    assert not leaks(cluster, metrics.body)
    for path in ("/api/v1/bookie/info", "/api/v1/config/server_config", "/no/such/path"):
        assert matrix.http(port, "GET", path, tls=cluster.tls).status == 401, path


def test_with_the_token_a_write_is_taken(cluster: Cluster) -> None:
    path = "/api/v1/bookie/state/readonly"
    answer = matrix.http(
        cluster.admin_port(), "PUT", path, tls=cluster.tls, headers=cluster.bearer,
        body=json.dumps({"readOnly": False}).encode(),
    )  # fmt: skip
    assert answer.status == 200, answer


# -- the metrics servers of processes without an admin port ----------------------------------
def test_the_autorecovery_metrics_server_shows_no_ledger(cluster: Cluster, tmp_path: Path) -> None:
    """``bkeeper autorecovery --metrics-port``: open (documented), counts only."""
    box = cluster.box
    assert box.security is not None
    log_path = tmp_path / "autorecovery.log"
    command = [
        sys.executable, "-m", "bkeeper", *box.security.client_args(), "autorecovery",
        "--metadata", box.metadata_uri, "--id", "matrix-probe", "--metrics-port", "0",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        found = None
        for _ in range(600):
            found = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics", log_path.read_text())
            if found is not None or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert found is not None, log_path.read_text()
        answer = matrix.http(int(found.group(1)), "GET", "/metrics")
        assert answer.status == 200 and b"bkeeper_autorecovery_" in answer.body, answer
        assert not leaks(cluster, answer.body)
    finally:
        proc.terminate()
        proc.wait(30)


async def test_a_clients_metrics_server_shows_no_ledger(cluster: Cluster) -> None:
    """``BookKeeper.start_metrics_server``: open (documented), counts by operation only."""
    box = cluster.box
    assert box.security is not None
    config = ClientConfig(
        tls=TlsClientConfig(box.security.ca.cert),
        auth=ClientAuthConfig(token=cluster.token),
        metrics=True,
    )
    async with BookKeeper(box.metadata_uri, config) as bk:
        handle = await bk.open_ledger(cluster.closed.ledger_id, PASSWORD)
        assert [e.data async for e in handle.read(0, 0)] == [PAYLOAD]
        port = bk.start_metrics_server(0)
        answer = await asyncio.to_thread(matrix.http, port, "GET", "/metrics")
    assert answer.status == 200 and b"bkeeper_client_read_entries_total" in answer.body, answer
    assert not leaks(cluster, answer.body)


# -- the dashboard -----------------------------------------------------------------------------
def _dashboard_port(cluster: Cluster) -> int:
    port = cluster.box.config.dashboard_port
    assert port is not None
    return port


def _cluster_markers(cluster: Cluster) -> list[bytes]:
    """What the dashboard shows of the cluster: its bookies' addresses, its instance id."""
    found = [f"127.0.0.1:{cluster.bookie_port(i)}".encode() for i in range(BOOKIES)]
    assert cluster.box.instance_id is not None
    return [*found, cluster.box.instance_id.encode()]


def _wait_dashboard_shows_the_ledgers(cluster: Cluster, credentials: dict[str, str]) -> None:
    """Until the dashboard (it reads metadata every 5 s) shows the ledgers (bounded)."""
    for _ in range(300):
        ledgers = matrix.http(_dashboard_port(cluster), "GET", "/api/ledgers", headers=credentials)
        assert ledgers.status == 200, ledgers
        if "ledger metadata (ctime)" in leaks(cluster, ledgers.body):
            return
        time.sleep(0.1)
    raise AssertionError(f"the dashboard does not show the ledgers: {ledgers.body[:500]!r}")


def test_the_dashboard_without_a_session_shows_nothing(cluster: Cluster) -> None:
    _wait_dashboard_shows_the_ledgers(cluster, cluster.bearer)  # it has something to show
    problems = []
    for method, path in _dashboard_routes(head=True):
        url = path.replace("{name}", "dashboard.js")
        body = b"token=" if path == "/login" else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
        answer = matrix.http(_dashboard_port(cluster), method, url, headers=headers, body=body)
        shown = [m for m in _cluster_markers(cluster) if m in answer.body]
        shown += [m.encode() for m in leaks(cluster, answer.body)]
        if shown:
            problems.append(f"{method} {url}: shows {shown}")
        if path.startswith("/api/") and answer.status != 401:
            problems.append(f"{method} {url}: {answer.status}, not 401")
        if (method, path) == ("GET", "/") and b"token" not in answer.body.lower():
            problems.append("GET / is not the login page")
    assert not problems, "\n".join(problems)


def test_the_dashboard_with_the_token_shows_the_cluster(cluster: Cluster) -> None:
    """With the bearer token, and with a session a login with the token opened."""
    port = _dashboard_port(cluster)
    answer = matrix.http(port, "GET", "/api/overview", headers=cluster.bearer)
    assert answer.status == 200, answer
    assert any(m in answer.body for m in _cluster_markers(cluster)), answer.body[:500]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    login = matrix.http(port, "POST", "/login", headers=form,
                        body=f"token={cluster.token}".encode())  # fmt: skip
    cookie = login.header("Set-Cookie")
    assert login.status == 303 and cookie is not None, login
    session = {"Cookie": cookie.split(";")[0]}
    page = matrix.http(port, "GET", "/", headers=session)
    assert page.status == 200 and b"logout" in page.body, page.status
    _wait_dashboard_shows_the_ledgers(cluster, session)


# -- ZooKeeper ---------------------------------------------------------------------------------
def _walk(zk: KazooClient, path: str) -> list[str]:
    found = [path]
    for child in zk.get_children(path):
        if path == "/" and child == "zookeeper":
            continue  # ZooKeeper's own
        found.extend(_walk(zk, f"{path.rstrip('/')}/{child}"))
    return found


def test_every_zookeeper_node_refuses_a_session_without_the_digest(cluster: Cluster) -> None:
    """Every node in ZooKeeper (the cluster's root, the named logs beside it, their parents):
    read and listed only with the cluster's digest identity; and the doc names every kind of
    node under the root."""
    box = cluster.box
    assert box.security is not None
    root = MetadataUri.parse(box.metadata_uri).root
    hosts = f"127.0.0.1:{box.config.zookeeper_port}"
    digest = box.security.digest_file.read_text().strip()
    owner = KazooClient(hosts, auth_data=[("digest", digest)])
    anonymous = KazooClient(hosts)
    owner.start(30)
    anonymous.start(30)
    try:
        nodes = _walk(owner, "/")
        assert f"{logs_root(root)}/{LOG_NAME}" in nodes
        assert any(n.endswith(f"L{cluster.closed.ledger_id:04d}") for n in nodes), nodes
        open_nodes = []
        for node in nodes[1:]:  # "/" is ZooKeeper's, world-readable
            for look in (anonymous.get, anonymous.get_children):
                try:
                    look(node)
                except NoAuthError:
                    continue
                open_nodes.append(f"{look.__name__} {node}")
        for change in (
            lambda: anonymous.create(f"{root}/intruder", b""),
            lambda: anonymous.set(root, b"x"),
            lambda: anonymous.delete(nodes[-1]),
        ):
            try:
                change()
            except NoAuthError:
                continue
            open_nodes.append("a change")
        assert not open_nodes, "\n".join(open_nodes)
        section = " ".join(d.door for d in matrix.doors_of(_doc_doors(), "ZooKeeper"))
        undocumented = [
            name
            for name in owner.get_children(root)
            if not name.isdigit() and f"<root>/{name}" not in section
        ]
        assert not undocumented, f"nodes under the root the matrix does not name: {undocumented}"
    finally:
        for zk in (owner, anonymous):
            zk.stop()
            zk.close()


# -- last: nothing changed ---------------------------------------------------------------------
async def test_nothing_the_walk_sent_changed_anything(cluster: Cluster, box: Sandbox) -> None:
    """After every door was tried without credentials: the ledgers are there with their
    entries and metadata, the open one's writer is not fenced, every bookie is writable."""
    assert box.security is not None
    config = ClientConfig(
        tls=TlsClientConfig(box.security.ca.cert), auth=ClientAuthConfig(token=cluster.token)
    )
    async with BookKeeper(box.metadata_uri, config) as bk:
        for target in (cluster.closed, cluster.open):
            meta = await bk.ledger_metadata(target.ledger_id)
            assert meta.custom_metadata.get("matrix") == METADATA_MARKER
        meta = await bk.ledger_metadata(cluster.closed.ledger_id)
        assert meta.state.name == "CLOSED" and meta.last_entry_id == ENTRIES - 1
        assert (await bk.ledger_metadata(cluster.open.ledger_id)).state.name == "OPEN"
        handle = await bk.open_ledger(cluster.closed.ledger_id, PASSWORD)
        entries = [e.data async for e in handle.read(0, ENTRIES - 1)]
        assert entries == [PAYLOAD] * ENTRIES
    assert await asyncio.to_thread(_states, box, cluster.tls, cluster.token) == cluster.states
    # Not fenced, and every bookie of its ensemble (all of them) takes adds.
    assert await cluster.writer.append(b"after the walk") == ENTRIES
    for index in range(BOOKIES):
        answer = matrix.http(
            cluster.admin_port(index), "GET", "/api/v1/bookie/state", tls=cluster.tls,
            headers=cluster.bearer,
        )  # fmt: skip
        assert answer.status == 200 and not json.loads(answer.body).get("readOnly"), answer
