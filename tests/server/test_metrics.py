"""A bookie's metrics, collected in process and parsed as Prometheus text: exact counts."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.common.metrics_export import exposition_text
from bkeeper.server.metrics import bookie_registry
from bkeeper.wire.batch_frames import batch_bodies
from bkeeper.wire.codes import GetBookieInfoField, Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import (
    AddRequest,
    BatchReadRequest,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    ReadRequest,
    WriteLacRequest,
)
from tests.common.test_metrics import samples
from tests.server.test_bookie import KEY, body


def scrape(bookie) -> dict:
    return samples(exposition_text(bookie_registry(bookie.metric_sets)))


def op(name: str, op_name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("op", op_name),))


async def test_requests_journal_and_storage_are_counted(start_bookie, connect):
    bookie = await start_bookie()
    v3 = await connect(bookie, Protocol.V3)
    v2 = await connect(bookie, Protocol.V2)
    added = [body(2, e) for e in range(30)] + [body(1, e) for e in range(50)]
    replies = await asyncio.gather(
        *[v3.send(AddRequest(2, e, KEY, body(2, e))) for e in range(30)],
        *[v2.send(AddRequest(1, e, KEY, body(1, e))) for e in range(50)],
    )
    assert {r.status for r in replies} == {StatusCode.EOK}
    refused = await v3.request(AddRequest(2, 30, master_key(b"other"), body(2, 30)))
    assert refused.status is StatusCode.EUA
    assert (await v3.request(ForceLedgerRequest(2))).status is StatusCode.EOK
    lac = DigestManager(2, DigestType.CRC32C, b"pw").encode_lac(29)
    assert (await v3.request(WriteLacRequest(2, 29, KEY, lac))).status is StatusCode.EOK
    read_bytes = 0
    for entry in (0, 7, 49):
        reply = await v3.request(ReadRequest(1, entry))
        assert reply.status is StatusCode.EOK
        read_bytes += len(reply.body)
    assert (await v3.request(ReadRequest(1, 50))).status is StatusCode.ENOENTRY
    batch = await v2.request(BatchReadRequest(1, 0, 10, 1 << 20, request_id=1))
    bodies_read = batch_bodies(batch)
    assert len(bodies_read) == 10
    read_bytes += sum(len(b) for b in bodies_read)
    poll = await v3.request(ReadRequest(2, 30, previous_lac=40, timeout_ms=50))
    assert poll.status is StatusCode.EOK
    info = GetBookieInfoRequest(GetBookieInfoField.FREE_DISK_SPACE)
    assert (await v3.request(info)).status is StatusCode.EOK
    fenced = await v3.request(ReadRequest(1, -1, fence=True, master_key=KEY))
    assert fenced.status is StatusCode.EOK
    read_bytes += len(fenced.body)

    got = scrape(bookie)
    requests = {
        o: got[op("bkeeper_bookie_requests_total", o)]
        for o in ("add", "read", "long_poll", "batch_read", "write_lac", "force", "get_bookie_info")
    }
    assert requests == {
        "add": 81,
        "read": 5,
        "long_poll": 1,
        "batch_read": 1,
        "write_lac": 1,
        "force": 1,
        "get_bookie_info": 1,
    }
    assert got[op("bkeeper_bookie_request_errors_total", "add")] == 1
    assert got[op("bkeeper_bookie_request_errors_total", "read")] == 1
    assert got[op("bkeeper_bookie_request_errors_total", "batch_read")] == 0
    # Latency: every answered add (refusals have none), every other request.
    assert got[op("bkeeper_bookie_request_latency_seconds_count", "add")] == 80
    assert got[op("bkeeper_bookie_request_latency_seconds_count", "read")] == 5
    poll_latency = got[op("bkeeper_bookie_request_latency_seconds_sum", "long_poll")]
    assert poll_latency >= 0.05  # answered when its 50 ms ran out
    assert got[("bkeeper_bookie_read_bytes_total", ())] == read_bytes
    assert got[("bkeeper_bookie_added_bytes_total", ())] == sum(len(b) for b in added)
    # Journal: 80 adds, 2 master keys, force, explicit LAC, fence: 85 records in groups.
    assert got[("bkeeper_journal_group_commit_entries_sum", ())] == 85
    groups = got[("bkeeper_journal_group_commit_entries_count", ())]
    assert groups == got[("bkeeper_journal_fsync_latency_seconds_count", ())]
    assert groups == got[("bkeeper_journal_queue_wait_seconds_count", ())]
    assert 1 <= groups <= 85
    assert got[("bkeeper_journal_queue_depth", ())] == 0
    assert got[("bkeeper_index_ledgers", ())] == 2
    assert got[("bkeeper_bookie_connections", ())] == 2
    assert got[("bkeeper_bookie_in_flight_requests", ())] == 0
    assert got[("bkeeper_bookie_read_only", ())] == 0
    assert got[("bkeeper_write_cache_bytes", ())] == sum(len(b) for b in added)
    data_dir = bookie.storage_config.data_dir
    disk_dirs = {dict(labels)["dir"] for name, labels in got if name == "bkeeper_disk_free_bytes"}
    assert disk_dirs and all(d.startswith(data_dir) for d in disk_dirs)


async def test_flush_and_index_after_checkpoint(start_bookie, connect):
    bookie = await start_bookie()
    client = await connect(bookie, Protocol.V2)
    bodies = [body(3, e) for e in range(20)]
    replies = await asyncio.gather(
        *[client.send(AddRequest(3, e, KEY, b)) for e, b in enumerate(bodies)]
    )
    assert {r.status for r in replies} == {StatusCode.EOK}
    await asyncio.to_thread(bookie.storage.checkpoint)
    got = scrape(bookie)
    assert got[("bkeeper_write_cache_bytes", ())] == 0
    assert got[("bkeeper_index_entries", ())] == 20
    assert got[("bkeeper_entry_logs", ())] == 1
    assert got[("bkeeper_flush_latency_seconds_count", ())] >= 1
    assert got[("bkeeper_flush_bytes_total", ())] >= sum(len(b) for b in bodies)
    assert got[("bkeeper_entry_log_bytes", ())] >= sum(len(b) for b in bodies)
    assert got[("bkeeper_bookie_added_bytes_total", ())] == sum(len(b) for b in bodies)


async def test_gc_pass_is_counted(start_bookie):
    bookie = await start_bookie()
    report = await bookie.garbage_collector.run_now(major=True)
    got = scrape(bookie)
    assert got[("bkeeper_gc_runs_total", (("kind", "major"),))] == 1
    assert got[("bkeeper_gc_runs_total", (("kind", "minor"),))] == 0
    assert got[("bkeeper_gc_duration_seconds_count", ())] == 1
    assert got[("bkeeper_gc_reclaimed_bytes_total", ())] == report.bytes_freed


async def test_read_only_gauge(start_bookie):
    bookie = await start_bookie(readonly=True)
    assert scrape(bookie)[("bkeeper_bookie_read_only", ())] == 1


async def test_metrics_off_keeps_none(start_bookie, connect):
    bookie = await start_bookie(metrics_enabled=False)
    assert bookie.metrics is None
    assert bookie.metric_sets() == []
    client = await connect(bookie, Protocol.V2)
    assert (await client.request(AddRequest(4, 0, KEY, body(4, 0)))).status is StatusCode.EOK
    assert scrape(bookie) == {}


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
async def test_failed_group_counts_errors(start_bookie, connect, protocol):
    """Adds refused for a reason seen at once count as errors; on a read-only bookie too."""
    bookie = await start_bookie(readonly=True)
    client = await connect(bookie, protocol)
    reply = await client.request(AddRequest(5, 0, KEY, body(5, 0)))
    assert reply.status is StatusCode.EREADONLY
    got = scrape(bookie)
    assert got[op("bkeeper_bookie_requests_total", "add")] == 1
    assert got[op("bkeeper_bookie_request_errors_total", "add")] == 1
    assert got[op("bkeeper_bookie_request_latency_seconds_count", "add")] == 0
