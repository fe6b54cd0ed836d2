"""The admin HTTP server and its routes over real TCP, with a fake bookie behind them: status
codes and JSON answers, and every kind of bad input refused with a JSON error naming it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

import pytest
from aiohttp import web

from bkeeper.common.errors import AdminRequestError
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
from bkeeper.server.admin_request import json_response
from bkeeper.server.admin_routes import BookieStatus, add_bookie_routes
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
    writes_enabled=True,
    connections_max=4,
    head_bytes_max=1024,
    headers_max=8,
    body_bytes_max=256,
    request_timeout_ms=60_000,  # only the slow-client tests wait for it: they shorten it
)
#: For the slow-client tests: their requests never complete, so they end at this timeout.
SHORT_TIMEOUT = replace(LIMITS, request_timeout_ms=300)


async def serve(config: AdminHttpConfig = LIMITS, server: AdminHttpServer | None = None) -> Admin:
    bookie = FakeBookie()
    server = AdminHttpServer(config) if server is None else server
    add_bookie_routes(bookie, server)
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


async def test_a_request_aiohttp_cannot_parse_is_one_log_line(admin: Admin, caplog) -> None:
    caplog.set_level("INFO", logger="bkeeper.server.admin_http")
    reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
    try:
        writer.write(b"GET /x HTTP/1.1\r\nHost: b\r\nNo-Colon\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            await reader.read()
    finally:
        writer.close()
    lines = [r for r in caplog.records if r.name == "bkeeper.server.admin_http"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert not lines[0].exc_info and "\n" not in lines[0].getMessage()
    assert lines[0].getMessage().startswith("admin http: Error handling request from 127.0.0.1")
    assert "refused: 400, message: Invalid header" in lines[0].getMessage(), lines[0].getMessage()


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


async def test_more_routes_are_added_before_start() -> None:
    server = AdminHttpServer(LIMITS)

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"up {request.query.getone('x')}\n", content_type="text/plain")

    async def echo(request: web.Request) -> web.StreamResponse:
        return json_response({"path": request.path, "query": dict(request.query)})

    server.add_route("GET", "/metrics", metrics)
    server.add_route("GET", "/a b", echo)
    with pytest.raises(ValueError, match="GET /metrics: a route is there already"):
        server.add_route("GET", "/metrics", metrics)
    admin = await serve(server=server)
    try:
        with pytest.raises(RuntimeError, match="routes are added before the server starts"):
            server.add_route("GET", "/late", metrics)
        answer = await call(admin.port, "GET", "/metrics?x=1&x=2")
        assert (answer.status, answer.body) == (200, b"up 1\n")
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        echoed = await call(admin.port, "GET", "/a%20b?k=v&empty=")
        assert echoed.json() == {"path": "/a b", "query": {"k": "v", "empty": ""}}
        assert (await call(admin.port, "GET", GC)).status == 200  # the bookie's routes too
        assert (await call(admin.port, "GET", "/late")).status == 404
    finally:
        await admin.server.aclose()


async def test_a_handler_past_its_time_limit_is_503_and_gc_has_none() -> None:
    server = AdminHttpServer(replace(LIMITS, handler_timeout_ms=200))
    never = asyncio.Event()

    async def stuck(request: web.Request) -> web.StreamResponse:
        await never.wait()
        raise AssertionError("never set")

    server.add_route("GET", "/stuck", stuck)
    admin = await serve(server=server)
    try:
        admin.gc.release = asyncio.Event()  # a pass that outlasts the limit
        passing = asyncio.ensure_future(call(admin.port, "PUT", GC, {}))
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            while not admin.gc.runs:
                await asyncio.sleep(0.01)
        # Started after the pass and cut at 200 ms: the pass has run longer than the limit.
        answer = await call(admin.port, "GET", "/stuck")
        assert (answer.status, answer.error) == (
            503,
            "GET /stuck did not finish within 200 ms (handler_timeout_ms)",
        )
        assert not passing.done()
        admin.gc.release.set()
        assert (await passing).status == 200 and admin.gc.finished == 1
    finally:
        await admin.server.aclose()


# -- writes ----------------------------------------------------------------------------------------
async def test_without_writes_enabled_mutating_requests_are_403_naming_the_option() -> None:
    admin = await serve(replace(LIMITS, writes_enabled=False))
    try:
        for path in (GC, f"{GC}/suspend_compaction", f"{GC}/resume_compaction"):
            answer = await call(admin.port, "PUT", path, {"suspendMajor": True})
            assert answer.status == 403
            assert answer.error == (
                f"PUT {path} changes the bookie or the cluster: the admin server takes no "
                "such request unless started with http_admin_writes (--http-admin-writes)"
            )
        assert admin.gc.runs == [] and not admin.gc.suspended_major
        assert (await call(admin.port, "GET", GC)).status == 200  # reads are served
        assert (await call(admin.port, "DELETE", GC)).status == 405  # no such route first
    finally:
        await admin.server.aclose()


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /x SPDY\r\nHost: b\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET /x HTTP/1.1\r\nHost: b\r\nNo-Colon\r\n\r\n", 400),
        (b"PUT /x HTTP/1.1\r\nHost: b\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(9)) + b"\r\n", 400),
        (b"GET /x HTTP/1.1\r\nHost: b\r\nX: " + b"v" * 1100 + b"\r\n\r\n", 400),
    ],
)
async def test_malformed_requests_are_refused_and_the_server_serves_on(
    admin: Admin, raw: bytes, status: int
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            first = await reader.readline()
    finally:
        writer.close()
    assert first.split(b" ")[1] == str(status).encode(), first
    assert (await call(admin.port, "GET", GC)).status == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{bad", "the body is not JSON: Expecting property name enclosed in double quotes"),
        (b"\xff\xfe", "the body is not UTF-8 text"),
        (b"[true]", "the body must be a JSON object, got list"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_400(admin: Admin, body, message) -> None:
    answer = await call(admin.port, "PUT", f"{GC}/suspend_compaction", body)
    assert answer.status == 400 and answer.error.startswith(message), answer.error


async def test_an_oversized_body_is_413_before_it_is_sent(admin: Admin) -> None:
    # Only the head is sent: the answer comes from Content-Length alone.
    answer = await exchange(
        admin.port,
        b"PUT /api/v1/bookie/gc HTTP/1.1\r\nHost: b\r\nConnection: close\r\nContent-Length: 257\r\n\r\n",
    )
    assert (answer.status, answer.error) == (
        413,
        "a body of 257 bytes, more than 256 (body_bytes_max)",
    )
    assert admin.gc.runs == []
    fits = await call(admin.port, "PUT", GC, b" " * 200 + b'{"forceMinor": true}')
    assert fits.status == 200 and admin.gc.runs == [(False, True)]


async def test_an_oversized_chunked_body_is_413(admin: Admin) -> None:
    chunk = b"x" * 300
    raw = (
        b"PUT /api/v1/bookie/gc HTTP/1.1\r\nHost: b\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(chunk)
        + chunk
        + b"\r\n0\r\n\r\n"
    )
    answer = await exchange(admin.port, raw)
    assert (answer.status, answer.error) == (413, "a body of more than 256 bytes (body_bytes_max)")
    assert admin.gc.runs == []


async def test_a_slow_body_is_answered_408(impatient_admin: Admin) -> None:
    admin = impatient_admin
    partial = b"PUT /api/v1/bookie/gc HTTP/1.1\r\nHost: b\r\nConnection: close\r\nContent-Length: 10\r\n\r\n{"
    answer = await exchange(admin.port, partial)  # and nothing more
    assert (answer.status, answer.error) == (
        408,
        "the body was not complete within 300 ms (request_timeout_ms)",
    )
    assert admin.gc.runs == []
    assert (await call(admin.port, "GET", GC)).status == 200  # and it serves on


@pytest.mark.parametrize("partial", [b"", b"GET /api/v1/bo"])
async def test_a_connection_without_a_whole_head_in_time_is_closed(
    impatient_admin: Admin, partial: bytes
) -> None:
    admin = impatient_admin
    reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
    try:
        writer.write(partial)
        await writer.drain()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            assert await reader.read() == b""  # closed by the server
    finally:
        writer.close()
    assert (await call(admin.port, "GET", GC)).status == 200


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
    with pytest.raises(ConnectionError):
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
