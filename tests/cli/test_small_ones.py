"""Issue 39's small ones: the subject of an error named once, readledger's range checks,
tables that fit 80 columns with titles that never wrap."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from bkeeper.admin import AdminLimits, ClusterAdmin, add_admin_routes
from bkeeper.admin.context import answer_errors
from bkeeper.common.errors import (
    AdminRequestError,
    BookieUnavailableError,
    CallTimeoutError,
    LedgerNotFoundError,
)
from bkeeper.common.messages import in_context
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
from tests.server.admin_client import call


# -- the subject named once ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("what", "message", "expected"),
    [
        ("ledger 999", "ledger 999: no metadata", "ledger 999: no metadata"),
        ("reading ledger 999", "ledger 999: no metadata", "reading ledger 999: no metadata"),
        ("reading ledger 9", "ledger 99: no metadata", "reading ledger 9: ledger 99: no metadata"),
        ("ledger 7", "bookies: name one", "ledger 7: bookies: name one"),
        ("ledger 7", "no colon here", "ledger 7: no colon here"),
    ],
)
def test_in_context_names_the_subject_once(what: str, message: str, expected: str) -> None:
    assert in_context(what, message) == expected


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (LedgerNotFoundError("ledger 7: no metadata"), "reading ledger 7: no metadata"),
        (CallTimeoutError("ledger 7: no answer"), "reading ledger 7: no answer"),
        (
            BookieUnavailableError("ledger 7: b:1 down"),
            "reading ledger 7: BookieUnavailableError: b:1 down",
        ),
    ],
)
async def test_admin_errors_name_the_ledger_once(error: Exception, message: str) -> None:
    with pytest.raises(AdminRequestError) as caught:
        async with answer_errors("reading ledger 7"):
            raise error
    assert str(caught.value) == message


@pytest.fixture
async def admin_port() -> AsyncIterator[int]:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        server = AdminHttpServer(AdminHttpConfig("127.0.0.1", 0, writes_enabled=True))
        admin = ClusterAdmin(uri, lambda: "10.0.0.1:3181", AdminLimits())
        add_admin_routes(server, admin)
        await server.start()
        try:
            yield server.port
        finally:
            await server.aclose()
            await admin.aclose()


@pytest.mark.parametrize(
    ("method", "path", "message"),
    [
        ("GET", "/api/v1/ledger/metadata?ledger_id=999", "ledger 999: no metadata"),
        ("GET", "/api/v1/ledger/read?ledger_id=999", "reading ledger 999: no metadata"),
        ("DELETE", "/api/v1/ledger/delete?ledger_id=999", "deleting ledger 999: no metadata"),
    ],
)
async def test_missing_ledger_over_http_is_named_once(
    admin_port: int, method: str, path: str, message: str
) -> None:
    answer = await call(admin_port, method, path)
    assert (answer.status, answer.error) == (404, message)
