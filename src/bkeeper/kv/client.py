"""The Python client of the key-value store: asyncio (:class:`KvClient`) and blocking
(:class:`BlockingKvClient`).

The client knows the members' URLs (given, or read from the store's election with
:func:`members_from_store`). It sends each call to the member it believes leads; a member
that does not lead answers 307 naming the leader, and the client goes there. On a lost
connection, a 503 or a redirect to nobody (an election under way) it pauses and tries the
next member, until ``timeout_s``. Every write carries a request id (this client's id and a
sequence number) that stays the same across its retries, so a write retried after its
leader died is applied once (:mod:`bkeeper.kv.state`).

An error after ``timeout_s`` (:class:`~bkeeper.common.errors.StateMachineError`) leaves a
write's outcome unknown: it may have been applied.

Write coalescing (``coalesce_writes``, on by default): puts and deletes that are in flight at
the same time (no request id of the caller's) go to the store together, as one atomic batch
(``/v1/txn``) with one request id. That is linearizable: the batch takes effect at one instant
inside every one of its operations' call-to-return intervals. CAS is never coalesced (a CAS
that does not apply would cancel its batch).

Authentication: a client sends ``Authorization: Bearer <token>`` with every request (those
that follow a 307 to the leader too) when it has a token: ``auth_token``, else the token of
the process's client security (``bkeeper --auth-token-file`` / ``BKEEPER_AUTH_TOKEN_FILE``,
:func:`bkeeper.client.config.set_process_security`); ``auth_token=""`` sends none. A member
that refuses it (401, 403) is answered at once with
:class:`~bkeeper.common.errors.StateMachineError` naming what it requires (the token is
never part of a message).

Limits: ``timeout_s`` per call; ``attempt_timeout_s`` per HTTP request; ``pause_s`` between
rounds of attempts; ``CONNECTIONS_MAX`` HTTP connections; ``COALESCE_OPS_MAX`` operations and
``COALESCE_BYTES_MAX`` bytes per coalesced batch, ``COALESCE_BATCHES_MAX`` batches in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import TOKEN_PLUGIN
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ConfigError, NoNodeError, StateMachineError
from bkeeper.meta.store import NodeStore, join_path
from bkeeper.statemachine import election_path

__all__ = [
    "BlockingKvClient",
    "KvClient",
    "KvItem",
    "auth_headers",
    "members_from_store",
    "process_token",
]

#: HTTP connections one client keeps open at most (to all members together). At 256, 1,000
#: callers of one client waiting for connections saw a p99 of 10 s (the pool's waiters are
#: not served in order); at 1,024 their latency is their queueing, as expected.
CONNECTIONS_MAX = 1024
#: Operations one coalesced batch carries, and coalesced batches in flight, at most.
COALESCE_OPS_MAX = 1_000
COALESCE_BATCHES_MAX = 8
#: Bytes (keys and values) one coalesced batch carries at most (a larger lone write goes
#: alone); well under the server's request limit (``bkeeper.kv.server.BODY_BYTES_MAX``).
COALESCE_BYTES_MAX = 512 * 1024
OP_OVERHEAD_BYTES = 40


@dataclass(frozen=True)
class KvItem:
    key: str
    value: str | None
    version: int


def process_token() -> str:
    """The token of this process's client security ("" when it has none)."""
    auth = ClientConfig().auth
    return auth.token if auth is not None and auth.plugin == TOKEN_PLUGIN else ""


def auth_headers(token: str | None = None) -> dict[str, str]:
    """The headers that authenticate a request to a member: ``token``, else the process's
    (:func:`process_token`); none without a token."""
    token = process_token() if token is None else token
    return {"Authorization": f"Bearer {token}"} if token else {}


async def members_from_store(store: NodeStore, ledgers_root: str, name: str) -> list[str]:
    """The URLs of the store's members, the leader first (from their election nodes)."""
    from bkeeper.kv.server import log_name

    directory = election_path(ledgers_root, log_name(name))
    try:
        children = await store.children(directory)
    except NoNodeError:
        return []
    urls = []
    for child in sorted(children, key=lambda c: c[-10:]):
        try:
            data, _version = await store.get(join_path(directory, child))
            url = json.loads(data)["url"]
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue
        if isinstance(url, str) and url not in urls:
            urls.append(url)
    return urls


class KvClient:
    """``async with KvClient(urls) as kv: await kv.put("k", "v")`` (see the module docstring).
    ``discover``: called for fresh member URLs when every known member failed."""

    def __init__(
        self,
        urls: Sequence[str] = (),
        *,
        discover: Callable[[], Awaitable[list[str]]] | None = None,
        timeout_s: float = 30.0,
        attempt_timeout_s: float = 15.0,
        pause_s: float = 0.1,
        client_id: str | None = None,
        coalesce_writes: bool = True,
        auth_token: str | None = None,
        clock: Clock | None = None,
        connector: Callable[[], aiohttp.BaseConnector] | None = None,
    ) -> None:
        """``connector``: makes the HTTP connector (default: a TCP one, at most
        ``CONNECTIONS_MAX`` connections; the simulator's goes through its network)."""
        if not urls and discover is None:
            raise ConfigError("urls: give member URLs or a discover function")
        if timeout_s <= 0 or attempt_timeout_s <= 0 or pause_s <= 0:
            raise ConfigError("timeout_s, attempt_timeout_s and pause_s must be positive")
        self._urls = [u.rstrip("/") for u in urls]
        self._discover = discover
        self._timeout_s = timeout_s
        self._attempt_timeout_s = attempt_timeout_s
        self._pause_s = pause_s
        self._clock: Clock = clock or default_clock()
        self._connector = connector
        self.client_id = client_id or uuid.uuid4().hex
        self._sequence = itertools.count(1)
        self._leader: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._coalesce = coalesce_writes
        self._headers = auth_headers(auth_token)
        self._queue: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self._batch_slots = asyncio.Semaphore(COALESCE_BATCHES_MAX)
        self._flusher: asyncio.Task[None] | None = None
        self._batches: dict[asyncio.Task[None], None] = {}  # ordered, as TaskSet's
        #: Attempts that went to another member (redirects, failures), for tests and stats.
        self.retries = 0

    async def __aenter__(self) -> KvClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        tasks = [*self._batches, *([self._flusher] if self._flusher else [])]
        for task in tasks:
            task.cancel()
        # Not ``suppress(CancelledError)`` around each: that would also swallow the caller's
        # own cancellation (a Ctrl-C of ``bkeeper verify`` went on to the next run).
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def new_request_id(self) -> str:
        return f"{self.client_id}:{next(self._sequence)}"

    # -- the calls --------------------------------------------------------------------
    async def get(self, key: str, *, stale: bool = False) -> KvItem:
        doc = await self._call("GET", f"/v1/kv/{_key(key)}", query={"stale": "1"} if stale else {})
        return KvItem(key, doc["value"], doc["version"])

    async def put(self, key: str, value: str, *, request_id: str | None = None) -> int:
        if self._coalesce and request_id is None:
            op = {"op": "put", "key": key, "value": value}
            return int((await self._coalesced(op))["version"])
        body = {"value": value, "request_id": request_id or self.new_request_id()}
        return int((await self._call("PUT", f"/v1/kv/{_key(key)}", body=body))["version"])

    async def delete(self, key: str, *, request_id: str | None = None) -> bool:
        if self._coalesce and request_id is None:
            return bool((await self._coalesced({"op": "delete", "key": key}))["existed"])
        query = {"request_id": request_id or self.new_request_id()}
        return bool((await self._call("DELETE", f"/v1/kv/{_key(key)}", query=query))["existed"])

    async def cas(
        self, key: str, expected_version: int, value: str, *, request_id: str | None = None
    ) -> tuple[bool, int]:
        body = {
            "expected_version": expected_version,
            "value": value,
            "request_id": request_id or self.new_request_id(),
        }
        doc = await self._call("POST", f"/v1/cas/{_key(key)}", body=body)
        return bool(doc["applied"]), int(doc["version"])

    async def txn(self, ops: list[dict[str, Any]], *, request_id: str | None = None) -> Any:
        body = {"ops": ops, "request_id": request_id or self.new_request_id()}
        return await self._call("POST", "/v1/txn", body=body)

    async def range(
        self, prefix: str = "", *, limit: int = 10_000, stale: bool = False
    ) -> list[KvItem]:
        query = {"prefix": prefix, "limit": str(limit)}
        if stale:
            query["stale"] = "1"
        doc = await self._call("GET", "/v1/range", query=query)
        return [KvItem(i["key"], i["value"], i["version"]) for i in doc["items"]]

    async def status(self, url: str) -> Any:
        session = self._http()
        async with session.get(url.rstrip("/") + "/v1/status", headers=self._headers) as response:
            return await response.json()

    # -- write coalescing ---------------------------------------------------------------
    async def _coalesced(self, op: dict[str, Any]) -> Any:
        """The result of ``op``, sent in a batch with the writes in flight beside it."""
        if not op["key"]:
            raise ConfigError("key: must not be empty")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((op, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._queue:
                await self._batch_slots.acquire()
                count, size = 0, 0
                for op, _ in self._queue[:COALESCE_OPS_MAX]:
                    size += len(op["key"]) + len(op.get("value", "")) + OP_OVERHEAD_BYTES
                    if count and size > COALESCE_BYTES_MAX:
                        break
                    count += 1
                batch = self._queue[:count]
                del self._queue[:count]
                task = asyncio.create_task(self._send_batch(batch))
                self._batches[task] = None
                task.add_done_callback(self._batch_done)
        finally:
            self._flusher = None

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._batches.pop(task, None)

    async def _send_batch(self, batch: list[tuple[dict[str, Any], asyncio.Future[Any]]]) -> None:
        try:
            doc = await self.txn([op for op, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._batch_slots.release()
        for (_, future), result in zip(batch, doc["results"], strict=True):
            if not future.done():
                future.set_result(result)

    # -- leader finding and retries -----------------------------------------------------
    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = (
                self._connector()
                if self._connector
                else aiohttp.TCPConnector(limit=CONNECTIONS_MAX)
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _candidates(self) -> list[str]:
        urls = list(self._urls)
        if self._leader is not None:
            if self._leader in urls:
                urls.remove(self._leader)
            urls.insert(0, self._leader)
        return urls

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> Any:
        deadline = self._clock.monotonic() + self._timeout_s
        last_error = "no member answered"
        while True:
            if not self._urls and self._discover is not None:
                self._urls = [u.rstrip("/") for u in await self._discover()]
            for url in self._candidates():
                target: str | None = url
                while target is not None:
                    remaining = deadline - self._clock.monotonic()
                    if remaining <= 0:
                        unknown = "" if method == "GET" else "; the write's outcome is unknown"
                        raise StateMachineError(
                            f"kv {method} {path}: no answer within {self._timeout_s}s "
                            f"(last: {last_error}){unknown}"
                        )
                    try:
                        status, doc = await self._send(
                            method,
                            target + path,
                            query,
                            body,
                            min(remaining, self._attempt_timeout_s),
                        )
                    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                        last_error = f"{target}: {exc or type(exc).__name__}"
                        if self._leader == target:
                            self._leader = None
                        self.retries += 1
                        break
                    if status == 307:
                        leader = doc.get("leader") if isinstance(doc, dict) else None
                        last_error = f"{target}: not the leader"
                        self.retries += 1
                        if isinstance(leader, str) and leader != target:
                            self._leader = leader.rstrip("/")
                            if self._leader not in self._urls:
                                self._urls.append(self._leader)
                            target = self._leader
                            continue
                        break
                    if status == 503:
                        last_error = (
                            f"{target}: {doc.get('error') if isinstance(doc, dict) else doc}"
                        )
                        self.retries += 1
                        break
                    if status == 413:
                        raise ConfigError(
                            f"kv {method} {path}: the request is over the server's size limit"
                        )
                    if status == 400:
                        raise ConfigError(_error_of(doc))
                    if status in (401, 403):
                        # Every member holds the same token: another would refuse it too.
                        raise StateMachineError(
                            f"kv {method} {path}: {target} refused the request ({status}): "
                            f"{_error_of(doc)}"
                        )
                    if status in (200, 404):
                        if method != "GET" or "stale" not in (query or {}):
                            self._leader = target
                        return doc
                    raise StateMachineError(f"kv {method} {path}: {target} answered {status}")
            await asyncio.sleep(self._pause_s)
            if self._discover is not None:
                fresh = [u.rstrip("/") for u in await self._discover()]
                if fresh:
                    self._urls = fresh

    async def _send(
        self,
        method: str,
        url: str,
        query: dict[str, str] | None,
        body: dict[str, Any] | None,
        timeout_s: float,
    ) -> tuple[int, Any]:
        session = self._http()
        async with session.request(
            method,
            url,
            params=query,
            json=body,
            headers=self._headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            try:
                doc = await response.json(content_type=None)
            except ValueError:
                doc = {"error": await response.text()}
            return response.status, doc


def _error_of(doc: Any) -> str:
    return str(doc.get("error") if isinstance(doc, dict) else doc)


def _key(key: str) -> str:
    if not key:
        raise ConfigError("key: must not be empty")
    return quote(key, safe="")


class BlockingKvClient:
    """The blocking form of :class:`KvClient` (same calls, same arguments), on an event loop
    of its own; not for use inside a running event loop."""

    def __init__(self, urls: Sequence[str] = (), **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = KvClient(urls, **options)

    def __enter__(self) -> BlockingKvClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._client.aclose())
            self._loop.close()

    def _run(self, call: Awaitable[Any]) -> Any:
        return self._loop.run_until_complete(call)

    def get(self, key: str, *, stale: bool = False) -> KvItem:
        return self._run(self._client.get(key, stale=stale))  # type: ignore[no-any-return]

    def put(self, key: str, value: str, **options: Any) -> int:
        return self._run(self._client.put(key, value, **options))  # type: ignore[no-any-return]

    def delete(self, key: str, **options: Any) -> bool:
        return self._run(self._client.delete(key, **options))  # type: ignore[no-any-return]

    def cas(self, key: str, expected_version: int, value: str, **options: Any) -> tuple[bool, int]:
        return self._run(  # type: ignore[no-any-return]
            self._client.cas(key, expected_version, value, **options)
        )

    def txn(self, ops: list[dict[str, Any]], **options: Any) -> Any:
        return self._run(self._client.txn(ops, **options))

    def range(self, prefix: str = "", **options: Any) -> list[KvItem]:
        return self._run(self._client.range(prefix, **options))  # type: ignore[no-any-return]
