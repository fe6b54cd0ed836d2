"""The under-replication nodes operators and the auditor use, on memory:// and a real ZooKeeper:
the lost-bookie delay (Java's decimal text), the current auditor, the lock listing and the
periodic checks' ctimes (Java's binary protobuf)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.meta import ClusterMetadata, auditor_election
from bkeeper.meta.store import join_path
from bkeeper.wire._pb import data_formats_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="session")

OpenCluster = Callable[..., Awaitable[ClusterMetadata]]
WAIT_S = 10.0


@pytest.fixture
async def open_cluster(metadata_uri: str) -> AsyncIterator[OpenCluster]:
    opened: list[ClusterMetadata] = []

    async def open_() -> ClusterMetadata:
        metadata = await ClusterMetadata.open(metadata_uri)
        if not opened:
            await metadata.format()
        opened.append(metadata)
        return metadata

    yield open_
    for metadata in opened:
        await metadata.aclose()


def _node(metadata: ClusterMetadata, name: str) -> str:
    return join_path(metadata.root, "underreplication", name)


async def test_lost_bookie_recovery_delay_in_javas_format(open_cluster: OpenCluster) -> None:
    one, two = await open_cluster(), await open_cluster()
    assert await one.underreplication.lost_bookie_recovery_delay_s() is None
    await one.underreplication.set_lost_bookie_recovery_delay_s(30)
    data, version = await one.store.get(_node(one, "lostBookieRecoveryDelay"))
    assert (data, version) == (b"30", 0)  # Integer.toString, as Java writes and parses it
    assert await two.underreplication.lost_bookie_recovery_delay_s() == 30
    await two.underreplication.set_lost_bookie_recovery_delay_s(0)
    assert await one.underreplication.lost_bookie_recovery_delay_s() == 0
    await one.store.set(_node(one, "lostBookieRecoveryDelay"), b"7")  # as Java's shell would
    assert await two.underreplication.lost_bookie_recovery_delay_s() == 7


async def test_bad_delays_are_refused(open_cluster: OpenCluster) -> None:
    metadata = await open_cluster()
    with pytest.raises(ConfigError, match="lost_bookie_recovery_delay_s: must be in"):
        await metadata.underreplication.set_lost_bookie_recovery_delay_s(-1)
    with pytest.raises(ConfigError, match="lost_bookie_recovery_delay_s: must be an integer"):
        await metadata.underreplication.set_lost_bookie_recovery_delay_s(True)
    assert await metadata.underreplication.lost_bookie_recovery_delay_s() is None
    await metadata.store.create(_node(metadata, "lostBookieRecoveryDelay"), b"soon")
    with pytest.raises(ProtocolError, match="lostBookieRecoveryDelay holds b'soon'"):
        await metadata.underreplication.lost_bookie_recovery_delay_s()


async def test_watch_delay_reports_every_write(open_cluster: OpenCluster) -> None:
    watcher, writer = await open_cluster(), await open_cluster()
    async with contextlib.aclosing(
        watcher.underreplication.watch_lost_bookie_recovery_delay()
    ) as values:
        assert await asyncio.wait_for(anext(values), WAIT_S) is None
        await writer.underreplication.set_lost_bookie_recovery_delay_s(60)
        assert await asyncio.wait_for(anext(values), WAIT_S) == 60
        # triggeraudit rewrites the same value: that write is reported too
        await writer.underreplication.set_lost_bookie_recovery_delay_s(60)
        assert await asyncio.wait_for(anext(values), WAIT_S) == 60
        await writer.underreplication.set_lost_bookie_recovery_delay_s(5)
        assert await asyncio.wait_for(anext(values), WAIT_S) == 5
        await writer.store.delete(_node(writer, "lostBookieRecoveryDelay"))
        assert await asyncio.wait_for(anext(values), WAIT_S) is None


async def test_current_auditor_is_the_first_vote(open_cluster: OpenCluster) -> None:
    one, two, reader = await open_cluster(), await open_cluster(), await open_cluster()
    assert await reader.underreplication.current_auditor() is None
    first = auditor_election(one.store, one.root, "b1:3181")
    async with first:
        await first.wait_leadership(WAIT_S)
        async with auditor_election(two.store, two.root, "b2:3181") as second:
            assert await reader.underreplication.current_auditor() == "b1:3181"
            await first.aclose()
            await second.wait_leadership(WAIT_S)
            assert await reader.underreplication.current_auditor() == "b2:3181"
    assert await reader.underreplication.current_auditor() is None


async def test_locked_lists_ledgers_and_holders(open_cluster: OpenCluster) -> None:
    worker, other, reader = await open_cluster(), await open_cluster(), await open_cluster()
    assert await reader.underreplication.locked() == []
    for ledger_id in (7, 3, 1 << 40):
        await reader.underreplication.mark_underreplicated(ledger_id, ["b1:3181"])
    assert await worker.underreplication.try_lock(7, "b4:3181")
    assert await other.underreplication.try_lock(1 << 40, "b5:3181")
    assert await reader.underreplication.locked() == [(7, "b4:3181"), (1 << 40, "b5:3181")]
    await worker.underreplication.release(7)
    assert await reader.underreplication.locked() == [(1 << 40, "b5:3181")]


async def test_check_ctimes_in_javas_binary_format(open_cluster: OpenCluster) -> None:
    one, two = await open_cluster(), await open_cluster()
    formats = {
        "checkallledgers": ("checkallledgersctime", pb.CheckAllLedgersFormat()),
        "placementpolicycheck": ("placementpolicycheckctime", pb.PlacementPolicyCheckFormat()),
        "replicascheck": ("replicascheckctime", pb.ReplicasCheckFormat()),
    }
    for offset, (check, (node, message)) in enumerate(formats.items()):
        assert await one.underreplication.check_ctime_ms(check) is None
        ms = 1_700_000_000_000 + offset
        await one.underreplication.set_check_ctime_ms(check, ms)
        data, _version = await one.store.get(_node(one, node))
        message.ParseFromString(data)  # toByteArray / parseFrom, as Java does
        assert message.ListFields()[0][1] == ms
        assert await two.underreplication.check_ctime_ms(check) == ms
        await two.underreplication.set_check_ctime_ms(check, ms + 10)
        assert await one.underreplication.check_ctime_ms(check) == ms + 10
    with pytest.raises(ConfigError, match="check: must be one of checkallledgers"):
        await one.underreplication.check_ctime_ms("auditall")


async def test_watch_delay_past_an_unreadable_value(open_cluster: OpenCluster) -> None:
    metadata = await open_cluster()
    node = _node(metadata, "lostBookieRecoveryDelay")
    await metadata.store.create(node, b"soon")
    seen: list[str] = []
    values = metadata.underreplication.watch_lost_bookie_recovery_delay(
        on_unreadable=lambda exc: seen.append(str(exc))
    )
    async with contextlib.aclosing(values):
        assert await asyncio.wait_for(anext(values), WAIT_S) is None
        assert seen == ["lostBookieRecoveryDelay holds b'soon', not whole seconds"]
        await metadata.store.set(node, b"12")
        assert await asyncio.wait_for(anext(values), WAIT_S) == 12
    strict = metadata.underreplication.watch_lost_bookie_recovery_delay()
    await metadata.store.set(node, b"later")
    async with contextlib.aclosing(strict):
        with pytest.raises(ProtocolError, match="not whole seconds"):
            await asyncio.wait_for(anext(strict), WAIT_S)
