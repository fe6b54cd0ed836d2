"""The cluster endpoints (bkeeper.admin) over real HTTP, against an in-memory metadata store:
query and body checks (400 naming the field), paging, shapes, filters, the background jobs,
and a cluster that cannot be reached (503, one line)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from bkeeper.admin import AdminLimits, ClusterAdmin, add_admin_routes
from bkeeper.admin.context import Job
from bkeeper.client import BookKeeper
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.underreplication import BlockedReason
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
from bkeeper.wire.digest import DigestType
from tests.server.admin_client import call

BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")


@dataclass
class Served:
    server: AdminHttpServer
    admin: ClusterAdmin
    cluster: ClusterMetadata

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        server = AdminHttpServer(AdminHttpConfig("127.0.0.1", 0, writes_enabled=True))
        admin = ClusterAdmin(uri, lambda: BOOKIES[0], AdminLimits(ledgers_page_max=2))
        add_admin_routes(server, admin)
        await server.start()
        try:
            yield Served(server, admin, cluster)
        finally:
            await server.aclose()
            await admin.aclose()


async def new_ledger(cluster: ClusterMetadata, ledger_id: int) -> None:
    meta = LedgerMetadata.new(BOOKIES, 2, 2, DigestType.CRC32C, b"secret", ctime_ms=1234)
    await cluster.ledgers.create(meta, ledger_id)


async def test_ledger_list_pages_and_metadata_shape(served: Served) -> None:
    for ledger_id in (5, 7, 9):
        await new_ledger(served.cluster, ledger_id)
    first = await call(served.port, "GET", "/api/v1/ledger/list")
    assert first.json() == {"5": None, "7": None}
    second = await call(served.port, "GET", "/api/v1/ledger/list?page=2&print_metadata=true")
    assert list(second.json()) == ["9"]
    assert second.json()["9"] == {
        "metadataFormatVersion": 3,
        "ensembleSize": 3,
        "writeQuorumSize": 2,
        "ackQuorumSize": 2,
        "lastEntryId": -1,
        "length": 0,
        "digestType": "CRC32C",
        "state": "OPEN",
        "closed": False,
        "ensembles": {"0": list(BOOKIES)},
        "ctime": 1234,
        "cToken": 0,
        "customMetadata": {},
    }
    assert (await call(served.port, "GET", "/api/v1/ledger/list?page=3")).json() == {}
    for query, message in (
        ("page=0", "page: must be at least 1, got 0"),
        ("page=x", "page: must be an integer, got 'x'"),
        ("print_metadata=perhaps", "print_metadata: must be true or false, got 'perhaps'"),
        ("page=1&page=2", "page: given 2 times in the query, once at most"),
    ):
        bad = await call(served.port, "GET", f"/api/v1/ledger/list?{query}")
        assert (bad.status, bad.error) == (400, message)


async def test_metadata_of_a_missing_ledger_is_404(served: Served) -> None:
    missing = await call(served.port, "GET", "/api/v1/ledger/metadata?ledger_id=42")
    assert missing.status == 404 and missing.error.startswith("ledger 42: "), missing.error
    negative = await call(served.port, "GET", "/api/v1/ledger/metadata?ledger_id=-1")
    assert (negative.status, negative.error) == (400, "ledger_id: must be at least 0, got -1")


async def test_under_replicated_filters_and_auditor(served: Served) -> None:
    urm = served.cluster.underreplication
    await urm.mark_underreplicated(1, [BOOKIES[0]])
    await urm.mark_underreplicated(2, [BOOKIES[1]])
    await urm.mark_underreplicated(3, [BOOKIES[0], BOOKIES[2]])
    path = "/api/v1/autorecovery/list_under_replicated_ledger"
    assert (await call(served.port, "GET", path)).json() == [1, 2, 3]
    only = await call(served.port, "GET", f"{path}?missingreplica={BOOKIES[0]}")
    assert only.json() == [1, 3]
    without = await call(
        served.port, "GET", f"{path}?excludingmissingreplica={BOOKIES[2]}&printmissingreplica=1"
    )
    assert without.json() == {"1": [BOOKIES[0]], "2": [BOOKIES[1]]}
    nobody = await call(served.port, "GET", "/api/v1/autorecovery/who_is_auditor")
    assert (nobody.status, nobody.error) == (404, "no auditor is elected")
    refused = await call(served.port, "PUT", "/api/v1/autorecovery/trigger_audit")
    assert (refused.status, refused.error) == (
        409,
        "triggering an audit: no auditor is elected: start `bkeeper autorecovery` or a bookie "
        "with --autorecovery",
    )


async def test_under_replicated_with_why_each_waits(served: Served) -> None:
    """``printreason=true`` (ours): the reason a worker recorded, null where none is; a
    reason left for a ledger no longer queued is not listed."""
    urm = served.cluster.underreplication
    await urm.mark_underreplicated(1, [BOOKIES[0]])
    await urm.mark_underreplicated(2, [BOOKIES[1]])
    why = "no candidate bookie for 10.0.0.1:3181 (segment at entry 0): 2 writable, 2 already"
    await urm.set_blocked(1, BlockedReason("no_candidate", why, 1_700_000_000_000, "w1"))
    await urm.set_blocked(9, BlockedReason("error", "gone", 1, "w1"))
    path = "/api/v1/autorecovery/list_under_replicated_ledger?printreason=true"
    assert (await call(served.port, "GET", path)).json() == {
        "1": {
            "missingReplicas": [BOOKIES[0]],
            "reason": why,
            "reasonKind": "no_candidate",
            "reasonSinceWallMs": 1_700_000_000_000,
        },
        "2": {
            "missingReplicas": [BOOKIES[1]],
            "reason": None,
            "reasonKind": None,
            "reasonSinceWallMs": None,
        },
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "delay_seconds: must be an integer in 0..86400, got None"),
        ({"delay_seconds": -1}, "delay_seconds: must be an integer in 0..86400, got -1"),
        ({"delay_seconds": True}, "delay_seconds: must be an integer in 0..86400, got True"),
        ({"delay_seconds": 5, "x": 1}, "unknown field 'x' in the body; expected delay_seconds"),
    ],
)
async def test_a_bad_delay_is_400_naming_the_field(served: Served, body, message) -> None:
    path = "/api/v1/autorecovery/lost_bookie_recovery_delay"
    answer = await call(served.port, "PUT", path, body)
    assert (answer.status, answer.error) == (400, message)
    assert (await call(served.port, "GET", path)).json() == {"delay_seconds": None}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("bookie", {}, "bookie_src: must be a bookie id or a list of them, got None"),
        ("bookie", {"bookie_src": [1]}, "bookie_src: must be a bookie id or a list of them"),
        ("bookie", {"bookie_src": "a:1", "delete_cookie": "y"}, "delete_cookie: must be true"),
        ("bookie", {"bookie_src": "a:1", "bookies": 1}, "unknown field 'bookies' in the body"),
        ("decommission", {"bookie_src": ["a:1", "b:1"]}, "bookie_src: one bookie at a time"),
    ],
)
async def test_a_bad_job_body_is_400_and_starts_nothing(
    served: Served, path: str, body: Any, message: str
) -> None:
    answer = await call(served.port, "PUT", f"/api/v1/autorecovery/{path}", body)
    assert answer.status == 400 and answer.error.startswith(message), answer.error
    assert served.admin.jobs == {}


async def test_one_job_of_a_kind_at_a_time_and_close_stops_it(served: Served) -> None:
    release = asyncio.Event()

    async def work(client: BookKeeper, job: Job) -> dict[str, Any]:
        job.progress(1, 3)
        await release.wait()
        return {"ok": True}

    client = await served.admin.client()
    job = served.admin.start_job("recover", ("a:1",), work, client)
    with pytest.raises(Exception, match="a recover job is under way already"):
        served.admin.start_job("recover", ("b:1",), work, client)
    await asyncio.sleep(0)
    progress = await call(served.port, "GET", "/api/v1/autorecovery/bookie")
    assert progress.json()["state"] == "running"
    assert (progress.json()["done"], progress.json()["total"]) == (1, 3)
    await served.admin.aclose()
    assert (job.state, job.error) == ("failed", "stopped with the bookie")


async def test_an_unreachable_cluster_is_503_in_one_line() -> None:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"  # never formatted: no cluster there
    server = AdminHttpServer(AdminHttpConfig("127.0.0.1", 0))
    admin = ClusterAdmin(uri, lambda: BOOKIES[0])
    add_admin_routes(server, admin)
    await server.start()
    try:
        answer = await call(server.port, "GET", "/api/v1/bookie/cluster_info")
        assert answer.status == 503
        assert answer.error.startswith(f"cannot reach the cluster at {uri}: "), answer.error
        assert "\n" not in answer.error
    finally:
        await server.aclose()
        await admin.aclose()
