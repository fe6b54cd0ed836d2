"""The admin HTTP answers keep ids in number order (9 before 10), not as text (issue 39)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from bkeeper.admin import AdminLimits, ClusterAdmin, add_admin_routes
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
from bkeeper.server.admin_request import json_response
from bkeeper.wire.digest import DigestType
from tests.server.admin_client import call

BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181")


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, ClusterMetadata]]:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        server = AdminHttpServer(AdminHttpConfig("127.0.0.1", 0, writes_enabled=True))
        admin = ClusterAdmin(uri, lambda: BOOKIES[0], AdminLimits())
        add_admin_routes(server, admin)
        await server.start()
        try:
            yield server.port, cluster
        finally:
            await server.aclose()
            await admin.aclose()


async def test_ledger_list_is_in_id_order(served: tuple[int, ClusterMetadata]) -> None:
    port, cluster = served
    ids = [2, 9, 10, 11, 100, 1000]
    for ledger_id in reversed(ids):
        meta = LedgerMetadata.new(BOOKIES, 2, 2, DigestType.CRC32C, b"pw", ctime_ms=1)
        await cluster.ledgers.create(meta, ledger_id)
    answer = await call(port, "GET", "/api/v1/ledger/list")
    assert answer.body.index(b'"9"') < answer.body.index(b'"10"')
    assert list(answer.json()) == [str(i) for i in ids]


def test_json_keys_numbers_first_then_names() -> None:
    body = json_response({"10": 1, "b": {"12": 0, "3": 0}, "9": 2, "a": 3}).body
    assert isinstance(body, bytes)
    assert body.decode().split() == [
        "{",
        '"9":',
        "2,",
        '"10":',
        "1,",
        '"a":',
        "3,",
        '"b":',
        "{",
        '"3":',
        "0,",
        '"12":',
        "0",
        "}",
        "}",
    ]
