"""The key-value store's HTTP port with a token: every route refuses a request without the
member's token (401) or with another (403), serves it with the token, and the client (which
follows 307s to the leader with the header) works end to end. Members in-process over real
HTTP on localhost, on the in-memory cluster."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from bkeeper.client.config import set_process_security
from bkeeper.common.auth import ClientAuthConfig
from bkeeper.common.errors import StateMachineError
from bkeeper.kv import KvClient
from bkeeper.kv.client import auth_headers, process_token
from bkeeper.namedlog import LogConfig
from bkeeper.testing.cluster import MemoryCluster

from .test_kv_memory import Members, wait_for

TOKEN = "the-members-token.0123456789abcdef"
OTHER = "someone-elses-token.0123456789abcdef"

#: Every route of the member's app: (method, path, JSON body).
ROUTES = [
    ("GET", "/v1/kv/k", None),
    ("GET", "/v1/kv/k?stale=1", None),
    ("PUT", "/v1/kv/k", {"value": "v"}),
    ("DELETE", "/v1/kv/k", None),
    ("POST", "/v1/cas/k", {"expected_version": 0, "value": "v"}),
    ("POST", "/v1/txn", {"ops": [{"op": "put", "key": "t", "value": "T"}]}),
    ("GET", "/v1/range?prefix=", None),
    ("GET", "/v1/status", None),
]


@pytest.fixture
async def secured():
    async with MemoryCluster(3) as cluster:
        group = Members(cluster, LogConfig(tail_poll_ms=50), auth_token=TOKEN)
        try:
            for _ in range(3):
                await group.start()
            await wait_for(lambda: group.leader() is not None)
            yield group
        finally:
            await group.stop_all()


async def _ask(
    session: aiohttp.ClientSession, method: str, url: str, body: object, headers: dict[str, str]
) -> tuple[int, dict[str, object], str]:
    async with session.request(
        method, url, json=body, headers=headers, allow_redirects=False
    ) as response:
        text = await response.text()
        return response.status, await response.json(content_type=None), text


async def test_every_route_needs_the_members_token(secured, caplog):
    caplog.set_level(logging.DEBUG)
    leader = secured.servers[secured.leader()]
    async with aiohttp.ClientSession() as session:
        for method, path, body in ROUTES:
            what = f"{method} {path}"
            status, doc, text = await _ask(session, method, leader.url + path, body, {})
            assert status == 401, what
            assert "Authorization: Bearer" in doc["error"], what
            assert "BKEEPER_AUTH_TOKEN_FILE" in doc["error"], what
            for header in ({"Authorization": f"Bearer {OTHER}"}, {"Authorization": "Basic x"}):
                status, doc, text = await _ask(session, method, leader.url + path, body, header)
                assert status in (401, 403), what
                assert OTHER not in text, what
            status, doc, text = await _ask(
                session, method, leader.url + path, body, {"Authorization": f"Bearer {OTHER}"}
            )
            assert status == 403, what
            status, doc, _ = await _ask(
                session, method, leader.url + path, body, auth_headers(TOKEN)
            )
            assert status in (200, 404), (what, status, doc)
        # Nothing was written without the token: only the authenticated requests' writes.
        assert leader.state.get("t") == ("T", 1)
    assert TOKEN not in caplog.text and OTHER not in caplog.text


async def test_the_client_with_the_token_follows_redirects(secured):
    leader = secured.leader()
    follower = next(i for i in range(3) if i != leader)
    # The client starts at a follower: the 307 to the leader is followed with the header.
    async with KvClient(
        [secured.servers[follower].url], auth_token=TOKEN, coalesce_writes=False
    ) as kv:
        assert await kv.put("a/1", "one") == 1
        assert kv.retries >= 1, "the follower answered a write: no redirect was followed"
        assert await kv.cas("a/1", 1, "uno") == (True, 2)
        assert (await kv.get("a/1")).value == "uno"
        result = await kv.txn([{"op": "put", "key": "a/2", "value": "two"}])
        assert result["applied"] is True
        assert [(i.key, i.value) for i in await kv.range("a/")] == [("a/1", "uno"), ("a/2", "two")]
        assert await kv.delete("a/2") is True
        status = await kv.status(secured.servers[follower].url)
        assert status["member"] == f"m{follower}"
    async with KvClient([secured.servers[follower].url], auth_token=TOKEN) as kv:
        assert await asyncio.gather(kv.put("c/1", "x"), kv.put("c/2", "y")) == [1, 1]


async def test_a_client_without_the_token_is_told_what_is_missing(secured):
    url = secured.servers[secured.leader()].url
    async with KvClient([url], auth_token="", timeout_s=5) as kv:
        with pytest.raises(StateMachineError, match=r"401.*BKEEPER_AUTH_TOKEN_FILE"):
            await kv.get("k")
    async with KvClient([url], auth_token=OTHER, timeout_s=5) as kv:
        with pytest.raises(StateMachineError, match="403") as refused:
            await kv.put("k", "v")
        assert OTHER not in str(refused.value)


async def test_the_client_takes_the_processs_token(secured):
    url = secured.servers[secured.leader()].url
    set_process_security(None, ClientAuthConfig(token=TOKEN))
    try:
        assert process_token() == TOKEN
        async with KvClient([url], timeout_s=5) as kv:
            assert await kv.put("p", "v") == 1
    finally:
        set_process_security(None, None)
    assert process_token() == ""
    assert auth_headers() == {}


async def test_a_member_without_a_token_stays_open():
    async with MemoryCluster(3) as cluster:
        group = Members(cluster, LogConfig(tail_poll_ms=50))
        try:
            await group.start()
            await wait_for(lambda: group.leader() is not None)
            async with aiohttp.ClientSession() as session:
                url = group.servers[0].url + "/v1/status"
                status, doc, _ = await _ask(session, "GET", url, None, {})
                assert status == 200 and doc["leading"] is True
        finally:
            await group.stop_all()


def test_the_config_never_shows_the_token():
    from bkeeper.kv import KvServerConfig

    assert TOKEN not in repr(KvServerConfig(name="s", member_id="m", auth_token=TOKEN))


async def test_followers_probing_a_secured_leader_do_not_depose_it(secured):
    # The crash detector only connects to the leader's port: a member that refuses requests
    # without the token is alive, and its followers leave its election node alone.
    followers = [s for s in secured.servers if not s.rsm.leading]
    await wait_for(lambda: all(s.detector.probes >= 5 for s in followers))
    assert all(s.detector.deposed == 0 for s in followers)
    assert secured.leader() is not None
