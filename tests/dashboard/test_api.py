"""The dashboard's JSON API against real bookie processes and a real ZooKeeper: bookies
(writable, read-only, down; disk from their admin HTTP), ledgers (state, ensemble, LAC,
size), named logs, the under-replication queue, the auditor, and the bounds.

Four bookies (E3 ensembles with a spare, issue 41: on three, an add a loaded bookie answered
late failed with ``NotEnoughBookiesError``). Tests that stop or restart none share the
module's cluster."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import aiohttp
import pytest

from bkeeper.client import BookKeeper, WriteHandle
from bkeeper.common.errors import ClusterNotFoundError
from bkeeper.dashboard import ClusterMonitor, Dashboard, DashboardConfig
from bkeeper.meta.underreplication import auditor_election
from bkeeper.namedlog import NamedLogs
from bkeeper.testing.clock import FakeClock
from tests.client.conftest import RealCluster, shared_cluster, shared_cluster_left_running

__all__ = ["shared_cluster", "shared_cluster_left_running"]  # the module's cluster, its check


#: Refreshed by the test itself: the background loops would not run during it.
NEVER_MS = 3_600_000
HTTP = ("--http-port", "0")
BOOKIES = 4
#: A stopped bookie's silence is reported after this long.
SILENT_AFTER_MS = 10_000


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("application/json")
        return await response.json()


def config(uri: str, **options: Any) -> DashboardConfig:
    """Refreshed by the test only; bookies given all the time a loaded machine may need."""
    options = {"bookie_request_timeout_ms": 30_000, **options}
    return DashboardConfig(
        uri, port=0, scrape_interval_ms=NEVER_MS, metadata_interval_ms=NEVER_MS, **options
    )


@pytest.mark.parametrize("real_cluster", [(BOOKIES, HTTP)], indirect=True)
async def test_the_api_shows_bookies_ledgers_logs_and_recovery(real_cluster: RealCluster) -> None:
    """Its own cluster: it stops a bookie and restarts another."""
    uri = real_cluster.uri
    ids = sorted(real_cluster.bookie_id(i) for i in range(BOOKIES))
    async with BookKeeper(uri) as bk:
        closed = await bk.create_ledger(3, 2, 2, password=b"pw")
        for _ in range(10):
            await closed.append(b"x" * 100)
        await closed.close()
        writing = await bk.create_ledger(3, 3, 2, password=b"other")
        for _ in range(5):
            await writing.append(b"y" * 10)  # one at a time: the bookies know LAC 3
        logs = NamedLogs(bk)
        log = await logs.create("orders")
        async with await log.open_writer() as writer:
            await writer.append(b"first")
            log_ledger = writer.ledger_id
        urm = bk.cluster.underreplication
        await urm.mark_underreplicated(closed.ledger_id, ["127.0.0.1:1"])
        assert await urm.try_lock(closed.ledger_id, "worker-7:3181")
        async with auditor_election(bk.cluster.store, bk.cluster.root, "auditor-1:3181") as vote:
            await vote.wait_leadership(30)
            board = Dashboard(config(uri, bookie_request_timeout_ms=SILENT_AFTER_MS))
            url = await board.start()
            try:
                async with aiohttp.ClientSession() as session:
                    await check_api(session, url, real_cluster, ids, closed,
                                    writing.ledger_id, log_ledger)  # fmt: skip
                    await check_down_and_read_only(session, url, board, real_cluster, ids)
            finally:
                await board.aclose()
        await writing.close()


async def check_api(
    session: aiohttp.ClientSession,
    url: str,
    real_cluster: RealCluster,
    ids: list[str],
    closed: WriteHandle,
    writing_id: int,
    log_ledger: int,
) -> None:
    closed_id = closed.ledger_id
    overview = await get(session, url + "api/overview")
    assert overview["cluster"]["metadata_uri"] == real_cluster.uri
    assert [(b["bookie_id"], b["state"]) for b in overview["bookies"]] == [
        (bookie, "writable") for bookie in ids
    ]
    statvfs = os.statvfs(real_cluster.data_dir)
    for bookie in overview["bookies"]:
        assert bookie["http_url"].startswith("http://127.0.0.1:")
        assert bookie["http_error"] is None
        assert bookie["reported_read_only"] is False
        assert bookie["total_bytes"] == statvfs.f_blocks * statvfs.f_frsize
        assert 0 < bookie["free_bytes"] <= bookie["total_bytes"]
        assert bookie["metrics_error"] is None
    assert overview["errors"] == {}
    assert overview["bookies_more"] == 0

    recovery = overview["recovery"]
    assert recovery["auditor"] == "auditor-1:3181"
    assert recovery["enabled"] is True
    assert recovery["under_replicated"] == 1
    assert recovery["rows"] == [
        {
            "ledger_id": closed_id,
            "missing_replicas": ["127.0.0.1:1"],
            "ctime_ms": recovery["rows"][0]["ctime_ms"],
            "worker": "worker-7:3181",
            "reason": None,
            "reason_kind": None,
            "reason_since_ms": None,
        }
    ]
    assert recovery["being_replicated"] == [[closed_id, "worker-7:3181"]]
    assert await get(session, url + "api/recovery") == recovery

    ledgers = await get(session, url + "api/ledgers")
    assert (ledgers["total"], ledgers["total_is_lower_bound"], ledgers["more"]) == (3, False, 0)
    rows = {row["ledger_id"]: row for row in ledgers["ledgers"]}
    assert [row["ledger_id"] for row in ledgers["ledgers"]] == sorted(rows, reverse=True)
    assert rows[closed_id]["state"] == "CLOSED"
    assert (rows[closed_id]["last_entry_id"], rows[closed_id]["lac"]) == (9, 9)
    assert rows[closed_id]["length_bytes"] == 1000
    assert rows[closed_id]["quorum"] == "3/2/2"
    assert sorted(rows[closed_id]["ensemble"]) == sorted(closed.ensemble)
    assert rows[writing_id]["state"] == "OPEN"
    assert (rows[writing_id]["lac"], rows[writing_id]["lac_error"]) == (3, None)
    assert rows[writing_id]["last_entry_id"] is None
    assert rows[log_ledger]["state"] == "CLOSED"

    logs = await get(session, url + "api/logs")
    assert logs["total"] == 1 and logs["more"] == 0
    [log] = logs["logs"]
    assert (log["name"], log["ledgers"], log["last_ledger_id"]) == ("orders", 1, log_ledger)
    assert log["size_bytes"] == rows[log_ledger]["length_bytes"] > 0
    assert log["error"] is None

    series = await get(session, url + "api/series")
    assert series["metrics_available"] is True
    assert series["bookies"] == {  # one scrape each so far: no interval yet
        bookie: {"time_ms": [], "adds_per_s": [], "reads_per_s": [], "add_p99_ms": []}
        for bookie in ids
    }
    assert series["under_replicated"]["count"] == [1]


async def until_writable(board: Dashboard, bookie_id: str, timeout_s: float = 60.0) -> None:
    """Refresh the board's bookies until ``bookie_id`` is registered writable (a hang guard
    of ``timeout_s``)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        await board.monitor.refresh_bookies()
        states = {row["bookie_id"]: row["state"] for row in board.monitor.bookies}
        if states.get(bookie_id) == "writable":
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{bookie_id} not writable again within {timeout_s} s: {states}")
        await asyncio.sleep(0.1)


async def check_down_and_read_only(
    session: aiohttp.ClientSession,
    url: str,
    board: Dashboard,
    real_cluster: RealCluster,
    ids: list[str],
) -> None:
    stopped = real_cluster.index_of(ids[0])
    real_cluster.signal(stopped, signal.SIGSTOP)  # registered, but its admin HTTP is silent
    try:
        await board.monitor.refresh_bookies()
    finally:
        real_cluster.signal(stopped, signal.SIGCONT)
    overview = await get(session, url + "api/overview")
    silent = overview["bookies"][0]
    assert (silent["bookie_id"], silent["state"]) == (ids[0], "writable")
    assert silent["http_error"] == f"{silent['http_url']}: no answer in time"
    assert silent["metrics_error"] == f"{silent['http_url']}/metrics: no answer in time"
    assert (silent["free_bytes"], silent["adds_per_s"]) == (None, None)
    # The pause (SILENT_AFTER_MS) can outlast the bookie's ZooKeeper session (10 s): then the
    # resumed bookie finds it expired and registers again. Either way it ends registered:
    # wait for that before the next check, which expects every other bookie writable.
    await until_writable(board, ids[0])

    index = real_cluster.index_of(ids[-1])
    assert real_cluster.stop(index) == 0
    await board.monitor.refresh_bookies()
    overview = await get(session, url + "api/overview")
    states = [(b["bookie_id"], b["state"], b["http_error"]) for b in overview["bookies"]]
    assert states == [
        (bookie, "down", "not registered: the bookie is down")
        if bookie == ids[-1]
        else (bookie, "writable", None)
        for bookie in ids
    ]
    real_cluster.start(index, *HTTP, "--readonly", "--no-metrics")
    await board.monitor.refresh_bookies()
    overview = await get(session, url + "api/overview")
    [restarted] = [b for b in overview["bookies"] if b["bookie_id"] == ids[-1]]
    assert (restarted["state"], restarted["reported_read_only"]) == ("read-only", True)
    assert restarted["http_error"] is None
    assert restarted["metrics_error"] == "no metrics (the bookie serves no /metrics)"


@pytest.mark.parametrize("shared_cluster", [(BOOKIES, HTTP)], indirect=True)
async def test_rates_and_add_latency_come_from_each_bookies_metrics(
    shared_cluster: RealCluster,
) -> None:
    clock = FakeClock()
    monitor = ClusterMonitor(config(shared_cluster.uri), clock)
    await monitor.start()  # the first scrape of each bookie
    try:
        async with BookKeeper(shared_cluster.uri) as bk:
            handle = await bk.create_ledger(3, 3, 3)  # every add on every bookie of 3
            for _ in range(40):
                await handle.append(b"z" * 50)
            await handle.close()
            # One ensemble (a change would have sent some adds to a fourth bookie).
            assert handle.metadata.segments == {0: handle.ensemble}
            reader = await bk.open_ledger(handle.ledger_id)
            for entry_id in range(10):  # one entry per read: one bookie answers each
                [entry] = [e async for e in reader.read(entry_id, entry_id)]
                assert entry.entry_id == entry_id
        clock.advance(4.0)
        await monitor.refresh_bookies()
    finally:
        await monitor.aclose()
    ids = sorted(shared_cluster.bookie_id(i) for i in range(BOOKIES))
    adds = {bookie: 40 if bookie in handle.ensemble else 0 for bookie in ids}
    rows = {b["bookie_id"]: b for b in monitor.bookies}
    assert sorted(rows) == ids
    for bookie in ids:
        assert rows[bookie]["adds_per_s"] == adds[bookie] / 4.0
        p99_ms = rows[bookie]["add_p99_ms"]
        if adds[bookie]:
            assert p99_ms is not None and 0 < p99_ms <= 10_000
    assert sum(rows[b]["reads_per_s"] for b in ids) * 4.0 == 10
    series = monitor.series()
    assert series["metrics_available"] is True
    for bookie in ids:
        points = series["bookies"][bookie]
        assert points["time_ms"] == [clock.wall_ms()]
        assert points["adds_per_s"] == [adds[bookie] / 4.0]
        assert points["add_p99_ms"] == [rows[bookie]["add_p99_ms"]]


@pytest.mark.parametrize("shared_cluster", [(BOOKIES, HTTP)], indirect=True)
async def test_lists_are_bounded_and_say_how_many_more(shared_cluster: RealCluster) -> None:
    """On the module's cluster: the ledgers its other tests made (older) count too."""
    async with BookKeeper(shared_cluster.uri) as bk:
        before = [ledger_id async for ledger_id in bk.cluster.ledgers.ledger_ids()]
        made = []
        for _ in range(4):
            handle = await bk.create_ledger(3, 2, 2)
            await handle.close()
            made.append(handle.ledger_id)
        logs = NamedLogs(bk)
        for name in ("a", "b", "c"):
            await logs.create(name)
        urm = bk.cluster.underreplication
        for ledger_id in made:
            await urm.mark_underreplicated(ledger_id, ["127.0.0.1:1"])
    scanned = sorted([*before, *made])[:3]  # the monitor scans ledger ids in order
    monitor = ClusterMonitor(
        config(
            shared_cluster.uri,
            ledgers_shown_max=2,
            ledgers_scanned_max=3,
            logs_shown_max=2,
            under_replicated_shown_max=1,
            under_replicated_scanned_max=3,
            bookies_max=2,
        )
    )
    await monitor.start()
    try:
        ledgers = monitor.ledgers
        assert (ledgers["total"], ledgers["total_is_lower_bound"], ledgers["more"]) == (3, True, 1)
        assert [row["ledger_id"] for row in ledgers["ledgers"]] == scanned[::-1][:2]
        assert (monitor.logs["total"], monitor.logs["more"]) == (3, 1)
        assert [log["name"] for log in monitor.logs["logs"]] == ["a", "b"]
        recovery = monitor.recovery
        assert (recovery["under_replicated"], recovery["under_replicated_is_lower_bound"]) == (
            3,
            True,
        )
        assert [row["ledger_id"] for row in recovery["rows"]] == [made[0]]
        assert recovery["auditor"] is None
        ids = sorted(shared_cluster.bookie_id(i) for i in range(BOOKIES))
        assert [b["bookie_id"] for b in monitor.bookies] == ids[:2]
        assert monitor.overview()["bookies_more"] == BOOKIES - 2
    finally:
        await monitor.aclose()


async def test_a_uri_without_a_cluster_is_refused_naming_it(zookeeper: Any) -> None:
    uri = zookeeper.uri("/nothing-here/ledgers")
    with pytest.raises(ClusterNotFoundError, match=r"^no cluster at .*nothing-here"):
        await Dashboard(config(uri)).start()


@pytest.mark.parametrize("real_cluster", [(1, (*HTTP, "--no-metrics"))], indirect=True)
async def test_bookies_without_metrics_are_said_to_have_none(real_cluster: RealCluster) -> None:
    clock = FakeClock()
    monitor = ClusterMonitor(config(real_cluster.uri), clock)
    await monitor.start()
    try:
        clock.advance(2.0)
        await monitor.refresh_bookies()
        [bookie] = monitor.bookies
        assert bookie["http_error"] is None and bookie["total_bytes"] is not None
        assert bookie["metrics_error"] == "no metrics (the bookie serves no /metrics)"
        assert bookie["adds_per_s"] is None
        series = monitor.series()
        assert (series["metrics_available"], series["bookies"]) == (False, {})
    finally:
        await monitor.aclose()
