"""The admin HTTP server and its routes over real TCP, with a fake bookie behind them: status
codes and JSON answers, and every kind of bad input refused with a JSON error naming it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

import pytest

from bkeeper.common.errors import AdminRequestError
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer, Routes
from bkeeper.server.admin_routes import BookieStatus, bookie_routes
from bkeeper.server.http_codec import HttpRequest, HttpResponse, json_response
from tests.server.admin_client import ANSWER_TIMEOUT_S, call, exchange, parse_answer, request_bytes

GC = "/api/v1/bookie/gc"
READY = BookieStatus(
    running=True,
    read_only=False,
    shutting_down=False,
    available_for_high_priority_writes=True,
    ready=True,
)


@dataclass(frozen=True)
class FakeReport:
    values: Mapping[str, object]

    def as_dict(self) -> Mapping[str, object]:
        return self.values


@dataclass
class FakeGc:
    """Records what it was asked; a pass waits for ``release`` when one is set."""

    runs: list[tuple[bool, bool]] = field(default_factory=list)
    suspended_major: bool = False
    suspended_minor: bool = False
    release: asyncio.Event | None = None
    finished: int = 0
    fail: Exception | None = None

    async def run_now(self, *, major: bool = False, minor: bool = False) -> FakeReport:
        self.runs.append((major, minor))
        if self.release is not None:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        self.finished += 1
        return FakeReport({"major": major, "minor": minor, "logs_removed": 3, "bytes_freed": 7})

    def suspend(self, *, major: bool, minor: bool) -> None:
        self.suspended_major |= major
        self.suspended_minor |= minor

    def resume(self, *, major: bool, minor: bool) -> None:
        self.suspended_major &= not major
        self.suspended_minor &= not minor

    def status(self) -> Mapping[str, object]:
        return {
            "running": False,
            "suspended_major": self.suspended_major,
            "suspended_minor": self.suspended_minor,
            "passes": len(self.runs),
        }


@dataclass
class FakeBookie:
    garbage_collector: FakeGc | None = field(default_factory=FakeGc)
    state: BookieStatus = READY
    bookie_id: str = "fake:3181"

    def status(self) -> BookieStatus:
        return self.state

    def disk_usage(self) -> tuple[int, int]:
        return 1000, 250


@dataclass
class Admin:
    server: AdminHttpServer
    bookie: FakeBookie

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def gc(self) -> FakeGc:
        assert self.bookie.garbage_collector is not None
        return self.bookie.garbage_collector


LIMITS = AdminHttpConfig(
    "127.0.0.1",
    0,
    connections_max=4,
    head_bytes_max=1024,
    headers_max=8,
    body_bytes_max=256,
    request_timeout_ms=60_000,  # only the slow-client tests wait for it: they shorten it
)
#: For the slow-client tests: their requests never complete, so they end at this timeout.
SHORT_TIMEOUT = replace(LIMITS, request_timeout_ms=300)


async def serve(config: AdminHttpConfig = LIMITS, routes: Routes | None = None) -> Admin:
    bookie = FakeBookie()
    server = AdminHttpServer(config, bookie_routes(bookie, routes))
    await server.start()
    return Admin(server, bookie)


@pytest.fixture
async def admin() -> AsyncIterator[Admin]:
    started = await serve()
    yield started
    await started.server.aclose()


@pytest.fixture
async def impatient_admin() -> AsyncIterator[Admin]:
    started = await serve(SHORT_TIMEOUT)
    yield started
    await started.server.aclose()


# -- endpoints ---------------------------------------------------------------------------------
async def test_state_info_heartbeat(admin: Admin) -> None:
    state = await call(admin.port, "GET", "/api/v1/bookie/state")
    assert (state.status, state.headers["content-type"]) == (200, "application/json")
    assert state.json() == {
        "running": True,
        "readOnly": False,
        "shuttingDown": False,
        "availableForHighPriorityWrites": True,
    }
    info = await call(admin.port, "GET", "/api/v1/bookie/info")
    assert (info.status, info.json()) == (200, {"freeSpace": 250, "totalSpace": 1000})
    beat = await call(admin.port, "GET", "/heartbeat")
    assert (beat.status, beat.body) == (200, b"OK\n")


async def test_is_ready_is_200_or_503_saying_why(admin: Admin) -> None:
    ready = await call(admin.port, "GET", "/api/v1/bookie/is_ready")
    assert (ready.status, ready.json()) == (200, {"ready": True})
    admin.bookie.state = replace(READY, ready=False, not_ready_reason="not registered yet")
    waiting = await call(admin.port, "GET", "/api/v1/bookie/is_ready")
    assert waiting.status == 503
    assert waiting.json() == {"ready": False, "error": "not registered yet", "status": 503}


async def test_gc_status_and_details(admin: Admin) -> None:
    status = await call(admin.port, "GET", GC)
    expected = {"running": False, "suspended_major": False, "suspended_minor": False, "passes": 0}
    assert (status.status, status.json()) == (200, expected)
    details = await call(admin.port, "GET", "/api/v1/bookie/gc_details")
    assert (details.status, details.json()) == (200, [expected])


@pytest.mark.parametrize(
    ("body", "run"),
    [
        (None, (False, False)),
        (b"", (False, False)),
        ({}, (False, False)),
        ({"forceMajor": True}, (True, False)),
        ({"forceMinor": True}, (False, True)),
        ({"forceMajor": True, "forceMinor": False}, (True, False)),
    ],
)
async def test_put_gc_runs_a_pass_and_answers_its_report(admin: Admin, body, run) -> None:
    answer = await call(admin.port, "PUT", GC, body)
    assert answer.status == 200
    assert answer.json() == {
        "major": run[0],
        "minor": run[1],
        "logs_removed": 3,
        "bytes_freed": 7,
    }
    assert admin.gc.runs == [run]


async def test_put_gc_answers_once_the_pass_is_over(admin: Admin) -> None:
    admin.gc.release = asyncio.Event()
    answer = asyncio.ensure_future(call(admin.port, "PUT", GC, {"forceMajor": True}))
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while not admin.gc.runs:
            await asyncio.sleep(0.01)
    assert not answer.done() and admin.gc.finished == 0
    admin.gc.release.set()
    assert (await answer).json()["major"] is True
    assert admin.gc.finished == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{bad", "the body is not JSON: Expecting property name enclosed in double quotes"),
        (b"\xff\xfe", "the body is not UTF-8 text"),
        (b"[true]", "the body must be a JSON object, got list"),
        ({"forceMajor": "yes"}, "forceMajor: must be true or false, got 'yes'"),
        ({"forceMajor": 1}, "forceMajor: must be true or false, got 1"),
        ({"major": True}, "unknown field 'major' in the body; expected forceMajor, forceMinor"),
    ],
)
async def test_a_bad_gc_body_is_400_naming_it(admin: Admin, body, message: str) -> None:
    answer = await call(admin.port, "PUT", GC, body)
    assert answer.status == 400
    assert answer.error.startswith(message), answer.error
    assert admin.gc.runs == []


async def test_suspend_and_resume_compaction(admin: Admin) -> None:
    suspend = f"{GC}/suspend_compaction"
    resume = f"{GC}/resume_compaction"
    answer = await call(admin.port, "PUT", suspend, {"suspendMajor": True})
    assert answer.json() == {"isMajorGcSuspended": True, "isMinorGcSuspended": False}
    answer = await call(admin.port, "PUT", suspend, {"suspendMinor": True})
    assert answer.json() == {"isMajorGcSuspended": True, "isMinorGcSuspended": True}
    assert (await call(admin.port, "GET", suspend)).json() == answer.json()
    answer = await call(admin.port, "PUT", resume, {"resumeMajor": True, "resumeMinor": False})
    assert answer.json() == {"isMajorGcSuspended": False, "isMinorGcSuspended": True}
    assert (await call(admin.port, "GET", resume)).json() == answer.json()
    assert (admin.gc.suspended_major, admin.gc.suspended_minor) == (False, True)

    nothing = await call(admin.port, "PUT", suspend, {"suspendMajor": False})
    assert (nothing.status, nothing.error) == (
        400,
        "nothing to suspend: set suspendMajor or suspendMinor",
    )
    wrong = await call(admin.port, "PUT", resume, {"suspendMajor": True})
    assert wrong.status == 400
    assert (
        wrong.error == "unknown field 'suspendMajor' in the body; expected resumeMajor, resumeMinor"
    )


async def test_without_a_garbage_collector_gc_is_503(admin: Admin) -> None:
    admin.bookie.garbage_collector = None
    for method, path in (("GET", GC), ("PUT", GC), ("GET", "/api/v1/bookie/gc_details")):
        answer = await call(admin.port, method, path)
        assert (answer.status, answer.error) == (503, "bookie fake:3181 runs no garbage collector")


async def test_a_failed_pass_is_500_and_the_server_serves_on(admin: Admin) -> None:
    admin.gc.fail = RuntimeError("the disk caught fire")
    answer = await call(admin.port, "PUT", GC)
    assert (answer.status, answer.error) == (500, "RuntimeError: the disk caught fire")
    assert (await call(admin.port, "GET", GC)).status == 200


# -- routing -------------------------------------------------------------------------------------
async def test_unknown_path_is_404_and_wrong_method_is_405(admin: Admin) -> None:
    missing = await call(admin.port, "GET", "/api/v1/bookie/nope")
    assert (missing.status, missing.error) == (404, "no such path: /api/v1/bookie/nope")
    wrong = await call(admin.port, "DELETE", GC)
    assert (wrong.status, wrong.error) == (405, f"DELETE is not served on {GC}; use GET, PUT")
    assert wrong.headers["allow"] == "GET, PUT"
    post = await call(admin.port, "POST", "/api/v1/bookie/state")
    assert (post.status, post.headers["allow"]) == (405, "GET")


async def test_the_route_table_takes_more_routes() -> None:
    routes = Routes()

    async def metrics(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, f"up {request.query.get('x')}\n".encode(), "text/plain")

    async def echo(request: HttpRequest) -> HttpResponse:
        return json_response({"path": request.path, "query": dict(request.query)})

    routes.add("GET", "/metrics", metrics)
    routes.add("GET", "/a b", echo)
    with pytest.raises(ValueError, match="GET /metrics: a route is there already"):
        routes.add("GET", "/metrics", metrics)
    admin = await serve(routes=routes)
    try:
        answer = await call(admin.port, "GET", "/metrics?x=1&x=2")
        assert (answer.status, answer.body, answer.headers["content-type"]) == (
            200,
            b"up 2\n",
            "text/plain",
        )
        echoed = await call(admin.port, "GET", "/a%20b?k=v&empty=")
        assert echoed.json() == {"path": "/a b", "query": {"k": "v", "empty": ""}}
        assert (await call(admin.port, "GET", GC)).status == 200  # the bookie's routes too
    finally:
        await admin.server.aclose()


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GET /x\r\n\r\n", 400, "malformed request line 'GET /x'"),
        (b"GET  /x HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        (b"GET /x HTTP/2.0\r\n\r\n", 505, "HTTP/2.0 is not served: HTTP/1.1 or HTTP/1.0"),
        (b"GET /x SPDY\r\n\r\n", 400, "malformed request line 'GET /x SPDY'"),
        (b"GET http://h/x HTTP/1.1\r\n\r\n", 400, "target 'http://h/x' is not a path"),
        (b"GET /x HTTP/1.1\r\nNo-Colon\r\n\r\n", 400, "malformed header line 'No-Colon'"),
        (b"GET /x HTTP/1.1\r\n Folded: x\r\n\r\n", 400, "malformed header line ' Folded: x'"),
        (b"GET /\xe9 HTTP/1.1\r\n\r\n", 400, "the request head is not ASCII text"),
        (b"PUT /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length '-1' is not"),
        (
            b"PUT /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "Content-Length '1, 2' is not a byte count",
        ),
        (
            b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            501,
            "Transfer-Encoding is not supported: send the body with Content-Length",
        ),
        (
            b"GET /x HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(9)) + b"\r\n",
            431,
            "9 header lines, more than 8 (headers_max)",
        ),
        (
            b"GET /x HTTP/1.1\r\nX: " + b"v" * 1100 + b"\r\n\r\n",
            431,
            "request line and headers exceed 1024 bytes (head_bytes_max)",
        ),
        (
            b"GET /x?" + b"&".join(b"k%d=v" % i for i in range(65)) + b" HTTP/1.1\r\n\r\n",
            400,
            "more than 64 query parameters (QUERY_FIELDS_MAX)",
        ),
    ],
)
async def test_bad_requests_are_refused_naming_the_problem(
    admin: Admin, raw: bytes, status: int, message: str
) -> None:
    answer = await exchange(admin.port, raw)
    assert answer.status == status
    assert answer.error.startswith(message), answer.error
    assert (await call(admin.port, "GET", GC)).status == 200  # and it serves on


async def test_an_oversized_body_is_413_before_it_is_sent(admin: Admin) -> None:
    # Only the head is sent: the answer comes from Content-Length alone.
    answer = await exchange(
        admin.port, b"PUT /api/v1/bookie/gc HTTP/1.1\r\nContent-Length: 257\r\n\r\n"
    )
    assert (answer.status, answer.error) == (
        413,
        "a body of 257 bytes, more than 256 (body_bytes_max)",
    )
    assert admin.gc.runs == []
    fits = await call(admin.port, "PUT", GC, b" " * 200 + b'{"forceMinor": true}')
    assert fits.status == 200 and admin.gc.runs == [(False, True)]


async def test_a_head_without_its_end_is_431_once_past_the_limit(admin: Admin) -> None:
    answer = await exchange(admin.port, b"GET /" + b"x" * 2000)
    assert (answer.status, answer.error) == (
        431,
        "request line and headers exceed 1024 bytes (head_bytes_max)",
    )


@pytest.mark.parametrize(
    "partial",
    [b"", b"GET /api/v1/bo", b"PUT /api/v1/bookie/gc HTTP/1.1\r\nContent-Length: 10\r\n\r\n{"],
)
async def test_a_slow_client_is_answered_408_and_closed(
    impatient_admin: Admin, partial: bytes
) -> None:
    admin = impatient_admin
    answer = await exchange(admin.port, partial)  # and nothing more: read until closed
    assert (answer.status, answer.error) == (
        408,
        "the request was not complete within 300 ms (request_timeout_ms)",
    )
    assert admin.gc.runs == []
    assert (await call(admin.port, "GET", GC)).status == 200  # and it serves on


async def test_a_request_sent_a_byte_at_a_time_in_time_is_served(admin: Admin) -> None:
    raw = request_bytes("PUT", GC, b'{"forceMajor": true}')
    reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
    try:
        for byte in raw:
            writer.write(bytes([byte]))
            await writer.drain()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            answer = parse_answer(await reader.read())
    finally:
        writer.close()
    assert answer.status == 200 and admin.gc.runs == [(True, False)]


async def test_a_client_that_closes_its_side_after_the_request_gets_the_answer(
    admin: Admin,
) -> None:
    admin.gc.release = asyncio.Event()  # the answer comes after the client's end of stream
    raw = request_bytes("PUT", GC, b"{}")
    answer = asyncio.ensure_future(exchange(admin.port, raw, half_close=True))
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while not admin.gc.runs:
            await asyncio.sleep(0.01)
    admin.gc.release.set()
    assert (await answer).status == 200


async def test_one_connection_past_the_limit_is_503(admin: Admin) -> None:
    idle = [await asyncio.open_connection("127.0.0.1", admin.port) for _ in range(4)]
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            while admin.server.connections < 4:
                await asyncio.sleep(0.01)
        refused = await call(admin.port, "GET", GC)
        assert (refused.status, refused.error) == (
            503,
            "4 admin connections open already (connections_max)",
        )
    finally:
        for _, writer in idle:
            writer.close()
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while admin.server.connections:
            await asyncio.sleep(0.01)
    assert (await call(admin.port, "GET", GC)).status == 200


async def test_a_pass_goes_on_when_its_client_leaves(admin: Admin) -> None:
    admin.gc.release = asyncio.Event()
    _reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
    writer.write(request_bytes("PUT", GC, b"{}"))
    await writer.drain()
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while not admin.gc.runs:
            await asyncio.sleep(0.01)
    writer.close()
    await writer.wait_closed()
    admin.gc.release.set()
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while admin.gc.finished == 0:
            await asyncio.sleep(0.01)
    assert (await call(admin.port, "GET", GC)).json()["passes"] == 1


async def test_close_cancels_a_request_under_way() -> None:
    admin = await serve()
    admin.gc.release = asyncio.Event()  # never set
    answer = asyncio.ensure_future(call(admin.port, "PUT", GC))
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        while not admin.gc.runs:
            await asyncio.sleep(0.01)
    await admin.server.aclose()
    with pytest.raises(ConnectionError, match="closed without an answer"):
        await answer
    assert admin.gc.finished == 0 and admin.server.connections == 0


def test_limits_are_validated_naming_the_field() -> None:
    from bkeeper.common.errors import ConfigError

    with pytest.raises(ConfigError, match="body_bytes_max: must be a positive integer, got 0"):
        AdminHttpConfig("127.0.0.1", 0, body_bytes_max=0)
    with pytest.raises(ConfigError, match=r"http_port: 70000 is not a TCP port \(0..65535\)"):
        AdminHttpConfig("127.0.0.1", 70000)


def test_the_error_carries_its_status() -> None:
    error = AdminRequestError(413, "too big")
    assert (error.status, str(error)) == (413, "too big")
