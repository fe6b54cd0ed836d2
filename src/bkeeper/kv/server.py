"""A member of a replicated key-value store: the state machine on a log, served over HTTP/JSON.

Members of one store (``name``) share the log ``kv-<name>`` and elect a leader on it (see
:mod:`bkeeper.statemachine.machine`). Each member's election data is
``{"id": MEMBER_ID, "url": "http://HOST:PORT"}``, so members and clients find the leader and
every member (:func:`bkeeper.kv.client.members_from_store`).

HTTP API (JSON bodies; keys are URL path segments, percent-encoded as needed):

- ``GET /v1/kv/{key}[?stale=1]`` → 200 ``{"key", "value", "version"}``; 404 with
  ``"value": null, "version": 0`` when absent. Linearizable by default: served by the leader
  under its read lease (``read_lease_s``), else after a read barrier (see
  :mod:`bkeeper.statemachine.machine`); ``stale=1`` answers from any member's state as it is.
- ``PUT /v1/kv/{key}`` ``{"value", "request_id"?}`` → ``{"version"}``.
- ``DELETE /v1/kv/{key}[?request_id=ID]`` → ``{"existed"}``.
- ``POST /v1/cas/{key}`` ``{"expected_version", "value", "request_id"?}`` →
  ``{"applied", "version"}``.
- ``POST /v1/txn`` ``{"ops": [...], "request_id"?}`` → ``{"applied", "results"}`` (see
  :mod:`bkeeper.kv.state`).
- ``GET /v1/range?prefix=P&limit=N[&stale=1]`` → ``{"items": [{"key","value","version"}]}``.
- ``GET /v1/status`` → ``{"member", "url", "role", "leading", "leader", "applied", "keys",
  "snapshots_written", "snapshots_restored", "reader_restarts", ...}``.

A member that does not lead probes the leader's HTTP port every ``leader_probe_s`` and
deletes its election node when its connections are refused (its process died; see
:mod:`bkeeper.kv.detector`), so a new leader need not wait for ZooKeeper to expire the dead
one's session.

A member that does not lead answers a write (or a linearizable read) with 307 and
``{"error": "not the leader", "leader": URL | null}`` (``Location`` set when the leader is
known); a failure of the log answers 503 ``{"error": ...}``; bad input 400.

Authentication (``auth_token``, set by ``bkeeper kv serve`` from the member's own token, the
``--auth-token-file`` / ``BKEEPER_AUTH_TOKEN_FILE`` it uses as a client of a secure cluster):
when set, every route, ``/v1/status`` included, needs ``Authorization: Bearer <token>``
equal to the member's own token, compared in constant time (:func:`hmac.compare_digest`; as
the dashboard does, :mod:`bkeeper.dashboard.login`): a member holds no token secret, so it
cannot verify another token, and the holders of its own token could read the cluster anyway.
Without the header: 401 naming it and ``BKEEPER_AUTH_TOKEN_FILE``; with another token: 403
(the presented token is never echoed or logged). No route stays open: ``/v1/status`` names
the leader's URL and counts only, but nothing needs it unauthenticated (the crash detector
only opens a TCP connection to the leader's port, :mod:`bkeeper.kv.detector`; any HTTP
answer, a 401 too, means the process lives). Refusals are not rate-limited: a token cannot be
guessed, and a limit by address would let one misconfigured client on a host lock out the
others. Without ``auth_token`` the member is open, as before.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from bkeeper.common import bugs
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError, ConfigError, NotLeaderError
from bkeeper.kv.detector import CrashDetector
from bkeeper.kv.state import KvState, encode_command, validate_ops
from bkeeper.meta.store import NodeStore
from bkeeper.namedlog import NamedLogs
from bkeeper.statemachine import ReplicatedStateMachine, RsmConfig

__all__ = ["KvServer", "KvServerConfig", "log_name", "serve_member"]

log = logging.getLogger(__name__)

#: Items one range answer holds at most.
RANGE_LIMIT_MAX = 10_000
#: The largest request body (a write's JSON); larger ones are answered 413.
BODY_BYTES_MAX = 4 * 1024 * 1024
#: Connections waiting to be accepted (aiohttp's default, 128, drops SYNs when hundreds of
#: clients connect at once, and each drop costs the client a retransmission of 1 s or more).
LISTEN_BACKLOG = 1024


def log_name(store_name: str) -> str:
    """The named log of the store ``store_name``."""
    return f"kv-{store_name}"


@dataclass(frozen=True)
class KvServerConfig:
    name: str
    member_id: str
    host: str = "127.0.0.1"
    http_port: int = 0
    advertised_host: str | None = None
    append_timeout_s: float = 10.0
    snapshot_every_commands: int = 100_000
    snapshot_every_bytes: int = 64 * 1024 * 1024
    in_flight_max: int = 10_000
    #: 0: every linearizable read waits for a barrier (no clock assumption).
    read_lease_s: float = 0.5
    #: Seconds between a follower's probes of the leader's port (0: no crash detector).
    leader_probe_s: float = 0.1
    #: Non-empty: every request needs ``Authorization: Bearer <this>`` (module doc).
    auth_token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"name: must be non-empty without '/', got {self.name!r}")
        if not self.member_id:
            raise ConfigError("member_id: must not be empty")
        if not 0 <= self.http_port <= 65535:
            raise ConfigError(f"http_port: must be 0..65535, got {self.http_port}")
        if not 0 <= self.leader_probe_s <= 60:
            raise ConfigError(f"leader_probe_s: must be 0..60, got {self.leader_probe_s}")
        if self.auth_token and not self.auth_token.isascii():
            raise ConfigError("auth_token: not a token (not ASCII)")


def _json(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(doc, status=status, headers=headers)


#: The answers to a request without the member's token (module doc).
UNAUTHENTICATED = (
    "authentication required: send 'Authorization: Bearer <token>' with the token of this "
    "member's cluster (the file of --auth-token-file / BKEEPER_AUTH_TOKEN_FILE)"
)
FORBIDDEN = "the bearer token is not this member's token (BKEEPER_AUTH_TOKEN_FILE)"


def bearer_guard(token: str) -> Middleware:
    """An aiohttp middleware admitting only ``Authorization: Bearer <token>``."""
    expected = token.encode("ascii")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            challenge = {"WWW-Authenticate": 'Bearer realm="bkeeper kv"'}
            return _json({"error": UNAUTHENTICATED}, 401, challenge)
        if not hmac.compare_digest(presented.strip().encode("utf-8", "replace"), expected):
            return _json({"error": FORBIDDEN}, 403)
        return await handler(request)

    return guard


class KvServer:
    """One member: ``await start()`` (binds HTTP), ``await run(stop)``, ``await aclose()``."""

    def __init__(
        self,
        logs: NamedLogs,
        store: NodeStore,
        config: KvServerConfig,
        *,
        clock: Clock | None = None,
    ) -> None:
        """``clock``: the member's read lease and crash detector run on it (default: the
        system clock)."""
        self._logs = logs
        self._clock: Clock = clock or default_clock()
        self._store = store
        self._config = config
        self.state = KvState()
        self.url = ""
        self.rsm: ReplicatedStateMachine | None = None
        self.detector: CrashDetector | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Bind the HTTP server; its URL."""
        # No middleware at all on an open member: nothing per request when there is no token.
        guards = [bearer_guard(self._config.auth_token)] if self._config.auth_token else []
        app = web.Application(client_max_size=BODY_BYTES_MAX, middlewares=guards)
        app.add_routes(
            [
                web.get("/v1/kv/{key:.+}", self._get),
                web.put("/v1/kv/{key:.+}", self._put),
                web.delete("/v1/kv/{key:.+}", self._delete),
                web.post("/v1/cas/{key:.+}", self._cas),
                web.post("/v1/txn", self._txn),
                web.get("/v1/range", self._range),
                web.get("/v1/status", self._status),
            ]
        )
        app.on_response_prepare.append(self._date)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(
            runner, self._config.host, self._config.http_port, backlog=LISTEN_BACKLOG
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            where = f"{self._config.host}:{self._config.http_port}"
            raise ConfigError(f"http_port: cannot listen on {where}: {exc}") from exc
        self._runner = runner
        port = int(runner.addresses[0][1])
        host = self._config.advertised_host or self._config.host
        self.url = f"http://{host}:{port}"
        candidate = json.dumps({"id": self._config.member_id, "url": self.url}).encode()
        self.rsm = ReplicatedStateMachine(
            self._logs,
            self._store,
            self.state,
            RsmConfig(
                log_name=log_name(self._config.name),
                candidate=candidate,
                append_timeout_s=self._config.append_timeout_s,
                in_flight_max=self._config.in_flight_max,
                snapshot_every_commands=self._config.snapshot_every_commands,
                snapshot_every_bytes=self._config.snapshot_every_bytes,
                read_lease_s=self._config.read_lease_s,
            ),
            clock=self._clock,
        )
        return self.url

    async def run(self, stop: asyncio.Event) -> None:
        rsm = self.rsm
        assert rsm is not None, "start() first"
        if not self._config.leader_probe_s:
            await rsm.run(stop)
            return
        self.detector = CrashDetector(
            self._store,
            rsm.directory,
            self.url,
            self._config.leader_probe_s,
            lambda: rsm.leading,
            clock=self._clock,
        )
        detector = asyncio.create_task(self.detector.run(stop))
        try:
            await rsm.run(stop)
        finally:
            detector.cancel()
            (outcome,) = await asyncio.gather(detector, return_exceptions=True)
            if isinstance(outcome, Exception):
                log.error("the crash detector failed: %r", outcome)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- helpers --------------------------------------------------------------------
    async def _date(self, request: web.Request, response: web.StreamResponse) -> None:
        """The ``Date`` header from the member's clock (the simulator's is virtual)."""
        response.headers[hdrs.DATE] = formatdate(self._clock.wall_ms() / 1000.0, usegmt=True)

    def _machine(self) -> ReplicatedStateMachine:
        if self.rsm is None:
            raise NotLeaderError("the member is starting")
        return self.rsm

    async def _leader_url(self) -> str | None:
        try:
            data = await self._machine().leader()
        except BKeeperError:
            return None
        if data is None:
            return None
        try:
            url = json.loads(data)["url"]
        except (ValueError, KeyError, TypeError):
            return None
        return url if isinstance(url, str) else None

    async def _not_leader(self, request: web.Request, exc: NotLeaderError) -> web.Response:
        leader = await self._leader_url()
        headers = {}
        if leader is not None and leader != self.url:
            headers["Location"] = leader + request.rel_url.raw_path_qs
        else:
            leader = None
        return _json({"error": f"not the leader: {exc}", "leader": leader}, 307, headers)

    async def _write(self, request: web.Request, request_id: Any, ops: Any) -> web.Response:
        if request_id is not None and not isinstance(request_id, str):
            return _json({"error": "request_id: must be a string"}, 400)
        try:
            ops = validate_ops(ops)
            result = await self._machine().submit(encode_command(request_id, ops))
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        except NotLeaderError as exc:
            return await self._not_leader(request, exc)
        except BKeeperError as exc:
            return _json({"error": str(exc)}, 503)
        return _json(result)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            doc = await request.json()
        except ValueError as exc:
            raise ConfigError(f"body: not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError("body: must be a JSON object")
        return doc

    async def _read_ready(self, request: web.Request) -> web.Response | None:
        """None when this member may answer the read now (after a barrier unless stale)."""
        if request.query.get("stale") in ("1", "true"):
            return None
        if bugs.ACTIVE and bugs.active("kv-read-no-barrier"):
            return None
        try:
            rsm = self._machine()
            if rsm.lease_read():  # the caller reads the state with no await in between
                return None
            await rsm.read_barrier()
        except NotLeaderError as exc:
            return await self._not_leader(request, exc)
        except BKeeperError as exc:
            return _json({"error": str(exc)}, 503)
        return None

    # -- handlers -------------------------------------------------------------------
    async def _get(self, request: web.Request) -> web.Response:
        refused = await self._read_ready(request)
        if refused is not None:
            return refused
        key = request.match_info["key"]
        value, version = self.state.get(key)
        doc = {"key": key, "value": value, "version": version}
        return _json(doc, 200 if value is not None else 404)

    async def _put(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        op = {"op": "put", "key": request.match_info["key"], "value": body.get("value")}
        response = await self._write(request, body.get("request_id"), [op])
        return self._single(response)

    async def _delete(self, request: web.Request) -> web.Response:
        op = {"op": "delete", "key": request.match_info["key"]}
        return self._single(await self._write(request, request.query.get("request_id"), [op]))

    async def _cas(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        op = {
            "op": "cas",
            "key": request.match_info["key"],
            "expected_version": body.get("expected_version"),
            "value": body.get("value"),
        }
        return self._single(await self._write(request, body.get("request_id"), [op]))

    @staticmethod
    def _single(response: web.Response) -> web.Response:
        """A one-operation batch answers with its operation's result alone."""
        if response.status != 200 or response.text is None:
            return response
        return _json(json.loads(response.text)["results"][0])

    async def _txn(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        return await self._write(request, body.get("request_id"), body.get("ops"))

    async def _range(self, request: web.Request) -> web.Response:
        try:
            limit = int(request.query.get("limit", RANGE_LIMIT_MAX))
        except ValueError:
            return _json({"error": "limit: must be an integer"}, 400)
        if not 1 <= limit <= RANGE_LIMIT_MAX:
            return _json({"error": f"limit: must be 1..{RANGE_LIMIT_MAX}"}, 400)
        refused = await self._read_ready(request)
        if refused is not None:
            return refused
        prefix = request.query.get("prefix", "")
        items = [
            {"key": k, "value": v, "version": ver} for k, v, ver in self.state.items(prefix, limit)
        ]
        return _json({"items": items})

    async def _status(self, request: web.Request) -> web.Response:
        rsm = self.rsm
        if rsm is None:
            return _json({"error": "the member is starting"}, 503)
        return _json(
            {
                "member": self._config.member_id,
                "url": self.url,
                "role": rsm.role,
                "failure": None if rsm.failure is None else str(rsm.failure),
                "leading": rsm.leading,
                "leader": await self._leader_url(),
                "applied": None if rsm.applied is None else str(rsm.applied),
                "keys": len(self.state),
                "snapshots_written": rsm.snapshots_written,
                "snapshots_restored": rsm.snapshots_restored,
                "reader_restarts": rsm.reader_restarts,
                "lease_reads": rsm.lease_reads,
                "leader_probes": 0 if self.detector is None else self.detector.probes,
                "leaders_deposed": 0 if self.detector is None else self.detector.deposed,
            }
        )


async def serve_member(
    uri: str,
    config: KvServerConfig,
    session_ms: int,
    roll_bytes: int,
    stop: asyncio.Event,
    started: Callable[[str], None] = lambda url: None,
    clock: Clock | None = None,
) -> None:
    """One member of the store on the cluster at ``uri`` until ``stop`` is set (what ``bkeeper
    kv serve`` runs; the simulator's kv nodes too): its metadata session of ``session_ms``,
    its log's ledgers rolled at ``roll_bytes``; ``started(url)`` once it serves."""
    from bkeeper.client import BookKeeper, ClientConfig
    from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
    from bkeeper.meta.store import StoreConfig
    from bkeeper.namedlog import LogConfig

    store = StoreConfig(session_timeout_ms=session_ms)
    cluster = await ClusterMetadata.open(uri, MetadataConfig(store=store), require_cluster=True)
    try:
        async with BookKeeper(
            config=ClientConfig(explicit_lac_interval_ms=50), cluster=cluster, clock=clock
        ) as bk:
            logs = NamedLogs(bk, LogConfig(tail_poll_ms=200, roll_bytes=roll_bytes))
            server = KvServer(logs, cluster.store, config, clock=clock)
            url = await server.start()
            try:
                started(url)
                await server.run(stop)
            finally:
                await server.aclose()
    finally:
        await cluster.aclose()
