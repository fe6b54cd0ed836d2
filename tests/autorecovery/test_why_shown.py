"""Why a ledger waits, where operators look: ``bkeeper shell listunderreplicated`` (a reason
column, and ``--json``), and the reasons' store beside BookKeeper's marks (Java's mark stays
as Java writes it)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from bkeeper.cli.shell_recovery import listunderreplicated
from bkeeper.common.errors import ProtocolError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.layout import ur_ledger_path
from bkeeper.meta.memory import drop_memory_tree
from bkeeper.meta.underreplication import BlockedReason, ur_blocked_path

WHY = "no candidate bookie for a:3181 (segment at entry 0): 2 writable, 2 already in the ensemble"
SINCE_MS = 1_700_000_000_000


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = uuid.uuid4().hex[:12]
    yield f"memory://{name}/ledgers"
    drop_memory_tree(name)


async def _queue(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        urm = cluster.underreplication
        await urm.mark_underreplicated(1, ["a:3181"])
        await urm.mark_underreplicated(2, ["b:3181"])
        await urm.set_blocked(1, BlockedReason("no_candidate", WHY, SINCE_MS, "w1"))


def test_listunderreplicated_shows_why(memory_uri: str) -> None:
    asyncio.run(_queue(memory_uri))
    shown = CliRunner().invoke(listunderreplicated, ["--metadata", memory_uri])
    assert shown.exit_code == 0, shown.output
    assert "waiting because" in shown.output
    rows = [line for line in shown.output.splitlines() if "a:3181" in line or "b:3181" in line]
    assert len(rows) == 2, shown.output
    assert "no candidate bookie for a:3181" in rows[0]
    assert "no reason recorded" in rows[1]
    listed = CliRunner().invoke(listunderreplicated, ["--metadata", memory_uri, "--json"])
    assert listed.exit_code == 0, listed.output
    first, second = json.loads(listed.output)
    assert (first["reason"], first["reason_kind"], first["reason_since_ms"]) == (
        WHY,
        "no_candidate",
        SINCE_MS,
    )
    assert (second["reason"], second["reason_kind"]) == (None, None)


async def test_reason_store_beside_the_java_mark(memory_uri: str) -> None:
    async with await ClusterMetadata.open(memory_uri) as cluster:
        await cluster.format()
        urm, store = cluster.underreplication, cluster.store
        await urm.mark_underreplicated(7, ["a:3181"])
        mark_before = (await store.get(ur_ledger_path(cluster.root, 7)))[0]
        reason = BlockedReason("no_candidate", WHY, SINCE_MS, "w1")
        await urm.set_blocked(7, reason)
        assert await urm.blocked(7) == reason
        # the mark is untouched: Java reads it with TextFormat, which refuses unknown fields
        assert (await store.get(ur_ledger_path(cluster.root, 7)))[0] == mark_before
        assert ur_blocked_path(cluster.root, 7) == "/ledgers/underreplication/blocked/urL0000000007"
        assert json.loads((await store.get(ur_blocked_path(cluster.root, 7)))[0]) == {
            "kind": "no_candidate",
            "detail": WHY,
            "since_ms": SINCE_MS,
            "worker": "w1",
        }
        # removing the mark (a repair) removes the reason
        assert await urm.lock(7, "w1") is not None
        await urm.mark_replicated(7)
        assert await urm.blocked(7) is None and await urm.blocked_ids() == set()


async def test_reasons_of_ledgers_gone_from_the_queue_are_pruned(memory_uri: str) -> None:
    async with await ClusterMetadata.open(memory_uri) as cluster:
        await cluster.format()
        urm = cluster.underreplication
        await urm.mark_underreplicated(1, ["a:3181"])
        for ledger_id in (1, 2, 3):  # 2 and 3: repaired by a Java worker, say
            await urm.set_blocked(ledger_id, BlockedReason("error", "x", 1, "w"))
        queued = {ledger_id async for ledger_id in urm.ledger_ids()}
        await urm.mark_underreplicated(3, ["a:3181"])  # marked again after the listing
        assert await urm.prune_blocked(queued) == 1
        assert await urm.blocked_ids() == {1, 3}


def test_a_reason_is_validated_and_decoded() -> None:
    with pytest.raises(ProtocolError, match="kind must be a word"):
        BlockedReason("no candidate", "x", 1, "w")
    with pytest.raises(ProtocolError, match="blocked reason is unreadable"):
        BlockedReason.decode(b'{"kind": "x"}')
    long = BlockedReason("error", "line\none " + "x" * 1000, 1, "w")
    assert long.detail.startswith("line one x") and len(long.detail) == 400
    decoded = BlockedReason.decode(long.encode())
    assert decoded == long and decoded.same_as(long)  # a long reason is not written again
